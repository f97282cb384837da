import { CpuBackend } from '@metrale/cpu-backend';
import { FLOAT_DTYPE_CODE, SeededRandom, f32ToBf16Bits, f32ToF16Bits, type DevicePtr, relativeL2Error } from '@metrale/core';
import { afterEach, describe, expect, it } from 'vitest';
import { projectionRows, slotBuffers } from './twin-buffers.js';
import {
  DECODE_PREP_GATES_THREADS, NO_GATE_ROWS, decodePrepGatesKernel, decodePrepKernel, decodePrepStride, decodeStateKernel, decodeStatePlainKernel, launchTwoKernelDecode,
  projectionRow, recurrentVariantKernels, twoKernelDecodeKernels, twoKernelDecodeLaunches, type DecodeArgs,
} from '@metrale/layer-gdn';

// The two-kernel decode's CPU twins (gdn.decode-prep, then gdn.decode-state) against
// gdn.recurrent's CPU reference for the same decode step, plain and carried, on random data; and
// gdn.decode-prep-gates (the gates made from the input rows) against in_proj_ba's GEMM then
// gdn.decode-prep.
// (The GPU suite checks the CUDA kernels against these twins.)

type Shape = Pick<DecodeArgs, 'hk' | 'hv' | 'dk' | 'dv' | 'convK' | 'maxK'>;

const SHAPES: Record<string, Shape> = {
  'r 2, d_k > d_v, K 4': { hk: 2, hv: 4, dk: 6, dv: 5, convK: 4, maxK: 4 },
  'r 3, d_k = d_v, K 3, maxK 6': { hk: 1, hv: 3, dk: 8, dv: 8, convK: 3, maxK: 6 },
};
const MAX_SEQS = 5;
const EPS = 1e-6;
function hostBuffers(s: Shape, slots: number[], seqLens: number[], pending: number[] | undefined, rnd: SeededRandom) {
  const batch = slots.length;
  return {
    qkvz: projectionRows(s, batch, rnd),
    y: new Float32Array(batch * s.hv * s.dv),
    slots: Int32Array.from(slots),
    rowStarts: Int32Array.from({ length: batch + 1 }, (_, p) => p),
    seqLens: Int32Array.from(seqLens),
    ...slotBuffers(s, MAX_SEQS, pending, rnd),
    prep: new Float32Array(batch * s.hv * decodePrepStride(s)),
  };
}
type Host = ReturnType<typeof hostBuffers>;

