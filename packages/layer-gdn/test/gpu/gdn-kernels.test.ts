// GPU tests of the GDN decode, verify and fold kernels (kernels/gdn-recurrent.cu, gdn-fold.cu,
// gdn-decode.cu, gdn-verify.cu) and the row-by-row prefill oracle (test/gpu/kernels/): each
// case runs the same `defineKernel` declaration on the CUDA backend and on the CPU backend (the
// reference, src/gdn.cpu.ts) with identical random buffers, outputs poisoned with NaN first, and
// compares every buffer the kernel may write by relative L2 error (NaN where one side left the
// poison and the other did not counts as a failure). A table of the errors prints at the end.
//
// Run: node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts
// Without a GPU the suite skips and says why. Declarations come from src/gdn-kernels.ts; device and
// fatbins as ./gdn-lane.ts says ($METRALE_GDN_FATBIN_DIR/<module>.fatbin, else dist/kernels/, built
// when missing).
// METRALE_GDN_VARIANT=smem|general runs gdn.recurrent and gdn.fold through that variant's entry
// points (gdn-launch.ts GdnKernelVariant; pipe or split: decode steps through it, the rest as the
// layer picks); unset, each launch runs the variant the layer picks (gdn-launch.ts
// recurrentVariant, foldVariant: pipe for decode steps of ≥ 8 positions, split below that on
// sm_90, smem for the rest, general where smem does not take the shape; the pipe and split cases
// force those variants on these small batches); bench/gdn-tune.sh runs the suite per variant.
// METRALE_GDN_SEED=n repeats a run's random inputs. METRALE_GDN_DEVICE_MODULE=/path/module.mjs
// (development only) replaces the CUDA backend by the module's createDevice(), e.g. an emulator;
// the 80B-shape test then runs only with METRALE_GDN_BIG=1.
import type { DevicePtr, GpuBackend, Kernel, KernelParams } from '@metrale/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { device, laneDir, withFatbin } from './gdn-lane.js';
import {
  GDN_FOLD_VARIANTS, GDN_KERNEL_VARIANTS, foldVariant, pipeSupported, recurrentVariant, runsClusters, splitSupported, variantBlock, variantFor, variantGrid,
  variantSharedBytes, type GdnFoldVariant, type GdnKernelVariant, type GdnLaunchShape,
} from '../../src/gdn-launch.js';
import { chunkKernel } from '../rowwise-kernel.js';
import { diff, projectionHost, rng, type Rng } from '../prefill-harness.js';
import { projectionRow } from '../../src/gdn-config.js';
import { NO_GATE_ROWS, decodePrepStride, launchTwoKernelDecode, twoKernelDecodeSupported, type TwoKernelDecodeKernels } from '../../src/gdn-decode-launch.js';
import { foldStateLaunch } from '../../src/gdn-fold-launch.js';
import { launchTwoKernelVerify, twoKernelVerifySupported, verifyPrepLayout, VERIFY_ROWS, type TwoKernelVerifyKernels } from '../../src/gdn-verify-launch.js';

// ---- device and kernels -----------------------------------------------------------------------

type AnyKernel = Kernel<KernelParams>;
interface Decls {
  readonly recurrent: Readonly<Record<GdnKernelVariant, AnyKernel>>;
  readonly fold: Readonly<Record<GdnFoldVariant, AnyKernel>>;
  readonly chunkKernel: AnyKernel;
  readonly decodePrep: AnyKernel;
  readonly decodeState: AnyKernel;
  readonly decodeStatePlain: AnyKernel;
  readonly verifyPrep: AnyKernel;
  readonly verifyState: AnyKernel;
  readonly foldState: AnyKernel;
}

/** The variant under test (METRALE_GDN_VARIANT), or undefined for the layer's choice per launch. */
const VARIANT = (process.env.METRALE_GDN_VARIANT || undefined) as GdnKernelVariant | undefined;
if (VARIANT !== undefined && !GDN_KERNEL_VARIANTS.includes(VARIANT)) throw new Error(`METRALE_GDN_VARIANT must be one of ${GDN_KERNEL_VARIANTS.join(', ')}, got ${VARIANT}`);

/** The gdn.recurrent variant a launch runs: METRALE_GDN_VARIANT, else what the layer picks (`clusters`: sm_90+). */
function launchVariant(s: GdnLaunchShape, mode: 0 | 1, k: number, batch: number, clusters: boolean): GdnKernelVariant {
  if (VARIANT === 'pipe' || VARIANT === 'split') return mode === 0 && k === 1 ? variantFor(s, VARIANT) : recurrentVariant(s, mode, k, batch, clusters);
  return VARIANT ?? recurrentVariant(s, mode, k, batch, clusters);
}

/** The gdn.fold variant: METRALE_GDN_VARIANT where it is a fold variant, else what the layer picks. */
function foldLaunchVariant(s: GdnLaunchShape): GdnFoldVariant {
  return VARIANT === 'smem' || VARIANT === 'general' ? VARIANT : foldVariant(s);
}

