import { defineKernel, defineKernelModule } from '@metrale/core';
import { foldCpu, recurrentCpu } from './gdn.cpu.js';
import { decodePrepCpu, decodePrepGatesCpu, decodeStateCpu, decodeStatePlainCpu } from './gdn-decode.cpu.js';
import { verifyPrepCpu, verifyStateCpu } from './gdn-verify.cpu.js';
import type { GdnFoldVariant, GdnKernelVariant } from './gdn-launch.js';

// Fatbins built by metrale-build-kernels from kernels/*.cu into dist/kernels/. Layouts: KERNELS.md.
const recurrentModule = defineKernelModule('gdn-recurrent', new URL('./kernels/gdn-recurrent.fatbin', import.meta.url));
const foldModule = defineKernelModule('gdn-fold', new URL('./kernels/gdn-fold.fatbin', import.meta.url));
const decodeModule = defineKernelModule('gdn-decode', new URL('./kernels/gdn-decode.fatbin', import.meta.url));
const verifyModule = defineKernelModule('gdn-verify', new URL('./kernels/gdn-verify.fatbin', import.meta.url));

/** Shape parameters every GDN kernel takes, in this order after its pointers. */
export const SHAPE = { hk: 'i32', hv: 'i32', dk: 'i32', dv: 'i32', convK: 'i32', maxK: 'i32' } as const;

/**
 * A step's buffers and tables, the first parameters of the decode / verify kernels (in this order).
 * `qkvz` holds the rows of both input projections (gdn-config.ts projectionRow: in_proj_ba's
 * columns after in_proj_qkvz's).
 */
export const STEP_BUFFERS = {
  qkvz: 'ptr', y: 'ptr',
  slots: 'ptr', rowStarts: 'ptr', seqLens: 'ptr',
  state: 'ptr', convRing: 'ptr',
  convWeight: 'ptr', aLog: 'ptr', dtBias: 'ptr', normWeight: 'ptr',
  stash: 'ptr', convStash: 'ptr', pending: 'ptr',
} as const;

/**
 * The last parameter of the kernels that write y: the element type y is stored in, as a
 * FLOAT_DTYPE_CODE (0 f32, 1 bf16, 2 f16; the layer's row type, which out_proj reads).
 */
const Y_DTYPE = { yDtype: 'i32' } as const;

const RECURRENT_PARAMS = { ...STEP_BUFFERS, mode: 'i32', batch: 'i32', k: 'i32', ...SHAPE, eps: 'f32', ...Y_DTYPE } as const;

/**
 * The two-kernel decode: a decode step's buffers (one row per batch position) and the prep buffer;
 * then, for gdn.decode-prep-gates, the layer's input rows, in_proj_ba (both in the row type) and
 * their width (0n, 0n, 0 for the others).
 */
const DECODE_PARAMS = { ...STEP_BUFFERS, prep: 'ptr', batch: 'i32', ...SHAPE, eps: 'f32', ...Y_DTYPE, baInput: 'ptr', baWeight: 'ptr', hidden: 'i32' } as const;

/** The two-kernel verify: a verify step's buffers (k rows per batch position) and the prep buffer. */
const VERIFY_PARAMS = { ...STEP_BUFFERS, prep: 'ptr', batch: 'i32', k: 'i32', ...SHAPE, eps: 'f32', ...Y_DTYPE } as const;

const FOLD_PARAMS = {
  qkvz: 'ptr', slots: 'ptr', seqLens: 'ptr', naTab: 'ptr',
  state: 'ptr', convRing: 'ptr', stash: 'ptr',
  batch: 'i32', k: 'i32',
  ...SHAPE,
} as const;

/** Decode and verify through one entry point (`gdn_recurrent_<variant>`, kernels/gdn-recurrent.cu). */
const recurrentKernelOf = (variant: GdnKernelVariant) =>
  defineKernel({ name: `gdn.recurrent.${variant}`, params: RECURRENT_PARAMS, cuda: { module: recurrentModule, symbol: `gdn_recurrent_${variant}` }, cpu: recurrentCpu });

/**
 * Decode and verify, one declaration per variant: the same parameters and CPU twin, launched as
 * gdn-launch.ts recurrentLaunch says for the variant (recurrentVariant picks one per step). mode 0
 * commits the k rows (state and ring written); mode 1 stashes them only.
 */
export const recurrentVariantKernels: Readonly<Record<GdnKernelVariant, ReturnType<typeof recurrentKernelOf>>> = Object.freeze({
  smem: recurrentKernelOf('smem'),
  pipe: recurrentKernelOf('pipe'),
  split: recurrentKernelOf('split'),
  general: recurrentKernelOf('general'),
});

/** Write-on-accept fold through one entry point (`gdn_fold_<variant>`, kernels/gdn-fold.cu). */
const foldKernelOf = (variant: GdnFoldVariant) =>
  defineKernel({ name: `gdn.fold.${variant}`, params: FOLD_PARAMS, cuda: { module: foldModule, symbol: `gdn_fold_${variant}` }, cpu: foldCpu });

