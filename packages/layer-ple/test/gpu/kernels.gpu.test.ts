// The PLE kernels (kernels/ple-project.cu, kernels/ple-gate.cu) on CUDA against their CPU twins
// (src/ple-project.cpu.ts, src/ple-gate.cpu.ts): the same defineKernel declaration launched on
// both backends with identical random buffers (outputs poisoned with NaN first), compared by
// relative L2 error; integers exactly. Covers f32/bf16/f16 storage, padding positions, ids outside
// the vocabulary and past the table, map and row-slot modes, sub-ranges (firstRow > 0), and the
// Gemma 3n E4B widths (D = 2048, P = 256). Without a GPU the suite skips and says why.
import { CpuBackend } from '@metrale/cpu-backend';
import { SeededRandom, toBf16, type DevicePtr, type GpuBackend, type Kernel, type KernelArgs, type KernelParams, type LaunchConfig } from '@metrale/core';
import { runKernelOnBoth } from '@metrale/core/testing';
import { combineKernel, embedGatherKernel, f32ToF16Bits, gateMulKernel, mapSetKernel, outNormKernel, threadsFor } from '@metrale/layer-ple';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { relError } from '../ple-reference.js';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

const cuda = await cudaAvailable();
if (!cuda.available) console.warn(`[layer-ple gpu] kernel tests skipped: ${cuda.reason}`);

type Bufs = Record<string, Uint8Array>;
const bytesOf = (a: ArrayBufferView): Uint8Array => new Uint8Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));
const poison = (n: number): Uint8Array => new Uint8Array(n).fill(0xff);

let cudaGpu: GpuBackend | undefined;
const results: string[] = [];

/** Runs `kernel` on both backends over buffers with the given contents; returns the named outputs from each. */
function onBoth<P extends KernelParams>(
  kernel: Kernel<P>, bufs: Bufs, config: Omit<LaunchConfig, 'stream'>, args: (ptr: Record<string, DevicePtr>) => KernelArgs<P>, outputs: string[],
): { cpu: Bufs; cuda: Bufs } {
  return runKernelOnBoth(() => new CpuBackend(), cudaGpu!, bufs, (gpu, p) => gpu.launch(kernel, { ...config, stream: gpu.defaultStream }, args(p)), outputs);
}

function compareF32(label: string, a: Uint8Array, b: Uint8Array, bound = 1e-5): void {
  const x = new Float32Array(a.buffer, a.byteOffset, a.byteLength / 4);
  const y = new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  expect(y.some((v) => Number.isNaN(v)), `${label}: CUDA left NaN (poison) in the output`).toBe(false);
  const rel = relError(y, x);
  results.push(`${label.padEnd(58)} rel ${rel.toExponential(2)}`);
  expect(rel, label).toBeLessThanOrEqual(bound);
}