async function loadDecls(): Promise<{ decls: Decls; from: string }> {
  // Always the sources: a built package may be older than the kernels under test.
  const m = await import('../../src/gdn-kernels.js');
  const decls = { recurrent: m.recurrentVariantKernels, fold: m.foldVariantKernels, chunkKernel, decodePrep: m.decodePrepKernel, decodeState: m.decodeStateKernel, decodeStatePlain: m.decodeStatePlainKernel,
    verifyPrep: m.verifyPrepKernel, verifyState: m.verifyStateKernel, foldState: m.foldStateKernel };
  const what = VARIANT ? `variant ${VARIANT}` : 'the variant the layer picks per launch: pipe (≥ PIPE_MIN_BATCH positions) or split (sm_90) for decode steps, else smem or general';
  return { decls: decls as unknown as Decls, from: `src/gdn-kernels.ts (${what})` };
}

if (!device.available) console.warn(`[layer-gdn gpu] skipped: ${device.reason}`);
const { decls, from: declsFrom } = await loadDecls();

// ---- shapes, random buffers -------------------------------------------------------------------

interface Shape {
  readonly name: string;
  readonly hk: number;
  readonly hv: number;
  readonly dk: number;
  readonly dv: number;
  readonly K: number;
  readonly maxK: number;
  readonly maxSeqs: number;
}

function derived(s: Shape) {
  const r = s.hv / s.hk;
  const convDim = 2 * s.hk * s.dk + s.hv * s.dv;
  const { width } = projectionRow(s);  // a row of the input projections' output: qkvz, then ba
  const stashRow = s.dk + s.dv + 1;
  const stashSeq = s.hv * s.maxK * stashRow;
  return { r, convDim, width, stashRow, stashSeq };
}

const baseSeed = Number(process.env.METRALE_GDN_SEED ?? Date.now() % 1_000_000_007);
let caseCounter = 0;

/** Every buffer of a launch, as host arrays. */
interface HostBuffers {
  /** Rows of both input projections (projectionHost). */
  qkvz: Float32Array;
  y: Float32Array;
  slots: Int32Array;
  rowStarts: Int32Array;
  seqLens: Int32Array;
  naTab: Uint32Array;
  state: Float32Array;
  convRing: Float32Array;
  convWeight: Float32Array;
  aLog: Float32Array;
  dtBias: Float32Array;
  normWeight: Float32Array;
  stash: Float32Array;
  convStash: Float32Array;
  pending: Uint32Array;
  /** The two-kernel decode's or verify's prep records (kernels/gdn-decode-prep.cuh, gdn-verify-prep.cuh), NaN-poisoned. */
  prep: Float32Array;
}
type BufferName = keyof HostBuffers;
const BUFFER_NAMES: readonly BufferName[] = [
  'qkvz', 'y', 'slots', 'rowStarts', 'seqLens', 'naTab', 'state', 'convRing', 'convWeight', 'aLog', 'dtBias', 'normWeight', 'stash',
  'convStash', 'pending', 'prep',
];
/** Buffers a kernel may write: compared after every launch. */
const OUTPUTS: readonly BufferName[] = ['y', 'state', 'convRing', 'stash', 'convStash', 'prep'];

/** A stash of plausible recorded rows: unit keys, moderate deltas, cumulative gates γ ≤ 0. */
function randomStash(s: Shape, R: Rng): Float32Array {
  const { stashRow, stashSeq } = derived(s);
  const st = R.fill(s.maxSeqs * stashSeq, -0.5, 0.5);
  for (let seq = 0; seq < s.maxSeqs; seq++) {
    for (let h = 0; h < s.hv; h++) {
      let gam = 0;
      for (let t = 0; t < s.maxK; t++) {
        const row = seq * stashSeq + (h * s.maxK + t) * stashRow;
        let n2 = 0;
        for (let i = 0; i < s.dk; i++) n2 += st[row + i]! ** 2;
        for (let i = 0; i < s.dk; i++) st[row + i] = st[row + i]! / Math.sqrt(n2);
        gam -= R.uniform(0.01, 0.6);
        st[row + s.dk + s.dv] = gam;
      }
    }
  }
  return st;
}

interface StepLayout {
  readonly slots: readonly number[];
  readonly seqLens: readonly number[];
  /** Rows of each batch position (recurrent: k each; chunk: ragged). */
  readonly rows: readonly number[];
  /** Pending rows per slot (length maxSeqs), or undefined for no carried state. */
  readonly pending?: readonly number[];
  readonly naTab?: readonly number[];
}

