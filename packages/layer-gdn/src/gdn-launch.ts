import type { GpuBackend, LaunchConfig, Stream } from '@metrale/core';
import type { GdnConfig } from './gdn-config.js';

// Launch shapes of the GDN kernels, in one place: the CUDA kernels (kernels/*.cu) are written for
// these, and the CPU reference checks them against the device limits.

/** Threads per CTA: one per value channel j of the head (d_v), at most 1024. */
export function gdnBlock(cfg: Pick<GdnConfig, 'dv'>): number {
  return Math.min(cfg.dv, 1024);
}

/**
 * The entry points of `gdn.recurrent` (KERNELS.md, "Kernels"): `smem`, the head's state copied
 * into shared memory by the copy engine while the prologue runs (kernels/gdn-fast.cuh); `pipe`, the
 * state streamed through shared memory in blocks of 32 columns (kernels/gdn-pipe.cuh), decode
 * steps (mode 0, k = 1) only; `split`, a head's 32-column blocks over a cluster of 4 CTAs
 * (kernels/gdn-split.cuh), decode steps on sm_90; `general`, a column of the state in registers
 * per thread (kernels/gdn-general.cuh), for the shapes the others do not take. Each is its own
 * entry point, `gdn_recurrent_<variant>` (gdn-kernels.ts recurrentVariantKernels).
 */
export type GdnKernelVariant = 'smem' | 'pipe' | 'split' | 'general';
export const GDN_KERNEL_VARIANTS: readonly GdnKernelVariant[] = ['smem', 'pipe', 'split', 'general'];
/** The entry points of `gdn.fold` (`gdn_fold_<variant>`), where the register fold does not take the shape: smem or general. */
export type GdnFoldVariant = 'smem' | 'general';
export const GDN_FOLD_VARIANTS: readonly GdnFoldVariant[] = ['smem', 'general'];
/** What verify steps and folds run where the smem kernels take the shape. */
export const DEFAULT_VARIANT = 'smem' satisfies GdnKernelVariant & GdnFoldVariant;
/** kernels/gdn-pipe.cuh: threads per CTA, columns per block, blocks in shared memory (GDN_PIPE_NB). */
export const PIPE_THREADS = 128;
const PIPE_COLUMNS = 32;
export const PIPE_STAGES = 2;
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

/** Whether the smem kernels take this shape: maxK ≤ 8, conv K ≤ 4, d_k ≤ 128, d_v ≤ 256. Else general. */
export function fastSupported(s: GdnLaunchShape): boolean {
  return s.maxK <= 8 && s.convK <= 4 && s.dk <= 128 && s.dv <= 256;
}

/** Whether the pipe kernels take this shape: the smem kernels do, and d_v is a multiple of 4 (16-byte copies). */
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
 * Dynamic shared memory of a variant's `gdn.recurrent` or `gdn.fold`. smem (kernels/gdn-fast-layout.cuh
 * fast_smem_floats): the copy of a head's state (d_k·d_v f32), the raw k and q of a row block (up
 * to 4 rows), the keys of up to maxK pending rows, and the block's scalars; 72.5 KiB at the 80B
 * shape with maxK 4 (3 CTAs per SM). pipe and split (kernels/gdn-pipe.cuh pipe_smem_floats):
 * PIPE_STAGES blocks of [d_k][32] (split: one), one row's k and q, the pending keys, the scalars,
 * the row parts' sums [2][4][32], o, v and z [d_v] each and the cluster's 4 partial sums. general:
 * none.
 */
export function variantSharedBytes(variant: GdnKernelVariant, s: GdnLaunchShape): number {
  if (variant === 'general') return 0;
  const mb = pendingKeyRows(s.maxK);
  if (variant === 'pipe' || variant === 'split') {
    const blocks = variant === 'pipe' ? PIPE_STAGES : 1;
    return 4 * (blocks * pad4(s.dk) * PIPE_COLUMNS + (2 + mb) * pad4(s.dk) + SMALL_FLOATS + 2 * 4 * PIPE_COLUMNS + 3 * pad4(s.dv) + 4);
  }
  const tb = rowsInst(Math.min(4, s.maxK));
  return 4 * (pad4(s.dk * s.dv) + (2 * tb + mb) * pad4(s.dk) + SMALL_FLOATS);
}

