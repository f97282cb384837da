import type { GpuBackend, LaunchConfig, Stream } from '@metrale/core';
import type { GdnConfig } from './gdn-config.js';

// Launch shapes of the GDN kernels, in one place: the CUDA kernels (kernels/*.cu) are written for
// these, and the CPU reference checks them against the device limits.

/** Threads per CTA: one per value channel j of the head (d_v), at most 1024. */
export function gdnBlock(cfg: Pick<GdnConfig, 'dv'>): number {
  return Math.min(cfg.dv, 1024);
}

/**
 * Where `gdn.recurrent` / `gdn.fold` keep a head's state (KERNELS.md, kernels/gdn-fast.cuh):
 * `smem`, a shared-memory copy made by the copy engine while the prologue runs; `stream`, streamed
 * from global memory, never held; `legacy`, the first version (a column per thread in registers);
 * `pipe`, the state streamed through shared memory in blocks of 32 columns (kernels/gdn-pipe.cuh),
 * for decode steps (mode 0, k = 1) and the fold only; `split`, a head's 32-column blocks over
 * 4 CTAs (kernels/gdn-split.cuh), decode steps (a cluster of 4 per head: sm_90) and the fold;
 * `persist`, persistent CTAs whose heads' 32-column blocks stream through one ring of shared
 * buffers (kernels/gdn-persist.cuh), decode steps and the fold (where pipe takes the shape).
 * Each has its own entry points (RECURRENT_SYMBOLS, FOLD_SYMBOLS); the unsuffixed `gdn_recurrent`
 * and `gdn_fold` are DEFAULT_VARIANT's (GDN_RECURRENT_DEFAULT / GDN_FOLD_DEFAULT in the .cu files).
 */
export type GdnKernelVariant = 'smem' | 'stream' | 'legacy' | 'pipe' | 'split' | 'persist';
export const GDN_KERNEL_VARIANTS: readonly GdnKernelVariant[] = ['smem', 'stream', 'legacy', 'pipe', 'split', 'persist'];
export const DEFAULT_VARIANT: GdnKernelVariant = 'smem';
/** kernels/gdn-pipe.cuh: threads per CTA, columns per block, blocks in shared memory (GDN_PIPE_NB). */
export const PIPE_THREADS = 128;
const PIPE_COLUMNS = 32;
export const PIPE_STAGES = 2;
/** kernels/gdn-persist.cuh: blocks in shared memory (GDN_PERSIST_NB), heads per CTA at most, CTAs per SM launched. */
export const PERSIST_STAGES = 3;
export const PERSIST_MAX_HEADS = 64;
export const PERSIST_CTAS_PER_SM = 4;
/** kernels/gdn-split.cuh kCluster: CTAs per head (32 columns each), a cluster for decode steps. */
export const SPLIT_CTAS = 4;

/** Whether `gpu` runs thread-block clusters (CUDA, sm_90+): the split decode and the prefill's fused norm need them. */
export function runsClusters(gpu: Pick<GpuBackend, 'kind' | 'device'>): boolean {
  return gpu.kind === 'cuda' && gpu.device.computeCapability[0] >= 9;
}

/** The shape fields the launch shapes depend on. */
export interface GdnLaunchShape {
  readonly dk: number;
  readonly dv: number;
  readonly convK: number;
  readonly maxK: number;
}

/** Whether the fast kernels (smem, stream) take this shape: maxK ≤ 8, conv K ≤ 4, d_k ≤ 128, d_v ≤ 256. Else legacy. */
export function fastSupported(s: GdnLaunchShape): boolean {
  return s.maxK <= 8 && s.convK <= 4 && s.dk <= 128 && s.dv <= 256;
}

/** Whether the pipe kernels take this shape: the fast kernels do, and d_v is a multiple of 4 (16-byte copies). */
export function pipeSupported(s: GdnLaunchShape): boolean {
  return fastSupported(s) && s.dv % 4 === 0;
}

/** Whether the split kernels take this shape: the pipe kernels do, and d_v ≤ 4·32. */
export function splitSupported(s: GdnLaunchShape): boolean {
  return pipeSupported(s) && s.dv <= SPLIT_CTAS * PIPE_COLUMNS;
}

/** x rounded up to a multiple of 4 (the kernels' padded d_k, d_v: 16-byte rows). */
export const pad4 = (x: number): number => (x + 3) & ~3;
/** Rows of pending keys the kernels keep in shared memory (kernels/gdn-fast-layout.cuh fast_mb_alloc). */
export const pendingKeyRows = (maxK: number): number => (maxK <= 4 ? 4 : 8);
const rowsInst = (n: number): number => (n <= 1 ? 1 : n <= 4 ? 4 : 8);
/** kernels/gdn-fast-layout.cuh kSmallFloats. */
const SMALL_FLOATS = 496;

/**
 * Dynamic shared memory of a variant's `gdn.recurrent` and `gdn.fold` (kernels/gdn-fast-layout.cuh
 * fast_smem_floats): the smem variant's copy of a head's state (d_k·d_v f32), the raw k and q
 * of a row block (up to 4 rows), the keys of up to maxK pending rows, and the block's scalars.
 * At the 80B shape with maxK 4: 72.5 KiB (3 CTAs per SM).
 */