function randomHost(s: Shape, L: StepLayout, R: Rng): HostBuffers {
  const { convDim } = derived(s);
  const totalRows = Math.max(1, L.rows.reduce((a, b) => a + b, 0));
  const rowStarts = new Int32Array(L.slots.length + 1);
  for (let p = 0; p < L.slots.length; p++) rowStarts[p + 1] = rowStarts[p]! + L.rows[p]!;
  const aLog = new Float32Array(s.hv);
  for (let h = 0; h < s.hv; h++) aLog[h] = Math.log(R.uniform(0.05, 0.65));
  return {
    qkvz: projectionHost(s, totalRows, R),
    y: new Float32Array(totalRows * s.hv * s.dv).fill(Number.NaN),
    slots: Int32Array.from(L.slots),
    rowStarts,
    seqLens: Int32Array.from(L.seqLens),
    naTab: Uint32Array.from(L.naTab ?? L.slots.map(() => 0)),
    state: R.fill(s.maxSeqs * s.hv * s.dk * s.dv, -0.5, 0.5),
    convRing: R.fill(s.maxSeqs * s.K * convDim, -1, 1),
    convWeight: R.fill(convDim * s.K, -0.6, 0.6),
    aLog,
    dtBias: R.fill(s.hv, -1, 1),
    normWeight: R.fill(s.dv, 0.5, 1.5),
    stash: randomStash(s, R),
    convStash: R.fill(s.maxSeqs * 2 * s.maxK * convDim, -1, 1),  // a ring of 2·maxK rows per slot
    pending: Uint32Array.from(L.pending ?? new Array<number>(s.maxSeqs).fill(0)),
    prep: new Float32Array(Math.max(L.slots.length * s.hv * decodePrepStride(s), verifyPrepLayout(s, L.slots.length).totalFloats)).fill(Number.NaN),
  };
}

type DeviceBuffers = Record<BufferName, DevicePtr>;

function toDevice(gpu: GpuBackend, host: HostBuffers): DeviceBuffers {
  const out = {} as DeviceBuffers;
  for (const name of BUFFER_NAMES) {
    const a = host[name];
    const p = gpu.alloc(Math.max(16, a.byteLength));
    gpu.upload(p, a);
    out[name] = p;
  }
  return out;
}

function fromDevice(gpu: GpuBackend, host: HostBuffers, d: DeviceBuffers, name: BufferName): Float32Array {
  const bytes = gpu.download(d[name], host[name].byteLength);
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
}

function freeDevice(gpu: GpuBackend, d: DeviceBuffers): void {
  for (const name of BUFFER_NAMES) gpu.free(d[name]);
}

// ---- launches ---------------------------------------------------------------------------------

type Launch =
  | {
      readonly kernel: 'recurrent'; readonly mode: 0 | 1; readonly k: number; readonly carried: boolean;
      readonly gridOrder?: 'batch-head' | 'head-batch' | 'flat'; readonly variant?: GdnKernelVariant;
    }
  | { readonly kernel: 'fold'; readonly k: number; readonly variant?: GdnFoldVariant }
  | { readonly kernel: 'chunk'; readonly carried: boolean }
  /** The two-kernel decode (gdn.decode-prep, then gdn.decode-state): one row per batch position. */
  | { readonly kernel: 'decode2'; readonly carried: boolean }
  /** The two-kernel verify (gdn.verify-prep, then gdn.verify-state): k rows per batch position. */
  | { readonly kernel: 'verify2'; readonly k: number; readonly carried: boolean }
  /** The write-on-accept fold with the head in registers (gdn.fold-state). */
  | { readonly kernel: 'fold2'; readonly k: number };

const EPS = 1e-6;
/** The decode prep reads the gates' raw inputs from qkvz (gdn-rows-dtype.test.ts tests them made from the input rows). */

