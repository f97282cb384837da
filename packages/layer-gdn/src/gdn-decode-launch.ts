import { InvalidArgumentError, type GpuBackend, type KernelArgs, type LaunchConfig, type Stream } from '@metrale/core';
import type { GdnConfig } from './gdn-config.js';
import type { decodePrepGatesKernel, decodePrepKernel, decodeStateKernel, decodeStatePlainKernel } from './gdn-kernels.js';
import { pad4, pendingKeyRows, pipeSupported, recurrentVariant, type GdnKernelVariant, type GdnLaunchShape } from './gdn-launch.js';

// Launch shapes of the two-kernel decode (kernels/gdn-decode.cu: gdn.decode-prep, then
// gdn.decode-state; KERNELS.md "Two-kernel decode").

/** kernels/gdn-decode-prep.cuh kPrepThreads: threads per CTA (one CTA per batch position and key head: a warp for q and k, one for v). */
export const DECODE_PREP_THREADS = 64;
/** kernels/gdn-decode-prep.cuh kPrepThreadsGates: gdn.decode-prep-gates's threads (two warps more: the gates' raw inputs from the input row). */
export const DECODE_PREP_GATES_THREADS = 128;

/**
 * The last three decode arguments (DECODE_PARAMS) of a step whose prep reads the gates' raw inputs
 * from qkvz: gdn.decode-prep, and every step of a layer whose in_proj_ba stacks with in_proj_qkvz.
 */
export const NO_GATE_ROWS = Object.freeze({ baInput: 0n, baWeight: 0n, hidden: 0 });

/** The shape fields of the two-kernel decode: the launch shape and the head counts. */
export type TwoKernelShape = GdnLaunchShape & { readonly hk: number; readonly hv: number };
/** kernels/gdn-decode-state.cuh: threads per CTA (8 warps of up to 16 rows × 128 columns). */
export const DECODE_STATE_THREADS = 256;

/**
 * Whether the two-kernel decode takes this shape: the pipe kernels do (maxK ≤ 8, conv K ≤ 4,
 * d_k ≤ 128, d_v a multiple of 4), d_v ≤ 128, d_k is a multiple of 4 (the prep moves its inputs as
 * float4: kernels/gdn-prep-window.cuh) and a key head has at most 32 value heads (a lane each).
 */
export function twoKernelDecodeSupported(s: TwoKernelShape): boolean {
  return pipeSupported(s) && s.dv <= 128 && s.dk % 4 === 0 && s.hv / s.hk <= 32;
}

/** f32 words of one (batch position, value head)'s prep record: k̂ [d_kp], q̂ [d_kp], v [d_vp], then β, α, k̂·q̂, 0 (kernels/gdn-decode-prep.cuh prep_stride). */
export function decodePrepStride(s: { readonly dk: number; readonly dv: number }): number {
  return 2 * pad4(s.dk) + pad4(s.dv) + 4;
}

/** Dynamic shared memory of gdn.decode-state: the prep record, the pending keys, the warps' dot products [2][8][d_v], u and Σo² (state_smem_floats). */
export function decodeStateSharedBytes(s: GdnLaunchShape): number {
  return 4 * (decodePrepStride(s) + pendingKeyRows(s.maxK) * pad4(s.dk) + 17 * pad4(s.dv) + 8);
}

/** Bytes of the prep buffer for `batch` batch positions: [batch][H_v][decodePrepStride] f32. */
export function decodePrepBytes(cfg: Pick<GdnConfig, 'hv' | 'dk' | 'dv'>, batch: number): number {
  return 4 * batch * cfg.hv * decodePrepStride(cfg);
}

/**
 * Both launches of a decode step of `batch` positions: prep grid [batch, H_k] (no shared memory;
 * `gates`: gdn.decode-prep-gates's threads), state grid [batch, H_v] with an early start (it loads
 * its heads' state while the prep runs and waits for the prep before it reads a record:
 * kernels/gdn-decode-state.cuh).
 */
