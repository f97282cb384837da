import type { GpuBackend, KernelArgs, LaunchConfig, Stream } from '@metrale/core';
import type { GdnConfig } from './gdn-config.js';
import { DECODE_STATE_THREADS, twoKernelDecodeSupported, type TwoKernelShape } from './gdn-decode-launch.js';
import type { foldStateKernel, foldVariantKernels } from './gdn-kernels.js';
import { foldVariant, pad4, recurrentLaunch, type GdnFoldVariant, type GdnLaunchShape } from './gdn-launch.js';

type FoldKernel = (typeof foldVariantKernels)[GdnFoldVariant];

// What runs the write-on-accept fold (gdnFoldAccepted): gdn.fold-state, the head in registers
// (kernels/gdn-fold-state.cuh), where the two-kernel decode takes the shape; else gdn.fold's variant.

/** Dynamic shared memory of gdn.fold-state: the accepted rows' keys [maxK][d_kp] and u [maxK][d_vp], their γ (fold_state_smem_floats). */
export function foldStateSharedBytes(s: GdnLaunchShape): number {
  return 4 * (s.maxK * (pad4(s.dk) + pad4(s.dv)) + pad4(s.maxK));
}

/** gdn.fold-state over `batch` positions: grid [batch, H_v], the decode state kernel's 256 threads. */
export function foldStateLaunch(cfg: Pick<GdnConfig, 'dk' | 'dv' | 'hv' | 'convK'>, batch: number, stream: Stream, maxK: number): LaunchConfig {
  return { grid: [batch, cfg.hv], block: DECODE_STATE_THREADS, sharedBytes: foldStateSharedBytes({ ...cfg, maxK }), stream };
}

/** What runs a fold: gdn.fold-state ('register') where it takes the shape, else gdn.fold's variant (gdn-launch.ts foldVariant). */
export function foldPath(s: TwoKernelShape): 'register' | GdnFoldVariant {
  return twoKernelDecodeSupported(s) ? 'register' : foldVariant(s);
}

/** The fold's declarations (the package's, or the same bound to another fatbin). */
export interface FoldKernels {
  readonly state: typeof foldStateKernel;
  readonly variants: Readonly<Record<GdnFoldVariant, FoldKernel>>;
}

/**
 * The fold of the accepted prefix (args.naTab rows of each batch position) as the layer runs it
 * (foldPath). The layer, the benchmarks and the GPU suite launch it through here.
 */
export function launchFold(
  gpu: Pick<GpuBackend, 'launch'>,
  kernels: FoldKernels,
  cfg: Pick<GdnConfig, 'hk' | 'dk' | 'dv' | 'hv' | 'convK'>,
  stream: Stream,
  args: KernelArgs<FoldKernel['params']>,
): void {
  const path = foldPath({ ...cfg, maxK: args.maxK });
  if (path === 'register') gpu.launch(kernels.state, foldStateLaunch(cfg, args.batch, stream, args.maxK), args);
  else gpu.launch(kernels.variants[path], recurrentLaunch(cfg, args.batch, stream, args.maxK, path), args);
}