function launchOn(gpu: GpuBackend, kernels: Decls, s: Shape, batch: number, d: DeviceBuffers, l: Launch): void {
  const shape = { hk: s.hk, hv: s.hv, dk: s.dk, dv: s.dv, convK: s.K, maxK: s.maxK };
  const stream = gpu.defaultStream;
  const launchShape = { dk: s.dk, dv: s.dv, convK: s.K, maxK: s.maxK };
  const launch = (k: AnyKernel, variant: GdnKernelVariant | undefined, grid: number[], args: Record<string, number | bigint>) =>
    gpu.launch(
      k,
      variant === undefined
        ? { grid, block: Math.min(s.dv, 1024), stream }
        : { grid, block: variantBlock(variant, s), sharedBytes: variantSharedBytes(variant, launchShape), stream },
      args as never,
    );
  if (l.kernel === 'fold2') {
    gpu.launch(kernels.foldState, foldStateLaunch(shape, batch, stream, s.maxK), {
      qkvz: d.qkvz, slots: d.slots, seqLens: d.seqLens, naTab: d.naTab, state: d.state, convRing: d.convRing, stash: d.stash,
      batch, k: l.k, ...shape,
    } as never);
    return;
  }
  if (l.kernel === 'fold') {
    const v = l.variant ?? foldLaunchVariant(launchShape);
    launch(kernels.fold[v], v, variantGrid(v, batch, s.hv), {
      qkvz: d.qkvz, slots: d.slots, seqLens: d.seqLens, naTab: d.naTab, state: d.state, convRing: d.convRing, stash: d.stash,
      batch, k: l.k, ...shape,
    });
    return;
  }
  const carried = l.carried;
  const common = {
    qkvz: d.qkvz, y: d.y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
    convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
    stash: carried || (l.kernel === 'recurrent' && l.mode === 1) || l.kernel === 'verify2' ? d.stash : 0n,
    convStash: carried ? d.convStash : 0n,
    pending: carried ? d.pending : 0n,
  };
  if (l.kernel === 'chunk') {
    launch(kernels.chunkKernel, undefined, [batch, s.hv], { ...common, batch, ...shape, eps: EPS });
    return;
  }
  if (l.kernel === 'decode2') {
    const two = { prep: kernels.decodePrep, state: kernels.decodeState, statePlain: kernels.decodeStatePlain } as unknown as TwoKernelDecodeKernels;
    launchTwoKernelDecode(gpu, two, { hk: s.hk, dk: s.dk, dv: s.dv, hv: s.hv, convK: s.K }, stream, { ...common, prep: d.prep, batch, ...shape, eps: EPS, yDtype: 0, ...NO_GATE_ROWS });
    return;
  }
  if (l.kernel === 'verify2') {
    const two = { prep: kernels.verifyPrep, state: kernels.verifyState } as unknown as TwoKernelVerifyKernels;
    launchTwoKernelVerify(gpu, two, { hk: s.hk, dk: s.dk, dv: s.dv, hv: s.hv, convK: s.K }, stream, { ...common, prep: d.prep, batch, k: l.k, ...shape, eps: EPS, yDtype: 0 });
    return;
  }
  const v = l.variant ?? launchVariant(launchShape, l.mode, l.k, batch, runsClusters(gpu));
  // Other grid orders for the variants that take any grid of batch·H_v CTAs (not split).
  const grid = v === 'split' ? variantGrid(v, batch, s.hv) : l.gridOrder === 'head-batch' ? [s.hv, batch] : l.gridOrder === 'flat' ? [s.hv * batch] : [batch, s.hv];
  launch(kernels.recurrent[v], v, grid, { ...common, mode: l.mode, batch, k: l.k, ...shape, eps: EPS, yDtype: 0 });
}

function mapVariants<V extends string>(variants: readonly V[], r: Readonly<Record<V, AnyKernel>>, f: (k: AnyKernel) => AnyKernel): Record<V, AnyKernel> {
  return Object.fromEntries(variants.map((v) => [v, f(r[v])])) as Record<V, AnyKernel>;
}

// ---- comparison -------------------------------------------------------------------------------

const TOL = 1e-5;
const table: { case: string; buffer: string; rel: number; maxAbs: number; nan: number; ok: boolean }[] = [];

function check(caseName: string, buffer: string, got: Float32Array, ref: Float32Array, tol = TOL): void {
  const d = diff(got, ref);
  const ok = d.nanMismatch === 0 && d.rel <= tol && Number.isFinite(d.rel);
  table.push({ case: caseName, buffer, rel: d.rel, maxAbs: d.maxAbs, nan: d.nanMismatch, ok });
  expect(d.nanMismatch, `${caseName} ${buffer}: elements written on one side only (NaN poison left on the other)`).toBe(0);
  expect(d.rel, `${caseName} ${buffer}: relative L2 error`).toBeLessThanOrEqual(tol);
}

function printTable(): void {
  if (table.length === 0) return;
  const w = Math.max(...table.map((r) => r.case.length), 4);
  const lines = [`${'case'.padEnd(w)}  ${'buffer'.padEnd(9)}  ${'rel L2'.padStart(10)}  ${'max |Δ|'.padStart(10)}  nan  ok`];
  for (const r of table) {
    lines.push(`${r.case.padEnd(w)}  ${r.buffer.padEnd(9)}  ${r.rel.toExponential(2).padStart(10)}  ${r.maxAbs.toExponential(2).padStart(10)}  ${String(r.nan).padStart(3)}  ${r.ok ? 'ok' : 'FAIL'}`);
  }
  console.log(`GDN kernels, CUDA vs CPU reference (seed ${baseSeed}, kernels from ${declsFrom}, device: ${device.reason})\n${lines.join('\n')}`);
}

// ---- cases ------------------------------------------------------------------------------------

