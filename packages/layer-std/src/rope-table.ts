/**
 * cos and sin of every (position, frequency) pair, f32 [positions][rotaryDim / 2], computed the
 * way transformers' default RoPE computes them: inv_freq = 1 / θ^(2i / dim) in f32, the angle as
 * one f32 product inv_freq · position, cos and sin rounded to f32 (HF forces f32 here even when the
 * model runs in f64), so positions far into a sequence round as in the reference.
 */
export function ropeTable(positions: number, rotaryDim: number, theta: number): { cos: Float32Array; sin: Float32Array } {
  const half = rotaryDim / 2;
  const f = Math.fround;
  const invFreq = Float32Array.from({ length: half }, (_, i) => f(1 / f(theta ** f((2 * i) / rotaryDim))));
  const cos = new Float32Array(positions * half);
  const sin = new Float32Array(positions * half);
  for (let p = 0; p < positions; p++) {
    for (let i = 0; i < half; i++) {
      const angle = f(invFreq[i]! * p);
      cos[p * half + i] = Math.cos(angle);
      sin[p * half + i] = Math.sin(angle);
    }
  }
  return { cos, sin };
}
