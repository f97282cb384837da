// The PLE kernels (kernels/ple-project.cu, kernels/ple-gate.cu) on CUDA against their CPU twins
// (src/ple-project.cpu.ts, src/ple-gate.cpu.ts): the same defineKernel declaration launched on
// both backends with identical random buffers (outputs poisoned with NaN first), compared by
// relative L2 error of the decoded values; integers exactly. Covers rows of every row type (f32,
// bf16, f16: the model's precision), f32/bf16/f16 storage of the embedding and the table, padding
// positions, ids outside the vocabulary and past the table, map and row-slot modes, sub-ranges
// (firstRow > 0), and the Gemma 3n E4B widths (D = 2048, P = 256). Bounds: f32 1e-5; in 16 bits the
// GPU computes in f32 where the twin computes in f64, so a value the kernel holds in the row type
// can round the other way by one step of it. Without a GPU the suite skips and says why.
import { CpuBackend } from '@metrale/cpu-backend';
import { FLOAT_DTYPE_CODE, SeededRandom, roundTo, type DevicePtr, type FloatDtype, type GpuBackend, type Kernel, type KernelArgs, type KernelParams, type LaunchConfig, relativeL2Error } from '@metrale/core';
import { decodeRows, encodeRows, runKernelOnBoth } from '@metrale/core/testing';
import { combineKernel, embedGatherKernel, gateMulKernel, mapSetKernel, outNormKernel, threadsFor } from '@metrale/layer-ple';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {  } from '../ple-reference.js';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

const cuda = await cudaAvailable();
if (!cuda.available) console.warn(`[layer-ple gpu] kernel tests skipped: ${cuda.reason}`);

type Bufs = Record<string, ArrayBufferView>;
const BOUND: Readonly<Record<FloatDtype, number>> = { f32: 1e-5, bf16: 2e-3, f16: 5e-4 };
const DTYPES: readonly FloatDtype[] = ['f32', 'bf16', 'f16'];
const bytesOf = (a: ArrayBufferView): Uint8Array => new Uint8Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));
/** `n` values of `dtype` that are NaN. */
const poison = (n: number, dtype: FloatDtype = 'f32'): ArrayBufferView => encodeRows(new Float32Array(n).fill(Number.NaN), dtype);

let cudaGpu: GpuBackend | undefined;
const results: string[] = [];

/** Runs `kernel` on both backends over buffers with the given contents; returns the named outputs from each. */
function onBoth<P extends KernelParams>(
  kernel: Kernel<P>, bufs: Bufs, config: Omit<LaunchConfig, 'stream'>, args: (ptr: Record<string, DevicePtr>) => KernelArgs<P>, outputs: string[],
): { cpu: Record<string, Uint8Array>; cuda: Record<string, Uint8Array> } {
  return runKernelOnBoth(() => new CpuBackend(), cudaGpu!, bufs, (gpu, p) => gpu.launch(kernel, { ...config, stream: gpu.defaultStream }, args(p)), outputs);
}

/** The outputs as values of the row type `dtype`, CUDA's against the twin's. */
function compare(label: string, a: Uint8Array, b: Uint8Array, dtype: FloatDtype): void {
  const x = decodeRows(a, dtype);
  const y = decodeRows(b, dtype);
  expect(x.some((v) => Number.isNaN(v)), `${label}: the CPU twin left NaN (poison) in the output`).toBe(false);
  expect(y.some((v) => Number.isNaN(v)), `${label}: CUDA left NaN (poison) in the output`).toBe(false);
  const rel = relativeL2Error(y, x);
  const differing = x.reduce((n, v, i) => n + (y[i] !== v ? 1 : 0), 0);
  results.push(`${label.padEnd(62)} rel ${rel.toExponential(2)} (${differing}/${x.length} differ)`);
  expect(rel, label).toBeLessThanOrEqual(BOUND[dtype]);
}

/** f32 weights holding values of the row type, as the layer uploads norm weights. */
const rowValues = (v: Float32Array, dtype: FloatDtype): Float32Array => (dtype === 'f32' ? v : v.map((x) => roundTo(dtype, x)));