const SHAPES: readonly Shape[] = [
  { name: 'r1 dk64 dv64', hk: 1, hv: 1, dk: 64, dv: 64, K: 4, maxK: 4, maxSeqs: 5 },
  { name: 'r2 dk128 dv128', hk: 2, hv: 4, dk: 128, dv: 128, K: 4, maxK: 4, maxSeqs: 5 },
  { name: 'r4 dk64 dv128', hk: 1, hv: 4, dk: 64, dv: 128, K: 4, maxK: 5, maxSeqs: 4 },
  { name: 'r2 dk128 dv64', hk: 2, hv: 4, dk: 128, dv: 64, K: 4, maxK: 4, maxSeqs: 4 },
  { name: 'r2 dk48 dv40 K3', hk: 2, hv: 4, dk: 48, dv: 40, K: 3, maxK: 6, maxSeqs: 4 },
  { name: 'r2 dk6 dv5', hk: 2, hv: 4, dk: 6, dv: 5, K: 4, maxK: 4, maxSeqs: 4 },
];

interface Case {
  readonly name: string;
  readonly shape: Shape;
  readonly layout: StepLayout;
  readonly launch: Launch;
}

/** Batch positions: slots (one padding), committed lengths from 0 (a fresh sequence) to long. */
function positions(s: Shape, R: Rng, batch: number, minLen = 0): { slots: number[]; seqLens: number[] } {
  const free = Array.from({ length: s.maxSeqs }, (_, i) => i);
  for (let i = free.length - 1; i > 0; i--) {
    const j = R.int(0, i);
    [free[i], free[j]] = [free[j]!, free[i]!];
  }
  const slots: number[] = [];
  const seqLens: number[] = [];
  for (let p = 0; p < batch; p++) {
    const pad = batch > 1 && p === batch - 2;
    slots.push(pad ? -1 : free[p]!);
    seqLens.push(pad ? 1 : p === 0 ? minLen : R.int(Math.max(minLen, 1), 40));
  }
  return { slots, seqLens };
}

