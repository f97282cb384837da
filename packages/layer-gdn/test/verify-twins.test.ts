import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, SeededRandom, type DevicePtr, relativeL2Error } from '@metrale/core';
import { afterEach, describe, expect, it } from 'vitest';
import { projectionRows, slotBuffers } from './twin-buffers.js';
import {
  launchTwoKernelVerify, recurrentVariantKernels, twoKernelVerifyKernels, twoKernelVerifyLaunches, verifyPrepKernel, verifyPrepLayout, verifyStateKernel,
  VERIFY_ROWS, VERIFY_SCALARS, projectionRow, type VerifyArgs,
} from '@metrale/layer-gdn';
// (pad4 is not part of the package's API.)
import { pad4 } from '../src/gdn-launch.js';

// The two-kernel verify's CPU twins (gdn.verify-prep, then gdn.verify-state) against
// gdn.recurrent's CPU reference for the same verify step (mode 1), write-on-accept and carried,
// on random data. (The GPU suite checks the CUDA kernels against these twins.)

type Shape = Pick<VerifyArgs, 'hk' | 'hv' | 'dk' | 'dv' | 'convK' | 'maxK'>;

const SHAPES: Record<string, Shape> = {
  'r 2, d_k > d_v, K 4': { hk: 2, hv: 4, dk: 6, dv: 5, convK: 4, maxK: 4 },
  'r 3, d_k = d_v, K 3, maxK 6': { hk: 1, hv: 3, dk: 8, dv: 8, convK: 3, maxK: 6 },
};
/** (shape, k): full blocks, a short one (rows ≥ k of the records zero), k = 1; k = 4 under maxK 6. */
const CASES: [string, number][] = [
  ['r 2, d_k > d_v, K 4', 4],
  ['r 2, d_k > d_v, K 4', 2],
  ['r 2, d_k > d_v, K 4', 1],
  ['r 3, d_k = d_v, K 3, maxK 6', 4],
  ['r 3, d_k = d_v, K 3, maxK 6', 3],
];
const MAX_SEQS = 5;
const EPS = 1e-6;
const BUFS = ['y', 'state', 'convRing', 'stash', 'convStash', 'prep'] as const;
type Buf = (typeof BUFS)[number];

/**
 * A verify step's host buffers, random and never zero (y and prep too: what a kernel leaves
 * untouched must stay as it was). Rows of position p start at (batch − 1 − p)·k: rowStarts, not
 * p·k, says where they are.
 */
function hostBuffers(s: Shape, k: number, slots: number[], seqLens: number[], pending: number[] | undefined, rnd: SeededRandom) {
  const batch = slots.length;
  const uni = (n: number, lo: number, hi: number) => Float32Array.from({ length: n }, () => lo + (hi - lo) * rnd.float());
  return {
    qkvz: projectionRows(s, batch * k, rnd),
    y: uni(batch * k * s.hv * s.dv, -3, 3),
    slots: Int32Array.from(slots),
    rowStarts: Int32Array.from({ length: batch + 1 }, (_, p) => (p < batch ? (batch - 1 - p) * k : batch * k)),
    seqLens: Int32Array.from(seqLens),
    ...slotBuffers(s, MAX_SEQS, pending, rnd),
    prep: uni(verifyPrepLayout(s, batch).totalFloats, 5, 6),
  };
}
type Host = ReturnType<typeof hostBuffers>;

/** Positions: a fresh sequence, a padding position, sequences shorter and longer than K. */
const SLOTS = [3, -1, 0, 4, 1];
const SEQ_LENS = [0, 1, 2, 9, 30];
/**
 * Pending rows per slot, never above its committed length: slot 4 (length 9) has maxK (with
 * maxK = K = 4, position P0 − K is pending: the ring takes it at the index P0's conv does not
 * read), slot 2 (unused) keeps a count.
 */
const pendingOf = (s: Shape) => [2, 3, 1, 0, s.maxK];

