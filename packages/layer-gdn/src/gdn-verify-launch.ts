import type { GpuBackend, KernelArgs, LaunchConfig, Stream } from '@metrale/core';
import type { GdnConfig } from './gdn-config.js';
import { twoKernelDecodeSupported, type TwoKernelShape } from './gdn-decode-launch.js';
import type { verifyPrepKernel, verifyStateKernel } from './gdn-kernels.js';
import { pad4, pendingKeyRows, recurrentVariant, type GdnKernelVariant, type GdnLaunchShape } from './gdn-launch.js';

// Launch shapes of the two-kernel verify (kernels/gdn-verify.cu: gdn.verify-prep, then
// gdn.verify-state; KERNELS.md "Two-kernel verify").

/** Rows a two-kernel verify takes at most (kernels/gdn-verify-prep.cuh kVRows). */
export const VERIFY_ROWS = 4;
/** kernels/gdn-verify-prep.cuh kVPrepThreads: threads per CTA (one CTA per batch position and key head: a warp for q and k, one for v). */
export const VERIFY_PREP_THREADS = 64;
/** kernels/gdn-verify-state.cuh kVThreads: threads per CTA (4 warps, each streaming ⌈d_k / 4⌉ rows of 128 columns). */
export const VERIFY_STATE_THREADS = 128;
/** Scalars at the end of each value record: β, A, Γ, 0 (4 each), ck [4][4], cq [4][4]. */
export const VERIFY_SCALARS = 48;

/** Where the prep buffer's records lie, in f32 words (KERNELS.md "Two-kernel verify"). */
export interface VerifyPrepLayout {
  /** Words per (batch position, key head): k̂_t and q̂_t of the 4 rows, [4][2][d_kp]. */
  readonly keyStride: number;
  /** Words per (batch position, value head): v_t of the 4 rows [4][d_vp], then the scalars. */
  readonly valueStride: number;
  /** Offset of the values region: batch · H_k · keyStride. */
  readonly keysFloats: number;
  /** Words of the whole buffer. */
  readonly totalFloats: number;
}

export function verifyPrepLayout(s: Pick<TwoKernelShape, 'hk' | 'hv' | 'dk' | 'dv'>, batch: number): VerifyPrepLayout {
  const keyStride = 2 * VERIFY_ROWS * pad4(s.dk);
  const valueStride = VERIFY_ROWS * pad4(s.dv) + VERIFY_SCALARS;
  const keysFloats = batch * s.hk * keyStride;
  return { keyStride, valueStride, keysFloats, totalFloats: keysFloats + batch * s.hv * valueStride };
}

/** Bytes of the prep buffer for `batch` batch positions. */
export function verifyPrepBytes(cfg: Pick<GdnConfig, 'hk' | 'hv' | 'dk' | 'dv'>, batch: number): number {
  return 4 * verifyPrepLayout(cfg, batch).totalFloats;
}

/** kernels/gdn-verify-state.cuh kStages: chunks of 4 state rows per thread in the kernel's shared-memory ring. */
export const VERIFY_STATE_STAGES = 4;

/**
 * Dynamic shared memory of gdn.verify-state (vstate_smem_floats): keys [8][d_kp], values, the
 * pending keys, Σo² [4][4], then the ring of state chunks [stages][4 rows][128 threads × 4], which
 * the warps' dot products [8][4][d_vp] take over after the last chunk. At the 80B shape: 40.3 KiB.
 */
export function verifyStateSharedBytes(s: GdnLaunchShape): number {
  const dkp = pad4(s.dk);
  const dvp = pad4(s.dv);
  const ring = VERIFY_STATE_STAGES * 4 * 4 * VERIFY_STATE_THREADS;
  return 4 * (2 * VERIFY_ROWS * dkp + VERIFY_ROWS * dvp + VERIFY_SCALARS + pendingKeyRows(s.maxK) * dkp + 16 + Math.max(ring, 32 * dvp));
}

/**
 * Whether the two-kernel verify takes this shape: where the two-kernel decode does (d_k and d_v
 * multiples of 4 among its rules) and a key head has at most 8 value heads (the prep's gates: one
 * lane per value head and row).
 */
export function twoKernelVerifySupported(s: TwoKernelShape): boolean {
  return twoKernelDecodeSupported(s) && (s.hv / s.hk) * VERIFY_ROWS <= 32;
}

/**
 * The smallest batch whose verify steps run the two-kernel verify: any. On the H200 at the 80B
 * shape, k = 4, it ties the smem kernel below 8 positions and beats it from 8 in write-on-accept
 * verify, and beats it at every batch in the carried cycle (docs/benchmarks.md, GDN verify and
 * fold). With the earlier preps it lost below 16 positions.
 */
export const TWO_KERNEL_VERIFY_MIN_BATCH = 1;

/** Whether the layer runs a verify of k rows per position over `batch` positions as the two-kernel verify. */
export function runsTwoKernelVerify(s: TwoKernelShape, batch: number, k: number): boolean {
  return batch >= TWO_KERNEL_VERIFY_MIN_BATCH && k >= 1 && k <= VERIFY_ROWS && k <= s.maxK && twoKernelVerifySupported(s);
}

/** What runs a verify step of k rows per position: the two-kernel verify, or gdn.recurrent's variant (mode 1). */
export function verifyPath(s: TwoKernelShape, batch: number, k: number, clusters: boolean): 'two-kernel' | GdnKernelVariant {
  return runsTwoKernelVerify(s, batch, k) ? 'two-kernel' : recurrentVariant(s, 1, k, batch, clusters);
}

/**
 * Both launches of a verify step of `batch` positions: prep grid [batch, H_k] (no shared memory),
 * state grid [batch, H_v] with an early start (its first state chunks are in flight while the prep
 * runs; it waits for the prep before it copies the records: kernels/gdn-verify-state.cuh).
 */
export function twoKernelVerifyLaunches(cfg: Pick<GdnConfig, 'hk' | 'dk' | 'dv' | 'hv' | 'convK'>, batch: number, stream: Stream, maxK: number): { prep: LaunchConfig; state: LaunchConfig } {
  const s = { ...cfg, maxK };
  return {
    prep: { grid: [batch, cfg.hk], block: VERIFY_PREP_THREADS, stream },
    state: { grid: [batch, cfg.hv], block: VERIFY_STATE_THREADS, sharedBytes: verifyStateSharedBytes(s), stream, earlyStart: true },
  };
}

/** The two kernels' declarations (the package's, or the same bound to another fatbin). */
export interface TwoKernelVerifyKernels {
  readonly prep: typeof verifyPrepKernel;
  readonly state: typeof verifyStateKernel;
}

/**
 * A verify step as the two-kernel verify: gdn.verify-prep, then gdn.verify-state on `stream`,
 * both with `args` (`prep` holding verifyPrepBytes for args.batch positions).
 */
export function launchTwoKernelVerify(
  gpu: Pick<GpuBackend, 'launch'>,
  kernels: TwoKernelVerifyKernels,
  cfg: Pick<GdnConfig, 'hk' | 'dk' | 'dv' | 'hv' | 'convK'>,
  stream: Stream,
  args: KernelArgs<typeof verifyPrepKernel.params>,
): void {
  const l = twoKernelVerifyLaunches(cfg, args.batch, stream, args.maxK);
  gpu.launch(kernels.prep, l.prep, args);
  gpu.launch(kernels.state, l.state, args);
}