function casesFor(s: Shape, R: Rng): Case[] {
  const out: Case[] = [];
  const batch = Math.min(3, s.maxSeqs);
  const add = (name: string, layout: StepLayout, launch: Launch) => out.push({ name: `${s.name} | ${name}`, shape: s, layout, launch });
  const pendingFor = (slots: readonly number[], seqLens: readonly number[], cap: number, forced?: number) => {
    const pend = new Array<number>(s.maxSeqs).fill(0);
    slots.forEach((slot, p) => {
      if (slot >= 0) pend[slot] = forced !== undefined ? Math.min(forced, seqLens[p]!) : Math.min(R.int(0, cap), seqLens[p]!);
    });
    // slots that no batch position uses keep a count too: kernels must leave them alone
    for (let i = 0; i < s.maxSeqs; i++) if (!slots.includes(i)) pend[i] = R.int(0, cap);
    return pend;
  };
  {
    const pos = positions(s, R, batch);
    add('decode', { ...pos, rows: pos.slots.map(() => 1) }, { kernel: 'recurrent', mode: 0, k: 1, carried: false });
  }
  {
    const pos = positions(s, R, batch);
    add('decode grid [H_v, batch]', { ...pos, rows: pos.slots.map(() => 1) }, { kernel: 'recurrent', mode: 0, k: 1, carried: false, gridOrder: 'head-batch' });
  }
  {
    const pos = positions(s, R, batch, 2);
    add('commit k=3 (mode 0)', { ...pos, rows: pos.slots.map(() => 3) }, { kernel: 'recurrent', mode: 0, k: 3, carried: false });
  }
  for (const k of [1, s.maxK]) {
    const pos = positions(s, R, batch);
    add(`verify k=${k} (mode 1)`, { ...pos, rows: pos.slots.map(() => k) }, { kernel: 'recurrent', mode: 1, k, carried: false });
  }
  for (const n of [0, 1, s.maxK]) {
    const pos = positions(s, R, batch, n);
    const k = Math.min(4, s.maxK);
    add(`carried verify k=${k} pending ${n}`, { ...pos, rows: pos.slots.map(() => k), pending: pendingFor(pos.slots, pos.seqLens, s.maxK, n) }, {
      kernel: 'recurrent', mode: 1, k, carried: true,
    });
  }
  {
    const pos = positions(s, R, batch, 1);
    add('carried verify k=2 pending random', { ...pos, rows: pos.slots.map(() => 2), pending: pendingFor(pos.slots, pos.seqLens, s.maxK) }, {
      kernel: 'recurrent', mode: 1, k: 2, carried: true,
    });
  }
  for (const n of [0, 2, s.maxK]) {
    const pos = positions(s, R, batch, n);
    add(`carried decode pending ${n}`, { ...pos, rows: pos.slots.map(() => 1), pending: pendingFor(pos.slots, pos.seqLens, s.maxK, n) }, {
      kernel: 'recurrent', mode: 0, k: 1, carried: true,
    });
  }
  {
    const pos = positions(s, R, batch, 1);
    add('carried commit k=3 pending random', { ...pos, rows: pos.slots.map(() => 3), pending: pendingFor(pos.slots, pos.seqLens, s.maxK) }, {
      kernel: 'recurrent', mode: 0, k: 3, carried: true,
    });
  }
  {
    const pos = positions(s, R, batch);
    const k = s.maxK;
    const naTab = pos.slots.map((_, p) => (p === 0 ? k : p === 1 ? 0 : R.int(1, k)));
    add(`fold k=${k} accepted ${naTab.join('/')}`, { ...pos, rows: pos.slots.map(() => k), naTab }, { kernel: 'fold', k });
  }
  {
    const pos = positions(s, R, batch);
    add('fold k=2 accepted 1', { ...pos, rows: pos.slots.map(() => 2), naTab: pos.slots.map(() => 1) }, { kernel: 'fold', k: 2 });
  }
  // The pipe and split kernels on these small batches (decode steps), and the general kernels
  // where the layer would take smem (each shape's commit, verify and fold through them too).
  const launchShape = { dk: s.dk, dv: s.dv, convK: s.K, maxK: s.maxK };
  const forced: GdnKernelVariant[] = [];
  if (VARIANT === undefined && pipeSupported(launchShape)) forced.push('pipe');
  if (VARIANT === undefined && splitSupported(launchShape)) forced.push('split');
  for (const variant of forced) {
    const pos = positions(s, R, batch);
    add(`decode (${variant})`, { ...pos, rows: pos.slots.map(() => 1) }, { kernel: 'recurrent', mode: 0, k: 1, carried: false, variant });
    for (const n of [2, s.maxK]) {
      const pp = positions(s, R, batch, n);
      add(`carried decode pending ${n} (${variant})`, { ...pp, rows: pp.slots.map(() => 1), pending: pendingFor(pp.slots, pp.seqLens, s.maxK, n) }, {
        kernel: 'recurrent', mode: 0, k: 1, carried: true, variant,
      });
    }
  }
  if (VARIANT === undefined) {
    const variant = 'general';
    const pos = positions(s, R, batch, 1);
    add(`carried verify k=${Math.min(4, s.maxK)} pending random (${variant})`, { ...pos, rows: pos.slots.map(() => Math.min(4, s.maxK)), pending: pendingFor(pos.slots, pos.seqLens, s.maxK) }, {
      kernel: 'recurrent', mode: 1, k: Math.min(4, s.maxK), carried: true, variant,
    });
    const pd = positions(s, R, batch);
    add(`decode (${variant})`, { ...pd, rows: pd.slots.map(() => 1) }, { kernel: 'recurrent', mode: 0, k: 1, carried: false, variant });
    const naTab = pd.slots.map((_, p) => (p === 0 ? s.maxK : p === 1 ? 0 : R.int(1, s.maxK)));
    add(`fold k=${s.maxK} accepted ${naTab.join('/')} (${variant})`, { ...pd, rows: pd.slots.map(() => s.maxK), naTab }, { kernel: 'fold', k: s.maxK, variant });
  }
  // The two-kernel decode, plain and carried (pending 2 and maxK: its 4- and 8-row fold paths).
  if (twoKernelDecodeSupported({ ...launchShape, hk: s.hk, hv: s.hv })) {
    const pos = positions(s, R, batch);
    add('decode (two-kernel)', { ...pos, rows: pos.slots.map(() => 1) }, { kernel: 'decode2', carried: false });
    for (const n of [2, s.maxK]) {
      const pp = positions(s, R, batch, n);
      add(`carried decode pending ${n} (two-kernel)`, { ...pp, rows: pp.slots.map(() => 1), pending: pendingFor(pp.slots, pp.seqLens, s.maxK, n) }, {
        kernel: 'decode2', carried: true,
      });
    }
    // The register fold (the layer's where the two-kernel decode takes the shape): every accepted
    // count from 0 to maxK among the positions, and a fold of 1 of 2 rows.
    const naTab = pos.slots.map((_, p) => (p === 0 ? s.maxK : p === 1 ? 0 : R.int(1, s.maxK)));
    add(`fold k=${s.maxK} accepted ${naTab.join('/')} (register)`, { ...pos, rows: pos.slots.map(() => s.maxK), naTab }, { kernel: 'fold2', k: s.maxK });
    add('fold k=2 accepted 1 (register)', { ...pos, rows: pos.slots.map(() => 2), naTab: pos.slots.map(() => 1) }, { kernel: 'fold2', k: 2 });
  }
  // The two-kernel verify: write-on-accept (k 1 and its most rows) and carried (pending 0, 2,
  // maxK: no fold, its 4- and 8-row fold paths; k = 2 with random pending counts).
  if (twoKernelVerifySupported({ ...launchShape, hk: s.hk, hv: s.hv })) {
    const kMax = Math.min(VERIFY_ROWS, s.maxK);
    for (const k of [1, kMax]) {
      const pos = positions(s, R, batch);
      add(`verify k=${k} (two-kernel)`, { ...pos, rows: pos.slots.map(() => k) }, { kernel: 'verify2', k, carried: false });
    }
    for (const n of [0, 2, s.maxK]) {
      const pp = positions(s, R, batch, n);
      add(`carried verify k=${kMax} pending ${n} (two-kernel)`, { ...pp, rows: pp.slots.map(() => kMax), pending: pendingFor(pp.slots, pp.seqLens, s.maxK, n) }, {
        kernel: 'verify2', k: kMax, carried: true,
      });
    }
    const pr = positions(s, R, batch, 1);
    add('carried verify k=2 pending random (two-kernel)', { ...pr, rows: pr.slots.map(() => 2), pending: pendingFor(pr.slots, pr.seqLens, s.maxK) }, {
      kernel: 'verify2', k: 2, carried: true,
    });
  }
  {
    const pos = positions(s, R, batch);
    const rows = pos.slots.map((_, p) => [7, 1, 13][p % 3]!);
    add(`chunk rows ${rows.join('/')}`, { ...pos, rows }, { kernel: 'chunk', carried: false });
  }
  {
    const pos = positions(s, R, batch, 1);
    const rows = pos.slots.map((_, p) => [2, 9, 5][p % 3]!);
    add(`carried chunk rows ${rows.join('/')} pending random`, { ...pos, rows, pending: pendingFor(pos.slots, pos.seqLens, s.maxK) }, {
      kernel: 'chunk', carried: true,
    });
  }
  return out;
}

