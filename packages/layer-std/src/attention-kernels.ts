import { defineKernel, type FloatDtype, type Kernel, type LaunchConfig, type StepPhase, type Stream } from '@metrale/core';
import { DECODE_TILE_KEYS, DECODE_WARPS, MAX_KEY_CHUNKS, MIN_KEY_CHUNK } from './key-chunks.js';
import { combineCpu, coreCpu, decodeCpu, prefillCpu, prepCpu } from './attention.cpu.js';
import { attentionModule as module, attentionDecodeModule, attentionPrefillModule } from './std-modules.js';

/** `dtype`: the row type of qkv, q, the caches and out (FLOAT_DTYPE_CODE); each kernel's symbol is of one type and checks it. */
const COMMON = {
  qkv: 'ptr', kCache: 'ptr', vCache: 'ptr', blockTable: 'ptr', slots: 'ptr', rowStarts: 'ptr', positions: 'ptr',
  batch: 'i32', heads: 'i32', kvHeads: 'i32', headDim: 'i32', pageSize: 'i32', maxPages: 'i32', gated: 'i32', dtype: 'i32', ownKv: 'i32',
} as const;

const PREP_PARAMS = {
  ...COMMON, q: 'ptr', qNorm: 'ptr', kNorm: 'ptr', cos: 'ptr', sin: 'ptr', rotaryDim: 'i32', maxPositions: 'i32', eps: 'f32', normOffset: 'f32',
  roundNormalized: 'i32', vNorm: 'i32',
} as const;
const PREFILL_PARAMS = { ...COMMON, q: 'ptr', out: 'ptr', scale: 'f32', window: 'i32' } as const;
/** `chunks`: the most chunks a row's keys are cut into (1: none); `partials`: their f32 records (`partialsBytes`). */
const CORE_PARAMS = { ...PREFILL_PARAMS, chunks: 'i32', partials: 'ptr' } as const;

/** The attention kernels of one row type. */
export interface AttentionKernels {
  /** Per row: q heads normed and rotated into `q`; with `ownKv`, k (normed, rotated) and v (RMS-normalised when `vNorm`) into the paged cache. */
  readonly prep: Kernel<typeof PREP_PARAMS>;
  /**
   * Per row, kv head and chunk of keys: softmax(q·Kᵀ · scale) V over positions 0..pos (pos − window
   * + 1..pos with a window) of the row's sequence for the GQA group's heads, times sigmoid(gate); a
   * row of several chunks leaves their partial records for `combine`.
   */
  readonly core: Kernel<typeof CORE_PARAMS>;
  /** Per row and head of several chunks: the chunks' records merged into the output (the same arguments as `core`). */
  readonly combine: Kernel<typeof CORE_PARAMS>;
  /**
   * `core` of a prefill on tensor cores (bf16 / f16 rows; kernels/std-attention-prefill.cu): the same
   * parameters and result, with P rounded to the row type before P·V per key tile (its twin,
   * `prefillCpu`, rounds the same way). Absent for f32, the reference path.
   */
  readonly prefill?: Kernel<typeof PREFILL_PARAMS>;
  /**
   * `core` of decode and verify rows on tensor cores (bf16 / f16 rows;
   * kernels/std-attention-decode.cu): the same parameters, chunks and records, with P rounded to the
   * row type before P·V per tile of 16 keys (its twin, `decodeCpu`, rounds the same way). Absent for
   * f32, the reference path.
   */
  readonly decode?: Kernel<typeof CORE_PARAMS>;
}

const SUFFIX: Readonly<Record<FloatDtype, string>> = { f32: '', bf16: '_bf16', f16: '_f16' };