export function variantSharedBytes(variant: GdnKernelVariant, s: GdnLaunchShape): number {
  if (variant === 'legacy') return 0;
  const mb = pendingKeyRows(s.maxK);
  if (variant === 'pipe' || variant === 'split' || variant === 'persist') {
    // PIPE_STAGES blocks of [d_k][32] (split: one; persist: PERSIST_STAGES), one row's k and q,
    // the pending keys, the scalars, the row parts' sums [2][4][32], o, v and z [d_v] each and the
    // cluster's 4 partial sums (kernels/gdn-pipe.cuh pipe_smem_floats); persist: the slots of its heads.
    const blocks = variant === 'pipe' ? PIPE_STAGES : variant === 'split' ? 1 : PERSIST_STAGES;
    const slots = variant === 'persist' ? PERSIST_MAX_HEADS : 0;
    return 4 * (blocks * pad4(s.dk) * PIPE_COLUMNS + (2 + mb) * pad4(s.dk) + SMALL_FLOATS + 2 * 4 * PIPE_COLUMNS + 3 * pad4(s.dv) + 4 + slots);
  }
  const tb = rowsInst(Math.min(4, s.maxK));
  const stateFloats = variant === 'smem' ? pad4(s.dk * s.dv) : 0;
  return 4 * (stateFloats + (2 * tb + mb) * pad4(s.dk) + SMALL_FLOATS);
}

/** Threads per CTA of a variant's `gdn.recurrent` / `gdn.fold`: d_v (PIPE_THREADS for pipe, split and persist). */
export function variantBlock(variant: GdnKernelVariant, cfg: Pick<GdnConfig, 'dv'>): number {
  return variant === 'pipe' || variant === 'split' || variant === 'persist' ? PIPE_THREADS : gdnBlock(cfg);
}

/**
 * Grid of a variant's `gdn.recurrent` / `gdn.fold`: [batch, H_v]; split: [SPLIT_CTAS·batch, H_v];
 * persist: PERSIST_CTAS_PER_SM per SM (`sms`: the device's multiprocessors), at least enough that
 * no CTA has more than PERSIST_MAX_HEADS heads, at most one per head.
 */
export function variantGrid(variant: GdnKernelVariant, batch: number, hv: number, sms?: number): number[] {
  if (variant === 'split') return [SPLIT_CTAS * batch, hv];
  if (variant !== 'persist') return [batch, hv];
  if (sms === undefined || !Number.isInteger(sms) || sms < 1) throw new RangeError(`gdn: the persist kernels need the device's multiprocessor count, got ${sms}`);
  const heads = batch * hv;
  return [Math.max(1, Math.min(heads, Math.max(Math.ceil(heads / PERSIST_MAX_HEADS), sms * PERSIST_CTAS_PER_SM)))];
}

/** The variant a launch of this shape runs: `preferred` where the fast kernels take the shape, else legacy. */
export function variantFor(s: GdnLaunchShape, preferred: GdnKernelVariant = DEFAULT_VARIANT): GdnKernelVariant {
  if (preferred === 'split') return splitSupported(s) ? 'split' : variantFor(s, 'pipe');
  if (preferred === 'persist') return pipeSupported(s) ? 'persist' : variantFor(s);
  if (preferred === 'pipe') return pipeSupported(s) ? 'pipe' : variantFor(s);
  return preferred === 'legacy' || fastSupported(s) ? preferred : 'legacy';
}

/** The smallest batch whose decode steps run the pipe kernels (below, split or smem are faster). */
export const PIPE_MIN_BATCH = 8;

/**
 * The variant the layer runs a `gdn.recurrent` launch (mode, k rows per sequence, batch
 * positions) with (decode steps that gdn-decode-launch.ts runsTwoKernelDecode picks run the
 * two-kernel decode instead, where it takes the shape). Decode steps (mode 0, k = 1; carried decode too): pipe from PIPE_MIN_BATCH
 * positions, below it split where the device runs clusters (`clusters`: sm_90+), each where it
 * takes the shape; everything else: the default (or legacy). On the H200 at the 80B shape split
 * was the fastest below 8 positions (4 × the CTAs: the prologue runs 4 times per head, which
 * loses from 8), pipe from 8; persist was within a few % of pipe and slower on carried decode
 * when this choice was made, and is not swept again since it took pipe's loop
 * (docs/benchmarks.md, GDN decode).
 */
export function recurrentVariant(s: GdnLaunchShape, mode: 0 | 1, k: number, batch: number, clusters = false): GdnKernelVariant {
  if (mode !== 0 || k !== 1) return variantFor(s);
  if (batch >= PIPE_MIN_BATCH) return variantFor(s, 'pipe');
  return clusters && splitSupported(s) ? 'split' : variantFor(s);
}

/**
 * The variant the layer runs `gdn.fold` with: the default. (The pipe fold measured slower than the
 * smem fold on the H200 at the 80B shape, docs/benchmarks.md; bench/gdn-ab.mjs times both.)
 */
export function foldVariant(s: GdnLaunchShape): GdnKernelVariant {
  return variantFor(s);
}

/**
 * `gdn.recurrent` and `gdn.fold`: the variant's grid (variantGrid: one CTA per (batch position,
 * value head) but for split and persist), threads and dynamic shared memory (maxK: the stash's
 * rows per sequence, the kernels' `maxK`; sms: the device's multiprocessors, for persist).
 */
export function recurrentLaunch(
  cfg: Pick<GdnConfig, 'dk' | 'dv' | 'hv' | 'convK'>,
  batch: number,
  stream: Stream,
  maxK = 8,
  variant: GdnKernelVariant = variantFor({ ...cfg, maxK }),
  sms?: number,
): LaunchConfig {
  return { grid: variantGrid(variant, batch, cfg.hv, sms), block: variantBlock(variant, cfg), sharedBytes: variantSharedBytes(variant, { ...cfg, maxK }), stream };
}

/** `gdn.chunk`: one CTA per (sequence, value head). */
export function chunkLaunch(cfg: GdnConfig, sequences: number, stream: Stream): LaunchConfig {
  return { grid: [sequences, cfg.hv], block: gdnBlock(cfg), stream };
}