// ---- the suite --------------------------------------------------------------------------------

describe.skipIf(!device.available)('GDN kernels: CUDA vs CPU reference', () => {
  let gpu: GpuBackend;
  let kernels: Decls;
  let CpuBackend: typeof import('@metrale/cpu-backend').CpuBackend;

  beforeAll(async () => {
    ({ CpuBackend } = await import('@metrale/cpu-backend'));
    gpu = device.create!();
    kernels = {
      recurrent: mapVariants(GDN_KERNEL_VARIANTS, decls.recurrent, (k) => withFatbin(k)), fold: mapVariants(GDN_FOLD_VARIANTS, decls.fold, (k) => withFatbin(k)),
      chunkKernel: withFatbin(decls.chunkKernel, laneDir),
      decodePrep: withFatbin(decls.decodePrep), decodeState: withFatbin(decls.decodeState), decodeStatePlain: withFatbin(decls.decodeStatePlain),
      verifyPrep: withFatbin(decls.verifyPrep), verifyState: withFatbin(decls.verifyState), foldState: withFatbin(decls.foldState),
    };
  });
  afterAll(() => {
    printTable();
    gpu?.dispose();
  });

  /** Runs one launch on both backends from identical buffers; returns both sides' buffers. */
  function runBoth(c: Case, host: HostBuffers, extra?: (g: GpuBackend, d: DeviceBuffers) => void) {
    const cpu = new CpuBackend({ memoryLimit: 2 ** 31 });
    const sides = [gpu, cpu].map((b) => {
      const d = toDevice(b, host);
      launchOn(b, kernels, c.shape, c.layout.slots.length, d, c.launch);
      extra?.(b, d);
      b.synchronize();
      const out = Object.fromEntries(OUTPUTS.map((n) => [n, fromDevice(b, host, d, n)])) as Record<BufferName, Float32Array>;
      freeDevice(b, d);
      return out;
    });
    cpu.dispose();
    return { got: sides[0]!, ref: sides[1]! };
  }

  for (const shape of SHAPES) {
    const caseSeed = baseSeed + 7919 * caseCounter++;
    for (const c of casesFor(shape, rng(caseSeed))) {
      it(c.name, (ctx) => {
        // The split decode runs in clusters: a GPU before sm_90 has none (the layer never launches it there).
        if (c.launch.kernel === 'recurrent' && c.launch.variant === 'split' && !runsClusters(gpu)) ctx.skip('no thread-block clusters before sm_90');
        const seed = baseSeed + 104729 * caseCounter++;
        const host = randomHost(c.shape, c.layout, rng(seed));
        const { got, ref } = runBoth(c, host);
        for (const name of OUTPUTS) check(c.name, name, got[name], ref[name]);
      });
    }
  }

  // Through gdn.recurrent, and through the two-kernel verify and decode (the layer's path at large batch).
  for (const path of ['gdn.recurrent', 'two-kernel'] as const) it(`carried cycle chained (${path}): verify → (accept) → verify → decode, each backend from its own results`, () => {
    const s = SHAPES[1]!;
    const R = rng(baseSeed + 31);
    const pos = positions(s, R, 3, 4);
    const k = 4;
    const host = randomHost(s, { ...pos, rows: pos.slots.map(() => k), pending: new Array<number>(s.maxSeqs).fill(0) }, R);
    const host2 = randomHost(s, { ...pos, rows: pos.slots.map(() => k) }, R);
    const host3 = randomHost(s, { ...pos, rows: pos.slots.map(() => 1) }, R);
    const name = `${s.name} | chained carried cycle (${path})`;
    const cpu = new CpuBackend({ memoryLimit: 2 ** 31 });
    const outs = [gpu, cpu].map((b) => {
      const d = toDevice(b, host);
      const verify: Launch = path === 'two-kernel' ? { kernel: 'verify2', k, carried: true } : { kernel: 'recurrent', mode: 1, k, carried: true };
      launchOn(b, kernels, s, 3, d, verify);
      // accept 3, 0 (padding), 2 rows: pending counts per slot; the sequences advance
      const pend = new Uint32Array(s.maxSeqs);
      const acc = [3, 0, 2];
      const lens = Int32Array.from(pos.seqLens);
      pos.slots.forEach((slot, p) => {
        if (slot >= 0) {
          pend[slot] = acc[p]!;
          lens[p] = lens[p]! + acc[p]!;
        }
      });
      b.upload(d.pending, pend);
      b.upload(d.seqLens, lens);
      b.upload(d.qkvz, host2.qkvz);
      launchOn(b, kernels, s, 3, d, verify);
      const pend2 = new Uint32Array(s.maxSeqs);
      pos.slots.forEach((slot, p) => {
        if (slot >= 0) {
          pend2[slot] = [4, 0, 1][p]!;
          lens[p] = lens[p]! + pend2[slot]!;
        }
      });
      b.upload(d.pending, pend2);
      b.upload(d.seqLens, lens);
      b.upload(d.qkvz, host3.qkvz.subarray(0, 3 * derived(s).width));
      const rowStarts = Int32Array.from([0, 1, 2, 3]);
      b.upload(d.rowStarts, rowStarts);
      launchOn(b, kernels, s, 3, d, path === 'two-kernel' ? { kernel: 'decode2', carried: true } : { kernel: 'recurrent', mode: 0, k: 1, carried: true });
      b.synchronize();
      const out = Object.fromEntries(OUTPUTS.map((n) => [n, fromDevice(b, host, d, n)])) as Record<BufferName, Float32Array>;
      freeDevice(b, d);
      return out;
    });
    cpu.dispose();
    for (const n of OUTPUTS) check(name, n, outs[0]![n], outs[1]![n]);
  });

  for (const path of ['gdn.recurrent', 'two-kernel'] as const) it(`write-on-accept chained (${path}): verify k=4 then fold of the accepted prefix`, () => {
    const s = SHAPES[2]!;
    const R = rng(baseSeed + 37);
    const pos = positions(s, R, 3, 2);
    const k = 4;
    const host = randomHost(s, { ...pos, rows: pos.slots.map(() => k), naTab: [2, 0, 4] }, R);
    const name = `${s.name} | verify then fold (${path})`;
    const verify: Launch = path === 'two-kernel' ? { kernel: 'verify2', k, carried: false } : { kernel: 'recurrent', mode: 1, k, carried: false };
    const c: Case = { name, shape: s, layout: { ...pos, rows: pos.slots.map(() => k) }, launch: verify };
    const { got, ref } = runBoth(c, host, (b, d) => launchOn(b, kernels, s, 3, d, path === 'two-kernel' ? { kernel: 'fold2', k } : { kernel: 'fold', k }));
    for (const n of OUTPUTS) check(name, n, got[n], ref[n]);
  });

  // METRALE_GDN_BIG=0 leaves it out on a GPU too (bench/gdn-tune.sh: once, not per variant).
  it.skipIf(process.env.METRALE_GDN_BIG === '0' || (device.standIn && !process.env.METRALE_GDN_BIG))('prefill at the Qwen3-Next-80B shape: the row-by-row oracle vs the CPU reference and vs gdn.recurrent row by row', () => {
    const s: Shape = { name: '80B', hk: 16, hv: 32, dk: 128, dv: 128, K: 4, maxK: 4, maxSeqs: 2 };
    const R = rng(baseSeed + 41);
    const rows = [150, 150];
    const layout: StepLayout = { slots: [1, 0], seqLens: [0, 37], rows };
    const host = randomHost(s, layout, R);
    const c: Case = { name: '80B | chunk 2×150 rows', shape: s, layout, launch: { kernel: 'chunk', carried: false } };
    const { got, ref } = runBoth(c, host);
    for (const n of OUTPUTS) check(c.name, n, got[n], ref[n], 1e-4);
    // The recurrence on the GPU (gdn.recurrent mode 0, k = rows) as a second oracle.
    const d = toDevice(gpu, host);
    launchOn(gpu, kernels, s, 2, d, { kernel: 'recurrent', mode: 0, k: 150, carried: false });
    gpu.synchronize();
    for (const n of ['y', 'state', 'convRing'] as const) check('80B | chunk vs recurrent k=150', n, got[n], fromDevice(gpu, host, d, n), 1e-4);
    freeDevice(gpu, d);
  });
});