/**
 * Write-on-accept fold of the first naTab[p] verify rows of each batch position into state and
 * ring, where the register fold (foldStateKernel) does not take the shape.
 */
export const foldVariantKernels: Readonly<Record<GdnFoldVariant, ReturnType<typeof foldKernelOf>>> = Object.freeze({
  smem: foldKernelOf('smem'),
  general: foldKernelOf('general'),
});

/**
 * Two-kernel decode, first kernel: each (batch position, value head)'s prep record (conv, gates,
 * norms) and the conv ring committed (gdn-decode-launch.ts twoKernelDecodeLaunches).
 */
export const decodePrepKernel = defineKernel({
  name: 'gdn.decode-prep',
  params: DECODE_PARAMS,
  cuda: { module: decodeModule, symbol: 'gdn_decode_prep' },
  cpu: decodePrepCpu,
});

/**
 * Two-kernel decode, first kernel, where in_proj_ba runs apart from in_proj_qkvz: the same records,
 * the gates' raw inputs made from the layer's input rows and in_proj_ba (`baInput`, `baWeight`)
 * instead of read from qkvz, so that GEMM is not launched (kernels/gdn-decode-prep.cuh).
 */
export const decodePrepGatesKernel = defineKernel({
  name: 'gdn.decode-prep-gates',
  params: DECODE_PARAMS,
  cuda: { module: decodeModule, symbol: 'gdn_decode_prep_gates' },
  cpu: decodePrepGatesCpu,
});

/** Two-kernel decode, second kernel: pending rows folded, the row run from its prep record (state and y written). */
export const decodeStateKernel = defineKernel({
  name: 'gdn.decode-state',
  params: DECODE_PARAMS,
  cuda: { module: decodeModule, symbol: 'gdn_decode_state' },
  cpu: decodeStateCpu,
  // Its prologue loads the state, then it waits for the prep kernel (wait_previous_kernel, gdn-pdl.cuh):
  // early only after the prep, where its launch says so.
  earlyStart: 'per-launch',
});

/**
 * The same for a step without a pending table (`pending` 0; the kernel traps on one): only the
 * no-pending path is compiled, so it runs without the carried paths' register spills.
 */
export const decodeStatePlainKernel = defineKernel({
  name: 'gdn.decode-state-plain',
  params: DECODE_PARAMS,
  cuda: { module: decodeModule, symbol: 'gdn_decode_state_plain' },
  cpu: decodeStatePlainCpu,
  // Its prologue loads the state, then it waits for the prep kernel (wait_previous_kernel, gdn-pdl.cuh):
  // early only after the prep, where its launch says so.
  earlyStart: 'per-launch',
});

/** The three, as gdn-decode-launch.ts launchTwoKernelDecode takes them. */
export const twoKernelDecodeKernels = Object.freeze({ prep: decodePrepKernel, prepGates: decodePrepGatesKernel, state: decodeStateKernel, statePlain: decodeStatePlainKernel });

/**
 * Two-kernel verify, first kernel: the k rows' conv, norms, Gram entries and gates of each
 * (batch position, key head) into the prep buffer; carried mode commits the pending rows to the
 * ring and records the new rows' conv inputs (gdn-verify-launch.ts twoKernelVerifyLaunches).
 */
export const verifyPrepKernel = defineKernel({
  name: 'gdn.verify-prep',
  params: VERIFY_PARAMS,
  cuda: { module: verifyModule, symbol: 'gdn_verify_prep' },
  cpu: verifyPrepCpu,
});

/** Two-kernel verify, second kernel: pending rows folded (and written, carried), the k rows scored from the state and recorded in the stash. */
export const verifyStateKernel = defineKernel({
  name: 'gdn.verify-state',
  params: VERIFY_PARAMS,
  cuda: { module: verifyModule, symbol: 'gdn_verify_state' },
  cpu: verifyStateCpu,
  // Its prologue loads the state, then it waits for the prep kernel (wait_previous_kernel, gdn-pdl.cuh):
  // early only after the prep, where its launch says so.
  earlyStart: 'per-launch',
});

/** Both, as gdn-verify-launch.ts launchTwoKernelVerify takes them. */
export const twoKernelVerifyKernels = Object.freeze({ prep: verifyPrepKernel, state: verifyStateKernel });

/**
 * Write-on-accept fold with the head in registers (kernels/gdn-fold-state.cuh): gdn.fold's
 * parameters, semantics and CPU twin, in the decode state kernel's layout (gdn-fold-launch.ts
 * foldStateLaunch; the layer's choice between the two: foldPath).
 */
export const foldStateKernel = defineKernel({
  name: 'gdn.fold-state',
  params: FOLD_PARAMS,
  cuda: { module: decodeModule, symbol: 'gdn_fold_state' },
  cpu: foldCpu,
});

/** The fold's kernels, as gdn-fold-launch.ts launchFold takes them. */
export const foldKernels = Object.freeze({ state: foldStateKernel, variants: foldVariantKernels });