// 'wait-first': every kernel but the prefill begins with early_start() (std-common.cuh), so every
// launch of it starts early.
function attentionKernelsOf(dtype: FloatDtype): AttentionKernels {
  const name = (base: string) => (dtype === 'f32' ? base : `${base}.${dtype}`);
  return {
    prep: defineKernel({ name: name('std.attn_prep'), params: PREP_PARAMS, cuda: { module, symbol: `std_attn_prep${SUFFIX[dtype]}` }, cpu: prepCpu, earlyStart: 'wait-first' }),
    core: defineKernel({ name: name('std.attn_core'), params: CORE_PARAMS, cuda: { module, symbol: `std_attn_core${SUFFIX[dtype]}` }, cpu: coreCpu, earlyStart: 'wait-first' }),
    combine: defineKernel({ name: name('std.attn_combine'), params: CORE_PARAMS, cuda: { module, symbol: `std_attn_combine${SUFFIX[dtype]}` }, cpu: combineCpu, earlyStart: 'wait-first' }),
    ...(dtype === 'f32'
      ? {}
      : {
        prefill: defineKernel({ name: name('std.attn_prefill'), params: PREFILL_PARAMS, cuda: { module: attentionPrefillModule, symbol: `std_attn_prefill${SUFFIX[dtype]}` }, cpu: prefillCpu }),
        decode: defineKernel({ name: name('std.attn_decode'), params: CORE_PARAMS, cuda: { module: attentionDecodeModule, symbol: `std_attn_decode${SUFFIX[dtype]}` }, cpu: decodeCpu, earlyStart: 'wait-first' }),
      }),
  };
}

/** The attention kernels of every row type (kernels/std-attention.cu: one symbol per type). */
export const ATTENTION_KERNELS: Readonly<Record<FloatDtype, AttentionKernels>> = Object.freeze({
  f32: attentionKernelsOf('f32'), bf16: attentionKernelsOf('bf16'), f16: attentionKernelsOf('f16'),
});

// The f32 kernels under their own names (the reference path).
export const prepKernel = ATTENTION_KERNELS.f32.prep;
export const coreKernel = ATTENTION_KERNELS.f32.core;

/** K and V tiles `std.attn_core` keeps in flight, and the bytes of one tile's K and V rows (kStages, kStageBytes). */
const CORE_STAGES = 4;
const CORE_STAGE_BYTES = 32768;

/**
 * The `chunks` argument of `std.attn_core`: for decode and verify rows, as many as a sequence of
 * `maxSeqLen` keys can use (each row's cut then depends on its own key count only); 1 for prefill
 * rows, which are many (a CTA per row and kv head is enough) and would need records for every row.
 */
export function keyChunks(phase: StepPhase, maxSeqLen: number): number {
  return phase === 'prefill' ? 1 : Math.max(1, Math.min(MAX_KEY_CHUNKS, Math.ceil(maxSeqLen / MIN_KEY_CHUNK)));
}

/** Bytes of `std.attn_core`'s partial records for `rows` rows at `chunks`: [rows][heads][chunks] × (2 + headDim) f32; 0 at one chunk. */
export function partialsBytes(rows: number, heads: number, headDim: number, chunks: number): number {
  return chunks > 1 ? 4 * rows * heads * chunks * (headDim + 2) : 0;
}

/**
 * The split count of `std.attn_core` and `std.attn_decode` (grid z): enough CTAs to fill every
 * multiprocessor twice over when rows × kvHeads alone would not, at most `chunks` (a split past the
 * row's chunks would have nothing to do) and at least 1.
 */
export function splitsFor(rows: number, kvHeads: number, chunks: number, multiprocessors: number): number {
  const ctas = Math.max(1, rows) * kvHeads;
  return Math.max(1, Math.min(chunks, Math.ceil((2 * multiprocessors) / ctas)));
}

/**
 * `std.attn_core`'s CTAs: [rows, kvHeads, splits] of 256 threads, each CTA a whole GQA group (every
 * key row read once for the group's heads) and chunks z, z + splits, … of its row. Splits
 * (`splitsFor`) change which CTA takes a chunk, never the result. Shared memory: CORE_STAGES tiles
 * of K and V rows.
 */
export function coreLaunch(rows: number, kvHeads: number, headDim: number, rowBytes: number, chunks: number, multiprocessors: number, stream: Stream): LaunchConfig {
  const splits = splitsFor(rows, kvHeads, chunks, multiprocessors);
  const tileKeys = Math.max(8, Math.floor(CORE_STAGE_BYTES / (2 * headDim * rowBytes)));
  return { grid: [Math.max(1, rows), kvHeads, splits], block: 256, sharedBytes: CORE_STAGES * 2 * tileKeys * headDim * rowBytes, stream };
}

/** The largest head dim (a multiple of 8) of `std.attn_decode`. */
const DECODE_MAX_HEAD_DIM = 256;

