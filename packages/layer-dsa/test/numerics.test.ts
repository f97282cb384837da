// The element formats and the top-k rule the CPU twins define and the CUDA kernels must match.
import { describe, expect, it } from 'vitest';
import { applyRope, e4m3ToF32, f32ToE4m3, fp8Scale, ropeInvFreq, selectTopk } from '@metrale/layer-dsa';

describe('FP8 E4M3 (fn)', () => {
  it('every finite code decodes and encodes back to itself', () => {
    for (let b = 0; b < 256; b++) {
      const x = e4m3ToF32(b);
      if (Number.isNaN(x)) continue;
      const back = f32ToE4m3(x);
      // +0 and −0 are distinct codes.
      expect(back, `code 0x${b.toString(16)} (${x})`).toBe(b);
    }
  });

  it('rounds to nearest even, saturates at ±448, keeps subnormals', () => {
    expect(e4m3ToF32(0x7e)).toBe(448);
    expect(f32ToE4m3(1000)).toBe(0x7e);
    expect(f32ToE4m3(-1000)).toBe(0xfe);
    expect(f32ToE4m3(1 + 1 / 16)).toBe(f32ToE4m3(1)); // halfway between 1 and 1.125: even mantissa (1)
    expect(e4m3ToF32(f32ToE4m3(1 + 3 / 16))).toBe(1.25); // halfway between 1.125 and 1.25: even (1.25)
    expect(e4m3ToF32(f32ToE4m3(2 ** -9))).toBe(2 ** -9);
    expect(f32ToE4m3(2 ** -11)).toBe(0); // below half the smallest subnormal
    expect(Number.isNaN(e4m3ToF32(0x7f))).toBe(true);
  });

  it('a per-row scale of amax / 448 maps the largest element to ±448', () => {
    const row = Float32Array.of(0.5, -3.5, 2);
    const s = fp8Scale(row, 0, 3);
    expect(s).toBe(Math.fround(3.5 / 448));
    expect(e4m3ToF32(f32ToE4m3(Math.fround(-3.5 / s))) * s).toBeCloseTo(-3.5, 6);
    expect(fp8Scale(new Float32Array(4), 0, 4)).toBe(1);
  });
});

describe('the top-k rule', () => {
  it('keeps the highest scores, ties to the lower index, returned in ascending index order', () => {
    expect([...selectTopk(Float32Array.of(0.5, 2, 1, 2, 3), 5, 3)]).toEqual([1, 3, 4]);
    expect([...selectTopk(Float32Array.of(1, 1, 1, 1), 4, 2)]).toEqual([0, 1]);
    expect([...selectTopk(Float32Array.of(0, -0, 0, 5), 4, 2)]).toEqual([0, 3]); // −0 ties with +0
    expect([...selectTopk(Float32Array.of(-1, -2), 2, 5)]).toEqual([0, 1]); // fewer candidates than k: all
  });
});

describe('RoPE', () => {
  it('interleaved and half-split rotate the same pairs, laid out the same way after a permutation', () => {
    const inv = ropeInvFreq(10000, 8);
    const x = Float64Array.of(1, 2, 3, 4, 5, 6, 7, 8);
    const inter = x.slice();
    applyRope(inter, 0, 8, 5, inv, true, new Float64Array(8));
    // Half-split of the de-interleaved input (evens then odds) is the interleaved result.
    const deint = Float64Array.of(1, 3, 5, 7, 2, 4, 6, 8);
    applyRope(deint, 0, 8, 5, inv, false, new Float64Array(8));
    expect([...inter]).toEqual([...deint]);
    // Position 0 only de-interleaves.
    const zero = x.slice();
    applyRope(zero, 0, 8, 0, inv, true, new Float64Array(8));
    expect([...zero]).toEqual([1, 3, 5, 7, 2, 4, 6, 8]);
  });

  it('inv_freq in f32 as HF computes it', () => {
    const inv = ropeInvFreq(10000, 4);
    expect(inv[0]).toBe(1);
    expect(inv[1]).toBe(Math.fround(1 / Math.fround(10000 ** 0.5)));
  });
});
