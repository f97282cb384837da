import type { LaunchConfig, Stream } from '@metrale/core';
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
 * from global memory, never held; `legacy`, the first version (a column per thread in registers).
 * Each has its own entry points (RECURRENT_SYMBOLS, FOLD_SYMBOLS); the unsuffixed `gdn_recurrent`
 * and `gdn_fold` are DEFAULT_VARIANT's (GDN_RECURRENT_DEFAULT / GDN_FOLD_DEFAULT in the .cu files).
 */
export type GdnKernelVariant = 'smem' | 'stream' | 'legacy';
export const GDN_KERNEL_VARIANTS: readonly GdnKernelVariant[] = ['smem', 'stream', 'legacy'];
export const DEFAULT_VARIANT: GdnKernelVariant = 'smem';

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

const pad4 = (x: number): number => (x + 3) & ~3;
const rowsInst = (n: number): number => (n <= 1 ? 1 : n <= 4 ? 4 : 8);
/** kernels/gdn-fast.cuh kSmallFloats. */
const SMALL_FLOATS = 496;

/**
 * Dynamic shared memory of a variant's `gdn.recurrent` and `gdn.fold` (kernels/gdn-fast.cuh
 * fast_smem_floats): the smem variant's copy of a head's state (d_k·d_v f32), the raw k and q
 * of a row block (up to 4 rows), the keys of up to maxK pending rows, and the block's scalars.
 * At the 80B shape with maxK 4: 72.5 KiB (3 CTAs per SM).
 */
export function variantSharedBytes(variant: GdnKernelVariant, s: GdnLaunchShape): number {
  if (variant === 'legacy') return 0;
  const tb = rowsInst(Math.min(4, s.maxK));
  const mb = s.maxK <= 4 ? 4 : 8;
  const stateFloats = variant === 'smem' ? pad4(s.dk * s.dv) : 0;
  return 4 * (stateFloats + (2 * tb + mb) * pad4(s.dk) + SMALL_FLOATS);
}

/** The variant a launch of this shape runs: `preferred` where the fast kernels take the shape, else legacy. */
export function variantFor(s: GdnLaunchShape, preferred: GdnKernelVariant = DEFAULT_VARIANT): GdnKernelVariant {
  return preferred === 'legacy' || fastSupported(s) ? preferred : 'legacy';
}

/**
 * `gdn.recurrent` and `gdn.fold`: one CTA per (batch position, value head), d_v threads, the
 * variant's dynamic shared memory (maxK: the stash's rows per sequence, the kernels' `maxK`).
 */
export function recurrentLaunch(
  cfg: Pick<GdnConfig, 'dk' | 'dv' | 'hv' | 'convK'>,
  batch: number,
  stream: Stream,
  maxK = 8,
  variant: GdnKernelVariant = variantFor({ ...cfg, maxK }),
): LaunchConfig {
  return { grid: [batch, cfg.hv], block: gdnBlock(cfg), sharedBytes: variantSharedBytes(variant, { ...cfg, maxK }), stream };
}

/** `gdn.chunk`: one CTA per (sequence, value head). */
export function chunkLaunch(cfg: GdnConfig, sequences: number, stream: Stream): LaunchConfig {
  return { grid: [sequences, cfg.hv], block: gdnBlock(cfg), stream };
}