describe('two-kernel decode: CPU twins ≡ gdn.recurrent (mode 0, k = 1)', () => {
  let gpu: CpuBackend | undefined;
  afterEach(() => gpu?.dispose());

  /** Runs the step on a fresh backend: `two` through the twins, else through gdn.recurrent. */
  function run(s: Shape, host: Host, carried: boolean, two: boolean): Record<'y' | 'state' | 'convRing', Float32Array> {
    gpu = new CpuBackend();
    const d = {} as Record<keyof Host, DevicePtr>;
    for (const [name, a] of Object.entries(host) as [keyof Host, Float32Array | Int32Array | Uint32Array][]) {
      d[name] = gpu.alloc(Math.max(16, a.byteLength));
      gpu.upload(d[name], a);
    }
    const batch = host.slots.length;
    const stream = gpu.defaultStream;
    const common = {
      qkvz: d.qkvz, y: d.y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
      convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
      stash: carried ? d.stash : 0n, convStash: carried ? d.convStash : 0n, pending: carried ? d.pending : 0n, batch, ...s, eps: EPS, yDtype: 0,
    };
    if (two) {
      launchTwoKernelDecode(gpu, twoKernelDecodeKernels, s, stream, { ...common, prep: d.prep, ...NO_GATE_ROWS });
    } else {
      gpu.launch(recurrentVariantKernels.general, { grid: [batch, s.hv], block: s.dv, stream }, { ...common, mode: 0, k: 1 });
    }
    gpu.synchronize();
    const f32 = (name: 'y' | 'state' | 'convRing') => {
      const b = gpu!.download(d[name], host[name].byteLength);
      return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
    };
    return { y: f32('y'), state: f32('state'), convRing: f32('convRing') };
  }

  for (const [name, s] of Object.entries(SHAPES)) {
    for (const carried of [false, true]) {
      it(`${name}, ${carried ? 'carried (pending 0 .. maxK)' : 'plain'}: y, state and ring match`, () => {
        const rnd = new SeededRandom(carried ? 17 : 3);
        // Positions: a fresh sequence, a padding position, sequences shorter and longer than K.
        const slots = [3, -1, 0, 4, 1];
        const seqLens = [0, 1, 2, 9, 30];
        // Pending rows per slot (never above its committed length; slot 2, unused, keeps a count).
        const pending = carried ? [2, 3, 1, 0, s.maxK] : undefined;
        const host = hostBuffers(s, slots, seqLens, pending, rnd);
        const ref = run(s, host, carried, false);
        const got = run(s, host, carried, true);
        for (const buf of ['y', 'state', 'convRing'] as const) {
          expect(relativeL2Error(got[buf], ref[buf]), `${buf}`).toBeLessThan(1e-6);
          expect(got[buf].some((v, i) => v !== host[buf][i]), `${buf} written`).toBe(true);
        }
      });
    }
  }

  it('refuses a null prep buffer and a slot with more pending rows than its length', () => {
    const s = SHAPES['r 2, d_k > d_v, K 4']!;
    const host = hostBuffers(s, [0], [1], [3, 0, 0, 0, 0], new SeededRandom(5));
    expect(() => run(s, host, true, true)).toThrow(/slot 0 has 3 pending rows \(committed length 1/);
    gpu!.dispose();
    gpu = new CpuBackend();
    const stream = gpu.defaultStream;
    const l = twoKernelDecodeLaunches(s, 1, stream, s.maxK);
    const p = gpu.alloc(64);
    gpu.upload(p, new Int32Array(16));
    expect(() =>
      gpu!.launch(decodeStateKernel, l.state, {
        qkvz: p, y: p, slots: p, rowStarts: p, seqLens: p, state: p, convRing: p, convWeight: p, aLog: p, dtBias: p, normWeight: p,
        stash: 0n, convStash: 0n, pending: 0n, prep: 0n, batch: 1, ...s, eps: EPS, yDtype: 0, ...NO_GATE_ROWS,
      }),
    ).toThrow(/prep buffer/);
  });

  it('runs gdn.decode-state-plain for a step without a pending table and gdn.decode-state for a carried one', () => {
    const s = SHAPES['r 2, d_k > d_v, K 4']!;
    gpu = new CpuBackend();
    const names: string[] = [];
    const recorder = { launch: (k: { name: string }) => void names.push(k.name) };
    const ptrs = { qkvz: 16n, y: 16n, slots: 16n, rowStarts: 16n, seqLens: 16n, state: 16n, convRing: 16n, convWeight: 16n, aLog: 16n, dtBias: 16n, normWeight: 16n };
    const args = { ...ptrs, stash: 0n, convStash: 0n, pending: 0n, prep: 16n, batch: 1, ...s, eps: EPS, yDtype: 0, ...NO_GATE_ROWS };
    launchTwoKernelDecode(recorder, twoKernelDecodeKernels, s, gpu.defaultStream, args);
    launchTwoKernelDecode(recorder, twoKernelDecodeKernels, s, gpu.defaultStream, { ...args, stash: 16n, convStash: 16n, pending: 16n });
    launchTwoKernelDecode(recorder, { prep: twoKernelDecodeKernels.prep, state: decodeStateKernel }, s, gpu.defaultStream, args);
    expect(names).toEqual([
      'gdn.decode-prep', 'gdn.decode-state-plain',
      'gdn.decode-prep', 'gdn.decode-state',
      'gdn.decode-prep', 'gdn.decode-state',
    ]);
  });

  it('gdn.decode-state-plain refuses a step with a pending table, before it writes anything', () => {
    const s = SHAPES['r 2, d_k > d_v, K 4']!;
    const host = hostBuffers(s, [0], [3], [0, 0, 0, 0, 0], new SeededRandom(9));
    gpu = new CpuBackend();
    const d = {} as Record<keyof Host, DevicePtr>;
    for (const [name, a] of Object.entries(host) as [keyof Host, Float32Array | Int32Array | Uint32Array][]) {
      d[name] = gpu.alloc(Math.max(16, a.byteLength));
      gpu.upload(d[name], a);
    }
    const l = twoKernelDecodeLaunches(s, 1, gpu.defaultStream, s.maxK);
    const args = {
      qkvz: d.qkvz, y: d.y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
      convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
      stash: d.stash, convStash: d.convStash, pending: d.pending, prep: d.prep, batch: 1, ...s, eps: EPS, yDtype: 0, ...NO_GATE_ROWS,
    };
    expect(() => gpu!.launch(decodeStatePlainKernel, l.state, args)).toThrow(/gdn\.decode-state-plain: pending is set/);
    const state = gpu.download(d.state, host.state.byteLength);
    expect(new Float32Array(state.buffer, state.byteOffset, state.byteLength / 4)).toEqual(host.state);
  });
});

describe('gdn.decode-prep-gates: the gates made from the input rows (in_proj_ba apart)', () => {
  let gpu: CpuBackend | undefined;
  afterEach(() => gpu?.dispose());

  const s = SHAPES['r 2, d_k > d_v, K 4']!;
  const hidden = 40;

  /**
   * One step's prep records and state: in_proj_ba through the CPU backend's GEMM into qkvz's ba
   * columns and gdn.decode-prep (`fused` false), or gdn.decode-prep-gates reading the input rows
   * and in_proj_ba, qkvz's ba columns NaN (`fused` true).
   */
  function step(dtype: 'bf16' | 'f16', fused: boolean, carried: boolean) {
    const rnd = new SeededRandom(29);
    const slots = [3, -1, 0, 4];
    const host = hostBuffers(s, slots, [0, 1, 6, 30], carried ? [2, 0, 1, 0, s.maxK] : undefined, rnd);
    const batch = slots.length;
    const encode = dtype === 'bf16' ? f32ToBf16Bits : f32ToF16Bits;
    const x = Uint16Array.from({ length: batch * hidden }, () => encode(-1 + 2 * rnd.float()));
    const w = Uint16Array.from({ length: 2 * s.hv * hidden }, () => encode((-1 + 2 * rnd.float()) * 0.4));
    const { width, baCol } = projectionRow(s);
    for (let t = 0; t < batch; t++) host.qkvz.fill(Number.NaN, t * width + baCol, t * width + baCol + 2 * s.hv);
    gpu = new CpuBackend();
    const d = {} as Record<keyof Host | 'x' | 'w', DevicePtr>;
    for (const [name, a] of Object.entries({ ...host, x, w }) as [keyof Host | 'x' | 'w', Float32Array | Int32Array | Uint32Array | Uint16Array][]) {
      d[name] = gpu.alloc(Math.max(16, a.byteLength));
      gpu.upload(d[name], a);
    }
    const stream = gpu.defaultStream;
    const code = FLOAT_DTYPE_CODE[dtype];
    if (!fused) gpu.gemm({ m: batch, n: 2 * s.hv, k: hidden, a: d.x, b: d.w, c: d.qkvz + BigInt(4 * baCol), transB: true, ldc: width, dtype, outDtype: 'f32', stream });
    launchTwoKernelDecode(gpu, twoKernelDecodeKernels, s, stream, {
      qkvz: d.qkvz, y: d.y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
      convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
      stash: carried ? d.stash : 0n, convStash: carried ? d.convStash : 0n, pending: carried ? d.pending : 0n,
      prep: d.prep, batch, ...s, eps: EPS, yDtype: code,
      ...(fused ? { baInput: d.x, baWeight: d.w, hidden } : NO_GATE_ROWS),
    });
    gpu.synchronize();
    const f32 = (name: 'prep' | 'state' | 'convRing') => {
      const b = gpu!.download(d[name], host[name].byteLength);
      return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
    };
    const out = { prep: f32('prep'), state: f32('state'), convRing: f32('convRing') };
    gpu.dispose();
    gpu = undefined;
    return out;
  }

  for (const dtype of ['bf16', 'f16'] as const) {
    for (const carried of [false, true]) {
      it(`${dtype} rows, ${carried ? 'carried' : 'plain'}: the same records and state as in_proj_ba's GEMM then gdn.decode-prep, bit for bit`, () => {
        const ref = step(dtype, false, carried);
        const got = step(dtype, true, carried);
        expect(got.prep.some((v) => Number.isNaN(v))).toBe(false);
        expect(got.prep).toEqual(ref.prep);
        expect(got.state).toEqual(ref.state);
        expect(got.convRing).toEqual(ref.convRing);
      });
    }
  }

  it('launches gdn.decode-prep-gates with its threads where baWeight is set, and refuses what it cannot run', () => {
    const launches: { name: string; block: unknown }[] = [];
    const recorder = { launch: (k: { name: string }, l: { block: unknown }) => void launches.push({ name: k.name, block: l.block }) };
    const ptrs = { qkvz: 16n, y: 16n, slots: 16n, rowStarts: 16n, seqLens: 16n, state: 16n, convRing: 16n, convWeight: 16n, aLog: 16n, dtBias: 16n, normWeight: 16n };
    const args = { ...ptrs, stash: 0n, convStash: 0n, pending: 0n, prep: 16n, batch: 1, ...s, eps: EPS, yDtype: 1, baInput: 32n, baWeight: 48n, hidden };
    launchTwoKernelDecode(recorder, twoKernelDecodeKernels, s, 0 as never, args);
    expect(launches).toEqual([
      { name: 'gdn.decode-prep-gates', block: DECODE_PREP_GATES_THREADS },
      { name: 'gdn.decode-state-plain', block: expect.anything() },
    ]);
    expect(() => launchTwoKernelDecode(recorder, { prep: twoKernelDecodeKernels.prep, state: decodeStateKernel }, s, 0 as never, args)).toThrow(/no prepGates/);
    gpu = new CpuBackend();
    const p = gpu.alloc(4096);
    const l = twoKernelDecodeLaunches(s, 1, gpu.defaultStream, s.maxK, true);
    const base = { ...args, qkvz: p, y: p, slots: p, rowStarts: p, seqLens: p, state: p, convRing: p, convWeight: p, aLog: p, dtBias: p, normWeight: p, prep: p };
    expect(() => gpu!.launch(decodePrepGatesKernel, l.prep, { ...base, baWeight: 0n })).toThrow(/baWeight is a null pointer/);
    expect(() => gpu!.launch(decodePrepKernel, l.prep, { ...base, baWeight: p })).toThrow(/runs gdn\.decode-prep-gates/);
    expect(() => gpu!.launch(decodePrepGatesKernel, l.prep, { ...base, baWeight: p, baInput: 0n })).toThrow(/baInput/);
    expect(() => gpu!.launch(decodePrepGatesKernel, l.prep, { ...base, baWeight: p, baInput: p, yDtype: 0 })).toThrow(/bf16 or f16 rows/);
    expect(() => gpu!.launch(decodePrepGatesKernel, l.prep, { ...base, baWeight: p, baInput: p, hidden: 0 })).toThrow(/hidden must be a positive integer/);
  });
});