/** Whether `std.attn_decode` takes decode and verify rows of this head dim (else `std.attn_core` does). */
export function decodeOnTensorCores(kernels: AttentionKernels, phase: StepPhase, headDim: number): boolean {
  return phase !== 'prefill' && kernels.decode !== undefined && headDim % 8 === 0 && headDim <= DECODE_MAX_HEAD_DIM;
}

/**
 * `std.attn_decode`'s CTAs: [rows, kvHeads, splits] of 128 threads (4 warps), splits by
 * `splitsFor` as `coreLaunch`'s; shared memory for the 16-row Q tile and each warp's two K and V tiles of 16 keys,
 * in the kernel's padded layout at the head dim's power-of-two template.
 */
export function attnDecodeLaunch(rows: number, kvHeads: number, headDim: number, rowBytes: number, chunks: number, multiprocessors: number, stream: Stream): LaunchConfig {
  const splits = splitsFor(rows, kvHeads, chunks, multiprocessors);
  const D = Math.max(32, 2 ** Math.ceil(Math.log2(headDim)));
  const sharedBytes = (16 + DECODE_WARPS * 2 * 2 * DECODE_TILE_KEYS) * (D + 8) * rowBytes;
  return { grid: [Math.max(1, rows), kvHeads, splits], block: 32 * DECODE_WARPS, sharedBytes, stream };
}

/** `std.attn_prep`'s CTAs: one per (row, head it writes: the q heads, then the k heads when the layer owns its KV), a thread per element of the head. */
export function prepLaunch(rows: number, heads: number, kvHeads: number, headDim: number, ownKv: boolean, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, rows), heads + (ownKv ? kvHeads : 0)], block: Math.min(1024, 32 * Math.ceil(headDim / 32)), stream };
}

/** `std.attn_combine`'s CTAs: one per (row, head), 128 threads over the head dim. */
export function combineLaunch(rows: number, heads: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, rows), heads], block: 128, stream };
}

/** Query rows per CTA of `std.attn_prefill`, and its largest head dim (a multiple of 8). */
const PREFILL_ROWS = 64;
const PREFILL_MAX_HEAD_DIM = 256;

/** Whether `std.attn_prefill` takes a prefill of this head dim (else `std.attn_core` does). */
export function prefillOnTensorCores(kernels: AttentionKernels, phase: StepPhase, headDim: number): boolean {
  return phase === 'prefill' && kernels.prefill !== undefined && headDim % 8 === 0 && headDim <= PREFILL_MAX_HEAD_DIM;
}

/** Rows per CTA and keys per tile of the sm_90a (wgmma) launch; it takes head dims 128 and 256. */
const WGMMA_ROWS = 128;
const WGMMA_KEYS = 64;

/**
 * `std.attn_prefill`'s launch. On compute capability 9.0 (the fatbin's sm_90a code) at head dims 128
 * and 256: a CTA of 256 threads (two warpgroups on wgmma) per (q head, 128-row tile of a sequence),
 * grid [heads, ⌈rows / 128⌉ + batch]; shared memory for the Q tile and two K and V tiles of 64 keys
 * in the 128-byte-swizzled layout (+ 1 KiB to align it). Elsewhere: a CTA of 128 threads
 * (mma.sync) per (64-row tile, q head), ⌈rows / 64⌉ + batch tiles at most; shared memory for the Q
 * tile and two K and V tiles of 64 keys (32 above head dim 128; double-buffered) in the kernel's
 * padded layout, at the head dim's power-of-two template.
 */
export function attnPrefillLaunch(
  rows: number, batch: number, heads: number, headDim: number, rowBytes: number, capability: readonly [number, number], stream: Stream,
): LaunchConfig {
  if (capability[0] === 9 && capability[1] === 0 && rowBytes === 2 && (headDim === 128 || headDim === 256)) {
    return { grid: [heads, Math.ceil(rows / WGMMA_ROWS) + batch], block: 256, sharedBytes: (WGMMA_ROWS + 4 * WGMMA_KEYS) * headDim * 2 + 1024, stream };
  }
  const D = Math.max(32, 2 ** Math.ceil(Math.log2(headDim)));
  const keys = D > 128 ? 32 : 64;
  return { grid: [Math.ceil(rows / PREFILL_ROWS) + batch, heads], block: 128, sharedBytes: (PREFILL_ROWS + 4 * keys) * (D + 8) * rowBytes, stream };
}