function storage(values: Float32Array, dtype: number): Uint8Array {
  if (dtype === 0) return bytesOf(values);
  if (dtype === 1) return bytesOf(toBf16(values));
  return bytesOf(Uint16Array.from(values, (v) => f32ToF16Bits(v)));
}

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

  for (const [D, dtype] of [[40, 0], [2048, 1], [100, 2], [2048, 0]] as const) {
    it(`ple.embed-gather, D = ${D}, dtype ${['f32', 'bf16', 'f16'][dtype]}`, () => {
      const V = 300;
      const t = tables([3, 1, 4, 2], [2, -1, 0, 5]);
      const tokens = Int32Array.from({ length: t.rows }, (_, i) => (i === 4 ? V : i === 6 ? -1 : random.int(0, V - 1)));
      for (const [first, count] of [[0, t.rows], [3, 5]] as const) {
        const bufs = { out: poison(count * D * 4), embed: storage(random.normals(V * D), dtype), tokens: bytesOf(tokens), slots: t.slots, rowStarts: t.rowStarts };
        const r = onBoth(embedGatherKernel, bufs, { grid: count, block: threadsFor(D) }, (p) => ({
          out: p.out!, embed: p.embed!, embedDtype: dtype, tokens: p.tokens!, slots: p.slots!, rowStarts: p.rowStarts!, batch: t.batch, firstRow: first, count,
          hidden: D, vocab: V, scale: Math.fround(Math.sqrt(D)),
        }), ['out']);
        compareF32(`embed-gather D=${D} dtype=${dtype} rows [${first}, ${first + count})`, r.cpu.out!, r.cuda.out!);
      }
    });
  }

  for (const [P, L, dtype, mode] of [[256, 35, 1, 'map'], [24, 3, 0, 'rowSlots'], [256, 35, 2, 'rowSlots'], [32, 4, 0, 'map']] as const) {
    it(`ple.combine, P = ${P}, L = ${L}, table dtype ${['f32', 'bf16', 'f16'][dtype]}, ${mode}`, () => {
      const Vp = 50;
      const capacity = 20;
      const t = tables([1, 1, 1, 1, 1, 1], [0, 3, -1, 1, 2, 4]);
      const tokens = Int32Array.from({ length: t.rows }, (_, i) => (i === 5 ? Vp + 7 : random.int(0, Vp - 1)));
      const map = new Int32Array(Vp).fill(-1);
      tokens.forEach((tok, i) => (map[tok < Vp ? tok : 0] = i === 3 ? -1 : random.int(0, capacity - 1))); // row 3: an unmapped token gives zeros
      const rowSlots = Int32Array.from({ length: t.rows }, () => random.int(0, capacity - 1));
      const layer = L - 1;
      const bufs = {
        ple: poison(t.rows * P * 4), q: bytesOf(random.normals(t.rows * P, 3)), normWeight: bytesOf(random.normals(P)),
        slotRows: storage(random.normals(capacity * L * P, 0.1), dtype), rowSlots: bytesOf(rowSlots), map: bytesOf(map), tokens: bytesOf(tokens),
        slots: t.slots, rowStarts: t.rowStarts,
      };
      const r = onBoth(combineKernel, bufs, { grid: t.rows, block: threadsFor(P) }, (p) => ({
        ple: p.ple!, q: p.q!, normWeight: p.normWeight!, slotRows: p.slotRows!, tableDtype: dtype, rowSlots: mode === 'rowSlots' ? p.rowSlots! : 0n, map: p.map!,
        tokens: p.tokens!, slots: p.slots!, rowStarts: p.rowStarts!, batch: t.batch, firstRow: 0, count: t.rows, perLayer: P, rowElems: L * P,
        layerOffset: layer * P, tableVocab: Vp, projScale: Math.fround(1 / Math.sqrt(2048)), tableScale: Math.fround(Math.sqrt(P)), inputScale: Math.fround(Math.SQRT1_2), eps: 1e-6,
      }), ['ple']);
      compareF32(`combine P=${P} L=${L} dtype=${dtype} ${mode}`, r.cpu.ple!, r.cuda.ple!);
    });
  }

  for (const P of [256, 24]) {
    it(`ple.gate-mul, P = ${P}`, () => {
      const t = tables([2, 2, 2], [1, -1, 0]);
      const bufs = { h: poison(t.rows * P * 4), g: bytesOf(random.normals(t.rows * P, 2)), ple: bytesOf(random.normals(t.rows * P)), slots: t.slots, rowStarts: t.rowStarts };
      const r = onBoth(gateMulKernel, bufs, { grid: t.rows, block: threadsFor(P) }, (p) => ({
        h: p.h!, g: p.g!, ple: p.ple!, slots: p.slots!, rowStarts: p.rowStarts!, batch: t.batch, firstRow: 0, count: t.rows, perLayer: P,
      }), ['h']);
      compareF32(`gate-mul P=${P}`, r.cpu.h!, r.cuda.h!);
    });
  }

  for (const D of [2048, 40]) {
    it(`ple.out-norm, D = ${D} (in place)`, () => {
      const t = tables([3, 1, 2], [0, 2, -1]);
      const bufs = { y: bytesOf(random.normals(t.rows * D, 4)), weight: bytesOf(random.normals(D)), slots: t.slots, rowStarts: t.rowStarts };
      const r = onBoth(outNormKernel, bufs, { grid: t.rows - 1, block: threadsFor(D) }, (p) => ({
        y: p.y! + BigInt(D * 4), weight: p.weight!, slots: p.slots!, rowStarts: p.rowStarts!, batch: t.batch, firstRow: 1, count: t.rows - 1, hidden: D, eps: 1e-6,
      }), ['y']);
      compareF32(`out-norm D=${D} rows [1, ${t.rows})`, r.cpu.y!, r.cuda.y!);
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