export function twoKernelDecodeLaunches(
  cfg: Pick<GdnConfig, 'hk' | 'dk' | 'dv' | 'hv' | 'convK'>, batch: number, stream: Stream, maxK: number, gates = false,
): { prep: LaunchConfig; state: LaunchConfig } {
  const s = { ...cfg, maxK };
  return {
    prep: { grid: [batch, cfg.hk], block: gates ? DECODE_PREP_GATES_THREADS : DECODE_PREP_THREADS, stream },
    state: { grid: [batch, cfg.hv], block: DECODE_STATE_THREADS, sharedBytes: decodeStateSharedBytes(s), stream, earlyStart: true },
  };
}

/**
 * Decode batches of at least this many positions run the two-kernel decode; so do those below
 * PIPE_DECODE_FROM. Between them the pipe kernel measured faster.
 */
export const TWO_KERNEL_MIN_BATCH = 32;
/** The smallest batch below TWO_KERNEL_MIN_BATCH whose decode steps run gdn-launch.ts recurrentVariant's choice (pipe). */
export const PIPE_DECODE_FROM = 16;

/**
 * Whether the layer runs a decode step (one row per position, plain or carried) of `batch`
 * positions as the two-kernel decode: where it takes the shape, below PIPE_DECODE_FROM and from
 * TWO_KERNEL_MIN_BATCH positions. On the H200 at the 80B shape, with the state kernel launched
 * with an early start, it beat split and pipe (plain and carried decode) below 16 positions and
 * from 32; pipe measured faster between (docs/benchmarks.md, GDN decode).
 */
export function runsTwoKernelDecode(s: TwoKernelShape, batch: number): boolean {
  return (batch < PIPE_DECODE_FROM || batch >= TWO_KERNEL_MIN_BATCH) && twoKernelDecodeSupported(s);
}

/** What runs a decode step of `batch` positions: the two-kernel decode, or gdn.recurrent's variant (`clusters`: sm_90+). */
export function decodePath(s: TwoKernelShape, batch: number, clusters: boolean): 'two-kernel' | GdnKernelVariant {
  return runsTwoKernelDecode(s, batch) ? 'two-kernel' : recurrentVariant(s, 0, 1, batch, clusters);
}

/** The kernels' declarations (the package's, or the same bound to another fatbin). */
export interface TwoKernelDecodeKernels {
  readonly prep: typeof decodePrepKernel;
  /** For steps that make the gates from the input rows (`baWeight` set); without it such a step throws. */
  readonly prepGates?: typeof decodePrepGatesKernel;
  readonly state: typeof decodeStateKernel;
  /** For steps without a pending table; without it they run `state`. */
  readonly statePlain?: typeof decodeStatePlainKernel;
}

/** The state kernel of a decode step: gdn.decode-state-plain where `pending` is 0 and `kernels` has it, else gdn.decode-state. */
export function decodeStateFor(kernels: TwoKernelDecodeKernels, pending: bigint): TwoKernelDecodeKernels['state'] {
  return pending === 0n && kernels.statePlain ? kernels.statePlain : kernels.state;
}

/**
 * A decode step as the two-kernel decode: gdn.decode-prep (gdn.decode-prep-gates where
 * `args.baWeight` is set), then its state kernel (decodeStateFor) on `stream`, all with `args` (a
 * decode step's buffers and tables, `prep` holding decodePrepBytes for args.batch positions). The
 * layer, the benchmarks and the GPU suite launch it through here.
 */
export function launchTwoKernelDecode(
  gpu: Pick<GpuBackend, 'launch'>,
  kernels: TwoKernelDecodeKernels,
  cfg: Pick<GdnConfig, 'hk' | 'dk' | 'dv' | 'hv' | 'convK'>,
  stream: Stream,
  args: KernelArgs<typeof decodePrepKernel.params>,
): void {
  const gates = args.baWeight !== 0n;
  if (gates && !kernels.prepGates) {
    throw new InvalidArgumentError('launchTwoKernelDecode: baWeight is set but the kernels have no prepGates (gdn.decode-prep-gates); pass twoKernelDecodeKernels');
  }
  const l = twoKernelDecodeLaunches(cfg, args.batch, stream, args.maxK, gates);
  gpu.launch(gates ? kernels.prepGates! : kernels.prep, l.prep, args);
  gpu.launch(decodeStateFor(kernels, args.pending), l.state, args);
}