/** Step tables: `batch` positions with the given row counts and slots (−1 = padding). */
function tables(counts: number[], slots: number[]) {
  const rowStarts = new Int32Array(counts.length + 1);
  counts.forEach((c, i) => (rowStarts[i + 1] = rowStarts[i]! + c));
  return { rowStarts: bytesOf(rowStarts), slots: bytesOf(Int32Array.from(slots)), rows: rowStarts[counts.length]!, batch: counts.length };
}

describe.skipIf(!cuda.available)('PLE kernels on CUDA match their CPU twins', () => {
  beforeAll(async () => {
    ensureFatbins();
    cudaGpu = cuda.create!();
  });
  afterAll(() => {
    cudaGpu?.dispose();
    console.log(`[layer-ple gpu] kernels vs CPU twins:\n  ${results.join('\n  ')}`);
  });

  const random = new SeededRandom(Number(process.env.METRALE_PLE_SEED ?? 2026));

  // [D, storage dtype of the embedding, row type]
  for (const [D, dtype, rows] of [[40, 0, 'f32'], [2048, 1, 'f32'], [100, 2, 'f32'], [2048, 0, 'f32'], [2048, 1, 'bf16'], [100, 0, 'bf16'], [40, 2, 'f16']] as const) {
    it(`ple.embed-gather, D = ${D}, embedding ${DTYPES[dtype]}, ${rows} rows`, () => {
      const V = 300;
      const t = tables([3, 1, 4, 2], [2, -1, 0, 5]);
      const tokens = Int32Array.from({ length: t.rows }, (_, i) => (i === 4 ? V : i === 6 ? -1 : random.int(0, V - 1)));
      for (const [first, count] of [[0, t.rows], [3, 5]] as const) {
        const bufs = { out: poison(count * D, rows), embed: encodeRows(random.normals(V * D), DTYPES[dtype]!), tokens, slots: t.slots, rowStarts: t.rowStarts };
        const r = onBoth(embedGatherKernel, bufs, { grid: count, block: threadsFor(D) }, (p) => ({
          out: p.out!, embed: p.embed!, embedDtype: dtype, tokens: p.tokens!, slots: p.slots!, rowStarts: p.rowStarts!, batch: t.batch, firstRow: first, count,
          hidden: D, vocab: V, scale: roundTo(rows, Math.sqrt(D)), dtype: FLOAT_DTYPE_CODE[rows],
        }), ['out']);
        compare(`embed-gather D=${D} embed=${DTYPES[dtype]} ${rows} rows [${first}, ${first + count})`, r.cpu.out!, r.cuda.out!, rows);
      }
    });
  }

  // [P, L, storage dtype of the table, mode, row type]
  for (const [P, L, dtype, mode, rows] of [
    [256, 35, 1, 'map', 'f32'], [24, 3, 0, 'rowSlots', 'f32'], [256, 35, 2, 'rowSlots', 'f32'], [32, 4, 0, 'map', 'f32'],
    [256, 35, 1, 'map', 'bf16'], [24, 3, 0, 'rowSlots', 'bf16'], [40, 4, 1, 'map', 'f16'],
  ] as const) {
    it(`ple.combine, P = ${P}, L = ${L}, table ${DTYPES[dtype]}, ${mode}, ${rows} rows`, () => {
      const Vp = 50;
      const capacity = 20;
      const t = tables([1, 1, 1, 1, 1, 1], [0, 3, -1, 1, 2, 4]);
      const tokens = Int32Array.from({ length: t.rows }, (_, i) => (i === 5 ? Vp + 7 : random.int(0, Vp - 1)));
      const map = new Int32Array(Vp).fill(-1);
      tokens.forEach((tok, i) => (map[tok < Vp ? tok : 0] = i === 3 ? -1 : random.int(0, capacity - 1))); // row 3: an unmapped token gives zeros
      const rowSlots = Int32Array.from({ length: t.rows }, () => random.int(0, capacity - 1));
      const layer = L - 1;
      const bufs = {
        ple: poison(t.rows * P, rows), q: encodeRows(random.normals(t.rows * P, 3), rows), normWeight: rowValues(random.normals(P), rows),
        slotRows: encodeRows(random.normals(capacity * L * P, 0.1), DTYPES[dtype]!), rowSlots, map, tokens, slots: t.slots, rowStarts: t.rowStarts,
      };
      const scale = (x: number) => roundTo(rows, x);
      const r = onBoth(combineKernel, bufs, { grid: t.rows, block: threadsFor(P) }, (p) => ({
        ple: p.ple!, q: p.q!, normWeight: p.normWeight!, slotRows: p.slotRows!, tableDtype: dtype, rowSlots: mode === 'rowSlots' ? p.rowSlots! : 0n, map: p.map!,
        tokens: p.tokens!, slots: p.slots!, rowStarts: p.rowStarts!, batch: t.batch, firstRow: 0, count: t.rows, perLayer: P, rowElems: L * P,
        layerOffset: layer * P, tableVocab: Vp, projScale: scale(1 / Math.sqrt(2048)), tableScale: scale(Math.sqrt(P)), inputScale: scale(Math.SQRT1_2), eps: 1e-6,
        dtype: FLOAT_DTYPE_CODE[rows],
      }), ['ple']);
      compare(`combine P=${P} L=${L} table=${DTYPES[dtype]} ${mode} ${rows} rows`, r.cpu.ple!, r.cuda.ple!, rows);
    });
  }

  for (const [P, rows] of [[256, 'f32'], [24, 'f32'], [256, 'bf16'], [24, 'bf16'], [40, 'f16']] as const) {
    it(`ple.gate-mul, P = ${P}, ${rows} rows`, () => {
      const t = tables([2, 2, 2], [1, -1, 0]);
      const bufs = { h: poison(t.rows * P, rows), g: encodeRows(random.normals(t.rows * P, 2), rows), ple: encodeRows(random.normals(t.rows * P), rows), slots: t.slots, rowStarts: t.rowStarts };
      const r = onBoth(gateMulKernel, bufs, { grid: t.rows, block: threadsFor(P) }, (p) => ({
        h: p.h!, g: p.g!, ple: p.ple!, slots: p.slots!, rowStarts: p.rowStarts!, batch: t.batch, firstRow: 0, count: t.rows, perLayer: P, dtype: FLOAT_DTYPE_CODE[rows],
      }), ['h']);
      compare(`gate-mul P=${P} ${rows} rows`, r.cpu.h!, r.cuda.h!, rows);
    });
  }

  for (const [D, rows] of [[2048, 'f32'], [40, 'f32'], [2048, 'bf16'], [40, 'bf16'], [100, 'f16']] as const) {
    it(`ple.out-norm, D = ${D} (in place), ${rows} rows`, () => {
      const t = tables([3, 1, 2], [0, 2, -1]);
      const bytes = rows === 'f32' ? 4 : 2;
      const bufs = { y: encodeRows(random.normals(t.rows * D, 4), rows), weight: rowValues(random.normals(D), rows), slots: t.slots, rowStarts: t.rowStarts };
      const r = onBoth(outNormKernel, bufs, { grid: t.rows - 1, block: threadsFor(D) }, (p) => ({
        y: p.y! + BigInt(D * bytes), weight: p.weight!, slots: p.slots!, rowStarts: p.rowStarts!, batch: t.batch, firstRow: 1, count: t.rows - 1, hidden: D, eps: 1e-6,
        dtype: FLOAT_DTYPE_CODE[rows],
      }), ['y']);
      compare(`out-norm D=${D} rows [1, ${t.rows}) ${rows}`, r.cpu.y!, r.cuda.y!, rows);
    });
  }

  it('ple.map-set writes up to four entries and nothing else', () => {
    for (const n of [1, 3, 4]) {
      const bufs = { map: bytesOf(new Int32Array(64).fill(-1)) };
      const r = onBoth(mapSetKernel, bufs, { grid: 1, block: 32 }, (p) => ({ map: p.map!, n, t0: 5, s0: 1, t1: 63, s1: 2, t2: 0, s2: 3, t3: 9, s3: 4 }), ['map']);
      expect(Array.from(new Int32Array(r.cuda.map!.buffer))).toEqual(Array.from(new Int32Array(r.cpu.map!.buffer)));
      expect(new Int32Array(r.cuda.map!.buffer).filter((v) => v >= 0).length).toBe(n);
    }
  });
});
