import type { LaunchConfig, Stream } from '@metrale/core';

// Launch shapes of the DSA kernels, in one place. The CUDA kernels (kernels/*.cu) are written for
// these; the CPU twins run the whole launch at once and only have them checked against the device
// limits. A kernel must tolerate extra CTAs (it returns early for rows ≥ rowStarts[batch]).
// Where a kernel has a fast path, the predicate here and the kernel's agree, and the kernel also
// checks that the launch gave it the shared memory the fast path needs (else it takes the generic
// path, or traps when even that does not fit).

/** Per-row kernels (dsa.mla_append, dsa.index_append, dsa.pool_append, dsa.ring_store, dsa.q_rope): one CTA per row. */
export function rowLaunch(rows: number, stream: Stream): LaunchConfig {
  return { grid: Math.max(rows, 1), block: 128, stream };
}

/** Keys one tile of dsa.index_score's fast path holds (its CTAs stride over tiles). */
export const INDEX_KEY_TILE = 128;

/** Multiprocessors assumed when the device does not say (an H200 has 132). */
export const DEFAULT_MULTIPROCESSORS = 132;

export interface IndexScoreShape {
  readonly dI: number;
  readonly idxHeads: number;
  /** 0 f32, 1 bf16, 2 fp8. */
  readonly idxDtype: number;
  /** The device's multiprocessor count (GpuBackend.device.multiprocessors). */
  readonly multiprocessors?: number;
}

/** dsa.index_score runs on tensor cores: d_I = 128, H_I a multiple of 8 up to 32, bf16 or fp8 keys. */
export function indexScoreFast(s: IndexScoreShape): boolean {
  return s.dI === 128 && s.idxHeads >= 8 && s.idxHeads <= 32 && s.idxHeads % 8 === 0 && (s.idxDtype === 1 || s.idxDtype === 2);
}

/** Dynamic shared memory of dsa.index_score (kernels/dsa-index.cu): a 4-stage ring of 128-key tiles, or the generic path's f32 tile. */
export function indexScoreSharedBytes(s: IndexScoreShape): number {
  if (indexScoreFast(s)) return s.idxDtype === 2 ? 4 * 128 * 128 + 4 * 128 * 4 + 128 * 256 : 4 * 128 * 256;
  return s.dI * 65 * 4 + 4 * 64 * 4;
}

/**
 * dsa.index_score: grid [G, batch positions], 256 threads. Each CTA strides over the key tiles of
 * its sequence (tile x, x + G, …); G = ⌊multiprocessors / batch⌋ (at least 1, at most the tiles of
 * the longest possible row), so the CTAs of a decode step are one wave of one CTA per SM.
 */
export function indexScoreLaunch(keyCapacity: number, batch: number, shape: IndexScoreShape, stream: Stream): LaunchConfig {
  const sms = Math.max(1, shape.multiprocessors ?? DEFAULT_MULTIPROCESSORS);
  const tiles = Math.max(1, Math.ceil(keyCapacity / INDEX_KEY_TILE));
  const per = Math.max(1, Math.min(tiles, Math.floor(sms / Math.max(batch, 1))));
  return { grid: [per, Math.max(batch, 1)], block: 256, sharedBytes: indexScoreSharedBytes(shape), stream };
}

/** CTAs that share one row of dsa.topk (a cluster on sm_90). */
export const TOPK_CTAS_PER_ROW = 8;
/** Fixed part of dsa.topk's dynamic shared memory: the local histogram, 3 merged ones, small arrays. */
export const TOPK_FIXED_BYTES = 4 * 2048 + 3 * 4 * 2048 + 512;
/** Candidates a CTA of dsa.topk keeps in shared memory at most (the rest it re-reads from the score buffer). */
export const TOPK_CACHE_MAX = 16384;

/** dsa.topk: grid [8, rowCount] (a cluster of 8 CTAs per row), 512 threads, each CTA caching its eighth of the row. */
export function topkLaunch(rowCount: number, keyCapacity: number, stream: Stream): LaunchConfig {
  const cache = Math.min(Math.ceil(Math.max(keyCapacity, 1) / TOPK_CTAS_PER_ROW), TOPK_CACHE_MAX);
  return { grid: [TOPK_CTAS_PER_ROW, Math.max(rowCount, 1)], block: 512, sharedBytes: TOPK_FIXED_BYTES + 4 * cache, stream };
}

export interface SparseAttnShape {
  readonly heads: number;
  readonly kvLora: number;
  readonly rope: number;
  readonly selWidth: number;
  /** 0 f32, 1 bf16. */
  readonly kvDtype: number;
}

/** CTAs that share one row of dsa.sparse_attn (a cluster on sm_90). */
export const SPARSE_ATTN_CTAS_PER_ROW = 4;

/** The tensor-core form of dsa.sparse_attn: 64 heads, kv_lora 512, rope 64 or 0, on sm_90 (or the CPU backend, cc 0). */
export function sparseAttnFast(s: SparseAttnShape, computeCapability?: readonly number[]): boolean {
  const cc = computeCapability?.[0] ?? 9;
  return s.heads === 64 && s.kvLora === 512 && (s.rope === 64 || s.rope === 0) && (s.kvDtype === 0 || s.kvDtype === 1) && (cc === 0 || cc >= 9);
}

/** Dynamic shared memory of dsa.sparse_attn (kernels/dsa-attn.cu SaCfg::BYTES, or the generic path's q and logits). */
export function sparseAttnSharedBytes(s: SparseAttnShape, computeCapability?: readonly number[]): number {
  const lat = s.kvLora + s.rope;
  if (sparseAttnFast(s, computeCapability)) {
    const f32 = s.kvDtype === 0;
    const T = f32 ? 32 : 64;
    const tile = T * lat * (f32 ? 4 : 2);
    return 64 * lat * 2 + 2 * tile + 64 * T * 2 + 1024 + 256 + 512 + 256;
  }
  return (lat + 32 + s.selWidth) * 4;
}

/** dsa.sparse_attn: grid [4, rows] (a cluster of 4 CTAs per row on sm_90: each a quarter of the row's tokens), 256 threads. */
export function sparseAttnLaunch(rows: number, shape: SparseAttnShape, stream: Stream, computeCapability?: readonly number[]): LaunchConfig {
  return {
    grid: [SPARSE_ATTN_CTAS_PER_ROW, Math.max(rows, 1)], block: 256, sharedBytes: sparseAttnSharedBytes(shape, computeCapability), stream,
  };
}