/** Threads per CTA of a variant's `gdn.recurrent` / `gdn.fold`: d_v (PIPE_THREADS for pipe and split). */
export function variantBlock(variant: GdnKernelVariant, cfg: Pick<GdnConfig, 'dv'>): number {
  return variant === 'pipe' || variant === 'split' ? PIPE_THREADS : gdnBlock(cfg);
}

/** Grid of a variant's `gdn.recurrent` / `gdn.fold`: [batch, H_v]; split: [SPLIT_CTAS·batch, H_v]. */
export function variantGrid(variant: GdnKernelVariant, batch: number, hv: number): number[] {
  return variant === 'split' ? [SPLIT_CTAS * batch, hv] : [batch, hv];
}

/** The variant a launch of this shape runs: `preferred` where it takes the shape, else the next that does (split → pipe → smem → general). */
export function variantFor(s: GdnLaunchShape, preferred: GdnKernelVariant = DEFAULT_VARIANT): GdnKernelVariant {
  if (preferred === 'split') return splitSupported(s) ? 'split' : variantFor(s, 'pipe');
  if (preferred === 'pipe') return pipeSupported(s) ? 'pipe' : variantFor(s);
  return preferred === 'general' || fastSupported(s) ? preferred : 'general';
}

/** The smallest batch whose decode steps run the pipe kernels (below, split or smem are faster). */
export const PIPE_MIN_BATCH = 8;

/**
 * The variant the layer runs a `gdn.recurrent` launch (mode, k rows per sequence, batch
 * positions) with (decode steps that gdn-decode-launch.ts runsTwoKernelDecode picks run the
 * two-kernel decode instead, where it takes the shape). Decode steps (mode 0, k = 1; carried decode
 * too): pipe from PIPE_MIN_BATCH positions, below it split where the device runs clusters
 * (`clusters`: sm_90+), each where it takes the shape; everything else: smem, or general. On the
 * H200 at the 80B shape split was the fastest below 8 positions (4 × the CTAs: the prologue runs 4
 * times per head, which loses from 8), pipe from 8 (docs/benchmarks.md, GDN decode).
 */
export function recurrentVariant(s: GdnLaunchShape, mode: 0 | 1, k: number, batch: number, clusters = false): GdnKernelVariant {
  if (mode !== 0 || k !== 1) return variantFor(s);
  if (batch >= PIPE_MIN_BATCH) return variantFor(s, 'pipe');
  return clusters && splitSupported(s) ? 'split' : variantFor(s);
}

/**
 * The variant the layer runs `gdn.fold` with, where the register fold does not take the shape
 * (gdn-fold-launch.ts foldPath): smem, or general. (A pipe fold measured slower than the smem fold
 * on the H200 at the 80B shape: KERNELS.md, "Removed variants".)
 */
export function foldVariant(s: GdnLaunchShape): GdnFoldVariant {
  return fastSupported(s) ? 'smem' : 'general';
}

/**
 * `gdn.recurrent` and `gdn.fold`: the variant's grid (one CTA per (batch position, value head),
 * split 4), threads and dynamic shared memory (maxK: the stash's rows per sequence, the kernels'
 * `maxK`).
 */
export function recurrentLaunch(
  cfg: Pick<GdnConfig, 'dk' | 'dv' | 'hv' | 'convK'>,
  batch: number,
  stream: Stream,
  maxK = 8,
  variant: GdnKernelVariant = variantFor({ ...cfg, maxK }),
): LaunchConfig {
  return { grid: variantGrid(variant, batch, cfg.hv), block: variantBlock(variant, cfg), sharedBytes: variantSharedBytes(variant, { ...cfg, maxK }), stream };
}