describe('two-kernel verify: CPU twins ≡ gdn.recurrent (mode 1)', () => {
  let gpu: CpuBackend | undefined;
  afterEach(() => {
    gpu?.dispose();
    gpu = undefined;
  });

  /** Uploads the host buffers to a fresh backend. */
  function upload(host: Host): Record<keyof Host, DevicePtr> {
    gpu?.dispose();
    gpu = new CpuBackend();
    const d = {} as Record<keyof Host, DevicePtr>;
    for (const [name, a] of Object.entries(host) as [keyof Host, Float32Array | Int32Array | Uint32Array][]) {
      d[name] = gpu.alloc(Math.max(16, a.byteLength));
      gpu.upload(d[name], a);
    }
    return d;
  }

  /** Runs the step on a fresh backend: `two` through the twins, else through gdn.recurrent; returns the buffers after it. */
  function run(s: Shape, k: number, host: Host, carried: boolean, two: boolean): Record<Buf, Float32Array> {
    const d = upload(host);
    const batch = host.slots.length;
    const stream = gpu!.defaultStream;
    const common = {
      qkvz: d.qkvz, y: d.y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
      convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
      stash: d.stash, convStash: carried ? d.convStash : 0n, pending: carried ? d.pending : 0n, batch, k, ...s, eps: EPS, yDtype: 0,
    };
    if (two) {
      launchTwoKernelVerify(gpu!, twoKernelVerifyKernels, s, stream, { ...common, prep: d.prep });
    } else {
      gpu!.launch(recurrentVariantKernels.general, { grid: [batch, s.hv], block: s.dv, stream }, { ...common, mode: 1 });
    }
    gpu!.synchronize();
    const f32 = (name: Buf) => {
      const b = gpu!.download(d[name], host[name].byteLength);
      return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4).slice();
    };
    return Object.fromEntries(BUFS.map((b) => [b, f32(b)])) as Record<Buf, Float32Array>;
  }

  /** Rows 0 .. k − 1 of every value head of the used slots' stash, and whether an entry is one of them. */
  function stashRows(s: Shape, k: number, stash: Float32Array): { rows: number[]; written: (i: number) => boolean } {
    const stashRow = s.dk + s.dv + 1;
    const seq = s.hv * s.maxK * stashRow;
    const used = new Set(SLOTS.filter((x) => x >= 0));
    const written = (i: number) => used.has(Math.floor(i / seq)) && Math.floor((i % seq) / stashRow) % s.maxK < k;
    return { rows: [...stash].filter((_, i) => written(i)), written };
  }

  /** The prep records' entries that must be zero: padding past d_k / d_v, rows ≥ k, the unused scalars. */
  function checkPrepZeros(s: Shape, k: number, prep: Float32Array, batch: number): void {
    const { keyStride, valueStride, keysFloats } = verifyPrepLayout(s, batch);
    const dkp = pad4(s.dk);
    const dvp = pad4(s.dv);
    const sc = VERIFY_ROWS * dvp;
    expect(valueStride).toBe(sc + VERIFY_SCALARS);
    SLOTS.forEach((slot, p) => {
      if (slot < 0) return;
      for (let g = 0; g < s.hk; g++) {
        const rec = prep.subarray((p * s.hk + g) * keyStride, (p * s.hk + g + 1) * keyStride);
        for (let t = 0; t < VERIFY_ROWS; t++) {
          for (let i = 0; i < 2 * dkp; i++) {
            const zero = t >= k || i % dkp >= s.dk;
            if (zero) expect(rec[2 * t * dkp + i], `keys (${p}, ${g}) row ${t} entry ${i}`).toBe(0);
            else expect(rec[2 * t * dkp + i], `keys (${p}, ${g}) row ${t} entry ${i}`).not.toBe(0);
          }
        }
      }
      for (let h = 0; h < s.hv; h++) {
        const rec = prep.subarray(keysFloats + (p * s.hv + h) * valueStride, keysFloats + (p * s.hv + h + 1) * valueStride);
        for (let t = 0; t < VERIFY_ROWS; t++) {
          for (let j = 0; j < dvp; j++) if (t >= k || j >= s.dv) expect(rec[t * dvp + j], `v (${p}, ${h}) row ${t} entry ${j}`).toBe(0);
        }
        for (let t = 0; t < VERIFY_ROWS; t++) {
          for (const [at, what] of [[0, 'β'], [4, 'A'], [8, 'Γ']] as const) {
            if (t >= k) expect(rec[sc + at + t], `${what}_${t} of (${p}, ${h})`).toBe(0);
            else expect(rec[sc + at + t], `${what}_${t} of (${p}, ${h})`).not.toBe(0);
          }
          expect(rec[sc + 12 + t]).toBe(0);
          // A_t = e^{Γ_t} and Γ decreasing (every gate is negative).
          if (t < k) expect(rec[sc + 4 + t]!).toBeCloseTo(Math.exp(rec[sc + 8 + t]!), 6);
          if (t > 0 && t < k) expect(rec[sc + 8 + t]!).toBeLessThan(rec[sc + 8 + t - 1]!);
          for (let q = 0; q < VERIFY_ROWS; q++) {
            // ck[q][t] for q < t < k, cq[q][t] for q ≤ t < k; zero elsewhere.
            if (!(q < t && t < k)) expect(rec[sc + 16 + 4 * q + t], `ck[${q}][${t}] of (${p}, ${h})`).toBe(0);
            if (!(q <= t && t < k)) expect(rec[sc + 32 + 4 * q + t], `cq[${q}][${t}] of (${p}, ${h})`).toBe(0);
          }
        }
      }
    });
  }

  for (const [name, k] of CASES) {
    const s = SHAPES[name]!;
    for (const carried of [false, true]) {
      it(`${name}, k = ${k}, ${carried ? 'carried (pending 0 .. maxK)' : 'write-on-accept'}: y, stash, state, ring and conv stash match`, () => {
        const rnd = new SeededRandom((carried ? 17 : 3) + 100 * k);
        const host = hostBuffers(s, k, SLOTS, SEQ_LENS, carried ? pendingOf(s) : undefined, rnd);
        const ref = run(s, k, host, carried, false);
        const got = run(s, k, host, carried, true);
        const batch = SLOTS.length;
        const rowElems = s.hv * s.dv;

        expect(relativeL2Error(got.y, ref.y), 'y').toBeLessThan(1e-5);
        // Every real position's y rows written; the padding position's rows untouched.
        SLOTS.forEach((slot, p) => {
          const r0 = host.rowStarts[p]!;
          const span = [r0 * rowElems, (r0 + k) * rowElems] as const;
          const rows = got.y.subarray(...span);
          const before = host.y.subarray(...span);
          if (slot < 0) expect([...rows], `padding position ${p}'s y`).toEqual([...before]);
          else expect(rows.every((v, i) => v !== before[i]), `position ${p}'s y written`).toBe(true);
        });
        expect(got.y.every((v, i) => v === ref.y[i] || Math.abs(v - ref.y[i]!) < 1e-4), 'y elementwise').toBe(true);

        const sr = stashRows(s, k, got.stash);
        const rr = stashRows(s, k, ref.stash);
        expect(relativeL2Error(sr.rows, rr.rows), 'stash rows 0 .. k − 1').toBeLessThan(1e-5);
        expect(sr.rows.every((v, i) => v !== stashRows(s, k, host.stash).rows[i]), 'stash rows written').toBe(true);
        // The rest of the stash (rows ≥ k, unused slots) untouched by both.
        expect(got.stash.every((v, i) => sr.written(i) || v === host.stash[i]), 'rest of the stash').toBe(true);
        expect(ref.stash.every((v, i) => rr.written(i) || v === host.stash[i])).toBe(true);

        // State, ring, conv stash: the same operations on both sides (the fold, the ring's
        // pending rows, the new rows' inputs), so equal up to nothing.
        for (const buf of ['state', 'convRing', 'convStash'] as const) {
          expect(relativeL2Error(got[buf], ref[buf]), buf).toBeLessThan(1e-7);
          const changed = got[buf].some((v, i) => v !== host[buf][i]);
          // Write-on-accept writes none of them; carried writes all three.
          expect(changed, `${buf} written`).toBe(carried);
        }

        checkPrepZeros(s, k, got.prep, batch);
        // The padding position's records untouched.
        const { keyStride, valueStride, keysFloats } = verifyPrepLayout(s, batch);
        const pad = SLOTS.indexOf(-1);
        const keys = [pad * s.hk * keyStride, (pad + 1) * s.hk * keyStride] as const;
        const vals = [keysFloats + pad * s.hv * valueStride, keysFloats + (pad + 1) * s.hv * valueStride] as const;
        expect([...got.prep.subarray(...keys)]).toEqual([...host.prep.subarray(...keys)]);
        expect([...got.prep.subarray(...vals)]).toEqual([...host.prep.subarray(...vals)]);
      });
    }
  }

  it('gdn.verify-state reads the records, not qkvz: the state kernel alone, on prep records of another qkvz, gives the other y', () => {
    const s = SHAPES['r 2, d_k > d_v, K 4']!;
    const k = 3;
    const host = hostBuffers(s, k, SLOTS, SEQ_LENS, undefined, new SeededRandom(9));
    const want = run(s, k, host, false, true);
    // Same step, qkvz's q, k and v columns and ba negated (z kept), with the first run's records.
    const other = { ...host, qkvz: host.qkvz.map((v) => -v) };
    const z = new Set<number>();
    const { width } = projectionRow(s);
    const r = s.hv / s.hk;
    for (let g = 0; g < s.hk; g++) for (let c = 0; c < r * s.dv; c++) z.add(g * (2 * s.dk + 2 * r * s.dv) + 2 * s.dk + r * s.dv + c);
    for (let i = 0; i < other.qkvz.length; i++) if (z.has(i % width)) other.qkvz[i] = host.qkvz[i]!;
    const d = upload({ ...other, prep: Float32Array.from(want.prep) });
    const stream = gpu!.defaultStream;
    gpu!.launch(verifyStateKernel, twoKernelVerifyLaunches(s, SLOTS.length, stream, s.maxK).state, {
      qkvz: d.qkvz, y: d.y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
      convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
      stash: d.stash, convStash: 0n, pending: 0n, prep: d.prep, batch: SLOTS.length, k, ...s, eps: EPS, yDtype: 0,
    });
    gpu!.synchronize();
    const b = gpu!.download(d.y, host.y.byteLength);
    expect([...new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4)]).toEqual([...want.y]);
  });

  describe('bad input', () => {
    /** Launches one twin with k (and a prep pointer) on a one-position step of `s`. */
    function launch(kernel: typeof verifyPrepKernel | typeof verifyStateKernel, s: Shape, k: number, nullPrep = false): void {
      // Buffers for VERIFY_ROWS rows, so that a valid k runs.
      const host = hostBuffers(s, VERIFY_ROWS, [0], [1], undefined, new SeededRandom(5));
      const d = upload(host);
      const stream = gpu!.defaultStream;
      const l = twoKernelVerifyLaunches(s, 1, stream, s.maxK);
      gpu!.launch(kernel, kernel === verifyPrepKernel ? l.prep : l.state, {
        qkvz: d.qkvz, y: d.y, slots: d.slots, rowStarts: d.rowStarts, seqLens: d.seqLens, state: d.state, convRing: d.convRing,
        convWeight: d.convWeight, aLog: d.aLog, dtBias: d.dtBias, normWeight: d.normWeight,
        stash: d.stash, convStash: 0n, pending: 0n, prep: nullPrep ? 0n : d.prep, batch: 1, k, ...s, eps: EPS, yDtype: 0,
      });
      gpu!.synchronize();
    }
    const s = SHAPES['r 2, d_k > d_v, K 4']!;
    const small: Shape = { ...s, maxK: 2 };

    for (const kernel of [verifyPrepKernel, verifyStateKernel]) {
      const nm = kernel.name.replace('.', '\\.');
      it(`${kernel.name}: k = 0, 5, and k > maxK`, () => {
        expect(() => launch(kernel, s, 0)).toThrow(InvalidArgumentError);
        expect(() => launch(kernel, s, 0)).toThrow(new RegExp(`${nm}: k must be .*got 0$`));
        expect(() => launch(kernel, s, 5)).toThrow(new RegExp(`${nm}: k must be an integer in 1\\.\\.4 .*got 5$`));
        expect(() => launch(kernel, small, 3)).toThrow(new RegExp(`${nm}: k must be an integer in 1\\.\\.2 \\(min\\(4, maxK 2\\)\\), got 3$`));
        expect(() => launch(kernel, small, 2)).not.toThrow();
      });
      it(`${kernel.name}: a null prep pointer`, () => {
        expect(() => launch(kernel, s, 2, true)).toThrow(InvalidArgumentError);
        expect(() => launch(kernel, s, 2, true)).toThrow(new RegExp(`${nm}: the prep buffer is a null pointer`));
      });
    }

    it('a slot with more pending rows than its length', () => {
      const host = hostBuffers(s, 2, [0], [1], [3, 0, 0, 0, 0], new SeededRandom(5));
      expect(() => run(s, 2, host, true, true)).toThrow(/gdn\.verify-prep: slot 0 has 3 pending rows \(committed length 1/);
    });
  });
});
