import { E4M3_MAX, E4M3_VALUES, bf16BitsToF32, f32ToBf16Bits, f32ToE4m3, type DeviceMemoryView, type DevicePtr } from '@metrale/core';

// Element formats and small functions shared by the CPU twins (KERNELS.md, "Numerics"). The CUDA
// kernels implement the same definitions. E4M3 coding is core's: the weights' FP8 and the indexer
// cache's are the same format.

export { E4M3_MAX, e4m3ToF32, f32ToE4m3 } from '@metrale/core';

/** Per-token FP8 scale of a key row: amax / 448 in f32 (1 for an all-zero row). */
export function fp8Scale(row: ArrayLike<number>, off: number, n: number): number {
  let amax = 0;
  for (let i = 0; i < n; i++) amax = Math.max(amax, Math.abs(row[off + i]!));
  return amax > 0 ? Math.fround(Math.fround(amax) / E4M3_MAX) : 1;
}

/** Bytes of one element of a cache of the given device dtype code (0 f32, 1 bf16, 2 fp8). */
export function elementBytes(code: number): number {
  return code === 0 ? 4 : code === 1 ? 2 : 1;
}

/**
 * Writes `n` values into a cache row of dtype `code` at element `index` (row-major from `base`),
 * and for fp8 the row's scale into `scales[index / n]`.
 */
export function storeRow(mem: DeviceMemoryView, code: number, base: DevicePtr, scales: DevicePtr, rowIndex: number, values: ArrayLike<number>, off: number, n: number): void {
  if (code === 0) {
    const dst = mem.f32(base + BigInt(rowIndex * n * 4), n);
    for (let i = 0; i < n; i++) dst[i] = values[off + i]!;
  } else if (code === 1) {
    const dst = mem.u16(base + BigInt(rowIndex * n * 2), n);
    for (let i = 0; i < n; i++) dst[i] = f32ToBf16Bits(values[off + i]!);
  } else {
    const scale = fp8Scale(values, off, n);
    mem.f32(scales + BigInt(rowIndex * 4), 1)[0] = scale;
    const dst = mem.u8(base + BigInt(rowIndex * n), n);
    for (let i = 0; i < n; i++) dst[i] = f32ToE4m3(Math.fround(Math.fround(values[off + i]!) / scale));
  }
}

/** Reads a cache row of dtype `code` as values (fp8: code value × the row's scale). */
export function loadRow(mem: DeviceMemoryView, code: number, base: DevicePtr, scales: DevicePtr, rowIndex: number, n: number, out: Float64Array): Float64Array {
  if (code === 0) {
    const src = mem.f32(base + BigInt(rowIndex * n * 4), n);
    for (let i = 0; i < n; i++) out[i] = src[i]!;
  } else if (code === 1) {
    const src = mem.u16(base + BigInt(rowIndex * n * 2), n);
    for (let i = 0; i < n; i++) out[i] = bf16BitsToF32(src[i]!);
  } else {
    const scale = mem.f32(scales + BigInt(rowIndex * 4), 1)[0]!;
    const src = mem.u8(base + BigInt(rowIndex * n), n);
    for (let i = 0; i < n; i++) out[i] = E4M3_VALUES[src[i]!]! * scale;
  }
  return out;
}

/** inv_freq[i] = 1 / θ^(2i/d) in f32, as HF's default rotary embedding computes it. */
export function ropeInvFreq(theta: number, dims: number): Float32Array {
  const out = new Float32Array(dims / 2);
  for (let i = 0; i < dims / 2; i++) out[i] = Math.fround(1 / Math.fround(theta ** Math.fround((2 * i) / dims)));
  return out;
}

/**
 * Rotates `dims` channels of `x` starting at `off`, in place, for position `pos`. Angle
 * θ_i = f32(inv_freq[i] · pos), cos and sin rounded to f32 (HF computes them in f32). Interleaved:
 * pairs (x_{2i}, x_{2i+1}); half-split: pairs (x_i, x_{i+d/2}). Both write the rotated pair to
 * (out_i, out_{i+d/2}) = (a·cos − b·sin, b·cos + a·sin), so the interleaved form comes out
 * de-interleaved, as HF writes it, identically for queries and keys.
 */
export function applyRope(x: Float64Array | Float32Array, off: number, dims: number, pos: number, invFreq: Float32Array, interleave: boolean, scratch: Float64Array): void {
  const half = dims / 2;
  for (let i = 0; i < half; i++) {
    const a = interleave ? x[off + 2 * i]! : x[off + i]!;
    const b = interleave ? x[off + 2 * i + 1]! : x[off + half + i]!;
    const angle = Math.fround(invFreq[i]! * pos);
    const c = Math.fround(Math.cos(angle));
    const s = Math.fround(Math.sin(angle));
    scratch[i] = a * c - b * s;
    scratch[half + i] = b * c + a * s;
  }
  for (let i = 0; i < dims; i++) x[off + i] = scratch[i]!;
}

/** Batch position of a row: the last p with rowStarts[p] ≤ row. */
export function positionOfRow(rowStarts: Int32Array, batch: number, row: number): number {
  let lo = 0;
  let hi = batch - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (rowStarts[mid]! <= row) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** Canonical f32 score for ordering: −0 becomes +0 (KERNELS.md, top-k tie rule). */
export function canonicalScore(s: number): number {
  return s === 0 ? 0 : s;
}

/**
 * The top-k rule of `dsa.topk`: the `k` candidates of highest score, ties broken by the lower
 * candidate index; returned in ascending index order. Scores are compared as f32 values.
 */
export function selectTopk(scores: ArrayLike<number>, count: number, k: number): Int32Array {
  if (k >= count) return Int32Array.from({ length: count }, (_, i) => i);
  const order = Int32Array.from({ length: count }, (_, i) => i);
  order.sort((a, b) => canonicalScore(scores[b]!) - canonicalScore(scores[a]!) || a - b);
  return order.subarray(0, k).sort();
}
