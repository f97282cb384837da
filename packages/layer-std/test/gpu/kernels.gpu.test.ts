// Every layer-std kernel on CUDA against its CPU twin (src/*.cpu.ts): the same defineKernel
// declaration launched on both backends, with the launch shapes the layers use, over identical
// random buffers (never zeros; outputs poisoned with NaN first), compared by relative L2 error of
// the decoded values; integers (expert ids, tokens) exactly. In every row type (f32, bf16, f16) and,
// for the experts, every weight format (f32, bf16, f16, block-FP8 over bf16 and f16 rows). Covers
// the vector and scalar paths of the row kernels, expert parallelism's std.moe_localize, both MoE routings (Qwen3-Next softmax top-k with
// and without norm_topk_prob; GLM-5 sigmoid + correction bias + groups + routed scaling), ties and a
// NaN (padding) row, rows whose best experts share a few lanes, more slots than lanes, the few-row route forms (std.moe_route_few bit-identical to std.moe_route;
// std.moe_router_gemv's logits, and its last CTA's route bit-identical to std.moe_route over them,
// at 1, 3 and 8 rows), ids outside the experts, expert shapes whose D and I are not multiples of 128
// (FP8 blocks cut short), the row-wise expert kernels bit-identical to the grouped ones and each of
// 48 rows bit-identical to its result alone (batch invariance), and attention over several pages of
// a shuffled block table with GQA, partial RoPE, q/k norms, the output gate, verify rows and a
// padding row, at the Qwen3-Next-80B head shape (16 heads, 2 KV heads, d 256, rotary 64) and three
// smaller ones. Bounds (STEP): a bf16 / f16 output that rounds the other way from the twin's f64
// value (the GPU computes in f32) differs by one step of its type; a few such flips stay under
// STEP. Without a GPU it skips and says why.
import { CpuBackend } from '@metrale/cpu-backend';
import { FLOAT_DTYPE_CODE, SeededRandom, floatBytes, type FloatDtype, type GpuBackend } from '@metrale/core';
import { runKernelOn, runKernelOnBoth, type KernelBuffers as Bufs, type KernelLaunch, type KernelOutputs, type KernelPointers as Ptrs } from '@metrale/core/testing';
import {
  ATTENTION_KERNELS, EXPERT_FORMATS, geluMulKernel, softcapKernel, attnPrefillLaunch, attnDecodeLaunch, prepLaunch, coreLaunch, combineLaunch, keyChunks, partialsBytes, EXPERT_KERNELS, WEIGHT_DTYPE_CODE, addKernel, addRmsNormKernel, combineKernel, embedKernel, expertsDownLaunch, expertsKernel, expertsLaunch,
  expertsGemm, expertsGemmLaunch, expertsRowwiseLaunch, expertsUpLaunch, expertsUpRowwiseLaunch, flatLaunch, groupKernel, groupLaunch, layerNormKernel, localizeKernel, moeGroupsLength, rmsNormKernel,
  ropeTable, routeFewKernel, routeFewLaunch, routeKernel, routerGemvKernel, routerGemvLaunch, rowLaunch, sharedSlotsKernel, sharedSlotsLaunch, siluMulKernel, type ExpertFormat, type ExpertGemm,
} from '@metrale/layer-std';
import { argmaxKernel, argmaxLaunch } from '@metrale/layer-std';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expertSet, rowTypeOf } from '../expert-weights.js';
import { decodeRows, encodeRows, relErr } from '../setup.js';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

const cuda = await cudaAvailable();
if (!cuda.available) console.warn(`[layer-std gpu] kernel tests skipped: ${cuda.reason}`);

/** Bound of a CUDA output against its CPU twin, by the output's type (see the header). */
const STEP: Readonly<Record<FloatDtype, number>> = { f32: 1e-5, bf16: 2e-3, f16: 5e-4 };
const ROW_TYPES: readonly FloatDtype[] = ['f32', 'bf16', 'f16'];

let cudaGpu: GpuBackend | undefined;
const results: string[] = [];
const random = new SeededRandom(Number(process.env.METRALE_STD_SEED ?? 2026));
const poisonF32 = (n: number): Float32Array => new Float32Array(n).fill(Number.NaN);
const poisonI32 = (n: number): Int32Array => new Int32Array(n).fill(-7);
const poison = (n: number, dtype: FloatDtype): ArrayBufferView => encodeRows(poisonF32(n), dtype);
/** Random values stored as `dtype`. */
const typed = (n: number, dtype: FloatDtype, scale = 1): ArrayBufferView => encodeRows(random.normals(n, scale), dtype);

function onBoth(bufs: Bufs, launch: KernelLaunch, outputs: string[]): { cpu: KernelOutputs; cuda: KernelOutputs } {
  return runKernelOnBoth(() => new CpuBackend(), cudaGpu!, bufs, launch, outputs);
}

const f32 = (b: Uint8Array): Float32Array => new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
const i32 = (b: Uint8Array): Int32Array => new Int32Array(b.buffer, b.byteOffset, b.byteLength / 4);

/** CUDA's output against the twin's, both decoded from `dtype`. */
function compare(label: string, dtype: FloatDtype, cpuOut: Uint8Array, cudaOut: Uint8Array, bound = STEP[dtype]): void {
  const want = decodeRows(cpuOut, dtype);
  const got = decodeRows(cudaOut, dtype);
  expect(want.some((v) => Number.isNaN(v)), `${label}: the CPU twin left NaN`).toBe(false);
  expect(got.some((v) => Number.isNaN(v)), `${label}: CUDA left NaN (poison) in the output`).toBe(false);
  const rel = relErr(got, want);
  let differing = 0;
  for (let i = 0; i < want.length; i++) if (got[i] !== want[i]) differing++;
  results.push(`${label.padEnd(84)} rel ${rel.toExponential(2)} (${differing}/${want.length} differ)`);
  expect(rel, label).toBeLessThanOrEqual(bound);
}

function compareI32(label: string, cpuOut: Uint8Array, cudaOut: Uint8Array): void {
  const want = Array.from(i32(cpuOut));
  const got = Array.from(i32(cudaOut));
  results.push(`${label.padEnd(84)} ${want.length} ids, exact`);
  expect(got, label).toEqual(want);
}

const sameBits = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((v, i) => v === b[i]);

// ---- paged attention steps ---------------------------------------------------------------------
/** A block table over `pool` pages in shuffled order, so a sequence's pages are never adjacent. */
const shuffledPages = (pool: number): Int32Array => Int32Array.from(Array.from({ length: pool }, (_, i) => i).sort(() => random.float() - 0.5));
/** A step's row layout: each sequence's rows from `start` on, `count` of them. */
function stepRows(seqs: readonly { start: number; count: number }[]): { rowStarts: Int32Array; rows: number; positions: Int32Array } {
  const rowStarts = new Int32Array(seqs.length + 1);
  seqs.forEach((q, i) => (rowStarts[i + 1] = rowStarts[i]! + q.count));
  const rows = rowStarts[seqs.length]!;
  const positions = new Int32Array(rows);
  seqs.forEach((q, i) => { for (let j = 0; j < q.count; j++) positions[rowStarts[i]! + j] = q.start + j; });
  return { rowStarts, rows, positions };
}
/** The fused qkv row: the query heads (each followed by its gate when gated), then K and V. */
const qkvWidth = (o: { H: number; Hkv: number; d: number; gated: number }): number => o.H * o.d * (o.gated ? 2 : 1) + 2 * o.Hkv * o.d;
/**
 * A step's attention buffers over `pool` cache pages (a shuffled block table): the rows of `seqs`
 * (slot −1: padding), random K / V caches, qkv and q rows (scale 1.5), and `out` poisoned.
 */
function pagedStep(o: { H: number; Hkv: number; d: number; gated: number; page: number }, dtype: FloatDtype, seqs: readonly { slot: number; start: number; count: number }[], pool: number): { bufs: Bufs; rows: number; rowStarts: Int32Array } {
  const blockTable = shuffledPages(pool);
  const { rowStarts, rows, positions } = stepRows(seqs);
  const cacheElements = pool * o.page * o.Hkv * o.d;
  const bufs: Bufs = {
    blockTable, rowStarts, positions, slots: Int32Array.from(seqs.map((q) => q.slot)),
    kCache: typed(cacheElements, dtype), vCache: typed(cacheElements, dtype), qkv: typed(rows * qkvWidth(o), dtype, 1.5),
    q: typed(rows * o.H * o.d, dtype, 1.5), out: poison(rows * o.H * o.d, dtype),
  };
  return { bufs, rows, rowStarts };
}

describe.skipIf(!cuda.available)('layer-std kernels on CUDA match their CPU twins', () => {
  beforeAll(() => {
    ensureFatbins();
    cudaGpu = cuda.create!();
  });
  afterAll(() => {
    cudaGpu?.dispose();
    console.log(`[layer-std gpu] kernels vs CPU twins (${results.length} comparisons):\n  ${results.join('\n  ')}`);
  });

  // ---- std-rows ------------------------------------------------------------------------------------
  for (const dtype of ROW_TYPES) {
    const code = FLOAT_DTYPE_CODE[dtype];
    for (const D of [2048, 30]) {
      it(`${dtype}: std.embed, hidden ${D} (tokens outside the table give zeros), scale 1 and sqrt(D)`, () => {
        const V = 300;
        const rows = 9;
        const tokens = Int32Array.from({ length: rows }, (_, i) => (i === 2 ? V : i === 5 ? -1 : random.int(0, V - 1)));
        for (const scale of [1, Math.fround(Math.sqrt(D))]) {
          const r = onBoth({ tokens, table: typed(V * D, dtype), out: poison(rows * D, dtype) }, (gpu, p) =>
            gpu.launch(embedKernel, rowLaunch(rows, D, gpu.defaultStream), { tokens: p.tokens!, table: p.table!, out: p.out!, rows, hidden: D, vocab: V, scale, dtype: code }), ['out']);
          compare(`${dtype} embed D=${D} scale=${scale.toFixed(3)}`, dtype, r.cpu.out!, r.cuda.out!, 0);
        }
      });

      it(`${dtype}: std.rms_norm (offset 0 and 1, x̂ rounded first or not, in place), std.add_rms_norm and std.layer_norm (with and without bias), hidden ${D}`, () => {
        const rows = 7;
        const x = random.normals(rows * D, 3);
        // GLM (w · x̂.to(dtype)), Qwen3-Next ((1 + w) · x̂ once), Gemma 3n (w · x̂ once).
        for (const [offset, roundNormalized] of [[0, 1], [1, 0], [0, 0]] as const) {
          const w = random.normals(D, 0.3);
          const r = onBoth({ x: encodeRows(x, dtype), y: poison(rows * D, dtype), w }, (gpu, p) => {
            const args = { weight: p.w!, rows, hidden: D, eps: 1e-6, offset, roundNormalized, dtype: code };
            gpu.launch(rmsNormKernel, rowLaunch(rows, D, gpu.defaultStream), { ...args, input: p.x!, output: p.y! });
            gpu.launch(rmsNormKernel, rowLaunch(rows, D, gpu.defaultStream), { ...args, input: p.x!, output: p.x! });
          }, ['y', 'x']);
          compare(`${dtype} rms_norm D=${D} offset=${offset} roundNormalized=${roundNormalized}`, dtype, r.cpu.y!, r.cuda.y!);
          compare(`${dtype} rms_norm D=${D} offset=${offset} roundNormalized=${roundNormalized} in place`, dtype, r.cpu.x!, r.cuda.x!);
        }
        // The residual add and the norm in one launch: the bits of std.add then std.rms_norm, with the sum apart and over its first addend.
        for (const [offset, roundNormalized] of [[0, 1], [1, 0]] as const) {
          const n = rows * D;
          const a = typed(n, dtype, 3);
          const r = onBoth(
            { a, b: typed(n, dtype, 3), w: random.normals(D, 0.3), ...Object.fromEntries(['sum', 'y', 'sum2', 'y2', 'y3'].map((k) => [k, poison(n, dtype)])), a2: a },
            (gpu, p) => {
              const args = { weight: p.w!, rows, hidden: D, eps: 1e-6, offset, roundNormalized, dtype: code };
              gpu.launch(addKernel, flatLaunch(n, gpu.defaultStream), { a: p.a!, b: p.b!, out: p.sum2!, count: n, dtype: code });
              gpu.launch(rmsNormKernel, rowLaunch(rows, D, gpu.defaultStream), { ...args, input: p.sum2!, output: p.y2! });
              gpu.launch(addRmsNormKernel, rowLaunch(rows, D, gpu.defaultStream), { ...args, a: p.a!, b: p.b!, sum: p.sum!, output: p.y! });
              gpu.launch(addRmsNormKernel, rowLaunch(rows, D, gpu.defaultStream), { ...args, a: p.a2!, b: p.b!, sum: p.a2!, output: p.y3! });
            },
            ['sum', 'y', 'sum2', 'y2', 'a2', 'y3'],
          );
          const label = `${dtype} add_rms_norm D=${D} offset=${offset} roundNormalized=${roundNormalized}`;
          compare(label, dtype, r.cpu.y!, r.cuda.y!);
          for (const [fused, plain] of [['sum', 'sum2'], ['y', 'y2'], ['a2', 'sum2'], ['y3', 'y2']] as const) {
            expect(sameBits(r.cuda[fused]!, r.cuda[plain]!), `${label}: CUDA ${fused} is not bit for bit ${plain} (std.add, std.rms_norm)`).toBe(true);
          }
        }
        const shifted = encodeRows(x.map((v) => v + 5), dtype);
        for (const bias of [true, false]) {
          const r = onBoth({ x: shifted, y: poison(rows * D, dtype), w: random.normals(D, 1), b: random.normals(D, 0.5) }, (gpu, p) =>
            gpu.launch(layerNormKernel, rowLaunch(rows, D, gpu.defaultStream), {
              input: p.x!, output: p.y!, weight: p.w!, bias: bias ? p.b! : 0n, rows, hidden: D, eps: 1e-5, dtype: code,
            }), ['y']);
          compare(`${dtype} layer_norm D=${D} bias=${bias}`, dtype, r.cpu.y!, r.cuda.y!);
        }
      });
    }

    it(`${dtype}: std.add (out aliasing a) and std.silu_mul (inter 512 and 13)`, () => {
      const count = 10_001;
      const r = onBoth({ a: typed(count, dtype), b: typed(count, dtype), out: poison(count, dtype) }, (gpu, p) => {
        gpu.launch(addKernel, flatLaunch(count, gpu.defaultStream), { a: p.a!, b: p.b!, out: p.out!, count, dtype: code });
        gpu.launch(addKernel, flatLaunch(count, gpu.defaultStream), { a: p.a!, b: p.b!, out: p.a!, count, dtype: code });
      }, ['out', 'a']);
      compare(`${dtype} add`, dtype, r.cpu.out!, r.cuda.out!, 0);
      compare(`${dtype} add in place`, dtype, r.cpu.a!, r.cuda.a!, 0);
      for (const I of [512, 13]) {
        const rows = 5;
        const s = onBoth({ gu: typed(rows * 2 * I, dtype, 4), out: poison(rows * I, dtype) }, (gpu, p) =>
          gpu.launch(siluMulKernel, rowLaunch(rows, I, gpu.defaultStream), { gateUp: p.gu!, out: p.out!, rows, inter: I, dtype: code }), ['out']);
        compare(`${dtype} silu_mul I=${I}`, dtype, s.cpu.out!, s.cuda.out!);
      }
    });

    it(`${dtype}: std.gelu_mul with and without Gemma 3n's activation sparsity (inter 512 and 13), std.softcap`, () => {
      for (const I of [512, 13]) {
        const rows = 5;
        for (const sparse of [0, 1]) {
          const s = onBoth({ gu: typed(rows * 2 * I, dtype, 4), out: poison(rows * I, dtype) }, (gpu, p) =>
            gpu.launch(geluMulKernel, rowLaunch(rows, I, gpu.defaultStream), {
              gateUp: p.gu!, out: p.out!, rows, inter: I, cutoff: 1.6448535919189453, sparse, dtype: code,
            }), ['out']);
          compare(`${dtype} gelu_mul I=${I} sparse=${sparse}`, dtype, s.cpu.out!, s.cuda.out!);
        }
      }
      const count = 3001;
      const c = onBoth({ x: random.normals(count, 40) }, (gpu, p) =>
        gpu.launch(softcapKernel, flatLaunch(count, gpu.defaultStream), { x: p.x!, count, cap: 30 }), ['x']);
      compare(`${dtype} softcap`, 'f32', c.cpu.x!, c.cuda.x!);
    });
  }

  // ---- std-sample: std.argmax over slices of its rows ------------------------------------------------
  // The lowest index of each row's maximum whatever the slicing: one CTA per row, argmaxLaunch's
  // shapes (on a 132-SM GPU and on this device), slices of 4 logits, more slices than the row has
  // logits for, fewer row CTAs than rows; at the Qwen3 vocabulary and at widths that are not a
  // multiple of 4 or of the slice, and rows not 16-byte aligned (the scalar path). Rows by r mod 8:
  // random, the maximum in the last logit, the maximum twice (in the first and last slices), all −∞
  // (0), NaN around the maximum, +∞ twice, every logit equal (0), +0 and −0 as the maximum. Each
  // shape is launched twice into two outputs: the last CTA of a row resets its counter, so the
  // second launch (as a graph replay) finishes too, and the counters are zero after.
  /** Rows of the patterns above and each row's token, as planted. */
  function argmaxRows(rows: number, V: number): { logits: Float32Array; want: (number | undefined)[] } {
    const logits = random.normals(rows * V, 3);
    const want: (number | undefined)[] = [];
    for (let r = 0; r < rows; r++) {
      const row = logits.subarray(r * V, (r + 1) * V);
      const third = Math.floor(V / 3);
      const mid = Math.floor(V / 2) + 1;
      want.push(undefined);
      switch (r % 8) {
        case 1:
          row[V - 1] = 50;
          want[r] = V - 1;
          break;
        case 2:
          row[V - 2] = row[3] = 50;
          want[r] = 3;
          break;
        case 3:
          row.fill(-Infinity);
          want[r] = 0;
          break;
        case 4:
          for (let i = 0; i < V; i += 97) row[i] = Number.NaN;
          row[V - 1] = Number.NaN;
          row[mid] = 40;
          want[r] = mid;
          break;
        case 5:
          row[V - 3] = row[third] = Infinity;
          want[r] = third;
          break;
        case 6:
          row.fill(1.5);
          want[r] = 0;
          break;
        case 7:
          row.fill(-1);
          row[V - 2] = 0;
          row[2] = -0;
          want[r] = 2;
          break;
      }
    }
    return { logits, want };
  }
  /** std.argmax at each grid, twice, against the twin, the planted tokens and the counters' reset. */
  function argmaxCase(label: string, rows: number, V: number, grids: readonly (readonly [number, number])[], offset = 0): void {
    const { logits, want } = argmaxRows(rows, V);
    const maxSlices = Math.max(...grids.map((g) => g[0]));
    const data = new Float32Array(offset + rows * V);
    data.set(logits, offset);
    for (const [slices, rowCtas] of grids) {
      const bufs = { logits: data, out: poisonI32(rows), out2: poisonI32(rows), counters: new Uint32Array(rows), partials: poisonI32(2 * rows * maxSlices) };
      const r = onBoth(bufs, (gpu, p) => {
        for (const out of [p.out!, p.out2!]) {
          gpu.launch(argmaxKernel, { grid: [slices, rowCtas], block: 256, stream: gpu.defaultStream }, {
            logits: p.logits! + BigInt(4 * offset), out, counters: p.counters!, partials: p.partials!, rows, vocab: V,
          });
        }
      }, ['out', 'out2', 'counters']);
      const shape = `${label} grid [${slices}, ${rowCtas}]`;
      compareI32(`argmax ${shape}`, r.cpu.out!, r.cuda.out!);
      compareI32(`argmax ${shape}, launched again`, r.cpu.out!, r.cuda.out2!);
      const got = Array.from(i32(r.cuda.out!));
      want.forEach((w, row) => w !== undefined && expect(got[row], `${shape} row ${row}`).toBe(w));
      expect(Array.from(i32(r.cuda.counters!)), `${shape}: the counters are back at zero`).toEqual(new Array(rows).fill(0));
    }
  }
  const launchShape = (rows: number, V: number, sms: number): [number, number] => {
    const grid = argmaxLaunch(rows, V, sms, cudaGpu!.defaultStream).grid as readonly number[];
    return [grid[0]!, grid[1]!];
  };

  it('std.argmax at the Qwen3 vocabulary (151 936): argmaxLaunch\'s shapes at 1 and 64 rows, one CTA per row', () => {
    const V = 151_936;
    const sms = cudaGpu!.device.multiprocessors;
    argmaxCase('V 151936 rows 1', 1, V, [launchShape(1, V, 132), launchShape(1, V, sms), [7, 1]]);
    argmaxCase('V 151936 rows 8', 8, V, [launchShape(8, V, 132), [1, 8]]);
    argmaxCase('V 151936 rows 64', 64, V, [launchShape(64, V, 132), launchShape(64, V, sms)]);
  });

  it('std.argmax: the same tokens at any slicing, widths not a multiple of 4 or of the slice, rows not 16-byte aligned', () => {
    const grids = [[1, 8], [2, 8], [3, 8], [7, 8], [64, 2], [5, 1]] as const;
    argmaxCase('V 1001', 8, 1001, grids);
    argmaxCase('V 4099', 8, 4099, grids);
    argmaxCase('V 1000 (aligned)', 8, 1000, grids);
    argmaxCase('V 1000 unaligned', 8, 1000, grids, 1);
    argmaxCase('V 5', 8, 5, [[1, 8], [2, 8], [9, 3]]);
  });

  // ---- std-moe ---------------------------------------------------------------------------------------
  const routings = [
    { label: 'softmax top-10 of 512, norm_topk_prob', E: 512, topK: 10, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1, bias: false },
    { label: 'softmax top-10 of 512, no norm', E: 512, topK: 10, scoring: 0, normTopK: 0, nGroup: 1, topkGroup: 1, scaling: 1, bias: false },
    { label: 'sigmoid + bias, 8 groups keep 4, top-8 of 256, scaling 2.5', E: 256, topK: 8, scoring: 1, normTopK: 1, nGroup: 8, topkGroup: 4, scaling: 2.5, bias: true },
    { label: 'sigmoid + bias, no groups, top-3 of 12, no norm', E: 12, topK: 3, scoring: 1, normTopK: 0, nGroup: 1, topkGroup: 1, scaling: 1, bias: true },
    { label: 'softmax top-10 of 64, norm_topk_prob', E: 64, topK: 10, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1, bias: false },
    { label: 'sigmoid + bias, no groups, top-8 of 256, scaling 2.5', E: 256, topK: 8, scoring: 1, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 2.5, bias: true },
    { label: 'sigmoid + bias, 8 groups keep 2, top-10 of 64', E: 64, topK: 10, scoring: 1, normTopK: 1, nGroup: 8, topkGroup: 2, scaling: 1, bias: true },
  ];
  /** std.moe_router_gemv's arguments for no tail (neither the shared expert's slots nor the groups). */
  const NO_ROUTE_TAIL = { sharedGate: 0n, slotIds: 0n, slotWeights: 0n, sharedId: -1, groups: 0n, groupExperts: 1 } as const;
  /** The step's padding: the buffer `padSlots` where the case has one (rows `padK` a batch position), else none. */
  const padArgs = (p: Ptrs, padK = 1) => ({ padSlots: p.padSlots ?? 0n, padK: p.padSlots ? padK : 0 });
  /** The route arguments of a routing case. */
  const routeArgs = (o: (typeof routings)[number], rows: number, p: Ptrs, padK = 1) => ({
    bias: o.bias ? p.bias! : 0n, ids: p.ids!, weights: p.weights!, rows, experts: o.E, topK: o.topK,
    scoring: o.scoring, normTopK: o.normTopK, nGroup: o.nGroup, topkGroup: o.topkGroup, scaling: o.scaling, ...padArgs(p, padK),
  });
  for (const o of routings) {
    it(`std.moe_route and std.moe_route_few: ${o.label} (a tied row, a NaN padding row, rows whose best experts share lanes)`, () => {
      const rows = 9;
      const logits = random.normals(rows * o.E, 2);
      // Rows 1 and 2: the best experts in a few lanes (expert e in lane e mod 32), so the ranked
      // top-k has many candidates (row 1: picked one at a time where they exceed its list) or
      // fewer lanes holding any than slots (row 2 with groups 0 and 4 of 64 kept).
      for (let e = 0; e < o.E; e++) {
        if (e % 32 < 10) logits[o.E + e] = 10 - 0.05 * (e % 32) - 0.001 * Math.floor(e / 32);
        if (e % 32 < 8) logits[2 * o.E + e]! += 4;
      }
      logits.fill(0.25, 3 * o.E, 4 * o.E); // every expert tied: ids by index
      for (let e = 0; e < o.E; e += 3) logits[5 * o.E + e] = 1.5; // partial ties
      logits.fill(Number.NaN, 7 * o.E, 8 * o.E); // a padding row holding garbage
      const bufs = { logits, bias: random.normals(o.E, 0.1), ids: poisonI32(rows * o.topK), weights: poisonF32(rows * o.topK) };
      const r = onBoth(bufs, (gpu, p) =>
        gpu.launch(routeKernel, rowLaunch(rows, o.E, gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p) }), ['ids', 'weights']);
      compareI32(`moe_route ${o.label} ids`, r.cpu.ids!, r.cuda.ids!);
      const w = (b: Uint8Array) => f32(b).map((v) => (Number.isNaN(v) ? 0 : v));
      const pad = (b: Uint8Array) => f32(b).subarray(7 * o.topK, 8 * o.topK);
      // The padding row's weights are NaN on both (NaN scores), as they are on the CPU.
      expect(Array.from(pad(r.cuda.weights!)).map(Number.isNaN)).toEqual(Array.from(pad(r.cpu.weights!)).map(Number.isNaN));
      const rel = relErr(w(r.cuda.weights!), w(r.cpu.weights!));
      results.push(`${`moe_route ${o.label} weights`.padEnd(84)} rel ${rel.toExponential(2)}`);
      expect(rel).toBeLessThanOrEqual(1e-6);
      // The few-row form (here 9 rows: several passes of its one CTA) gives the same bits.
      const few = runKernelOn(cudaGpu!, bufs, (gpu, p) =>
        gpu.launch(routeFewKernel, routeFewLaunch(gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p) }), ['ids', 'weights']);
      const same = sameBits(few.ids!, r.cuda.ids!) && sameBits(few.weights!, r.cuda.weights!);
      results.push(`${`moe_route_few ≡ moe_route ${o.label}`.padEnd(84)} ${same ? 'bit-identical' : 'DIFFERS'}`);
      expect(Array.from(i32(few.ids!)), 'route_few ids').toEqual(Array.from(i32(r.cuda.ids!)));
      expect(sameBits(few.weights!, r.cuda.weights!), 'route_few weights: bits of std.moe_route').toBe(true);
      // A verify bucket's padding (3 rows a position, the middle position's slot −1): its rows
      // routed to no expert (ids −1, weights 0) on both and in both forms, every other row's bits
      // those of the route without padding.
      const padBufs = { ...bufs, padSlots: Int32Array.of(5, -1, 2) };
      const padded = onBoth(padBufs, (gpu, p) =>
        gpu.launch(routeKernel, rowLaunch(rows, o.E, gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p, 3) }), ['ids', 'weights']);
      const padFew = runKernelOn(cudaGpu!, padBufs, (gpu, p) =>
        gpu.launch(routeFewKernel, routeFewLaunch(gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p, 3) }), ['ids', 'weights']);
      const K = o.topK;
      const expected = { ids: i32(r.cuda.ids!).slice(), weights: f32(r.cuda.weights!).slice() };
      expected.ids.fill(-1, 3 * K, 6 * K);
      expected.weights.fill(0, 3 * K, 6 * K);
      for (const [label, got] of [['cpu', padded.cpu], ['cuda', padded.cuda], ['cuda, few rows', padFew]] as const) {
        expect(Array.from(i32(got.ids!)), `padded route ids (${label})`).toEqual(Array.from(expected.ids));
        if (label !== 'cpu') expect(sameBits(got.weights!, new Uint8Array(expected.weights.buffer)), `padded route weights (${label})`).toBe(true);
      }
      expect(Array.from(f32(padded.cpu.weights!).subarray(3 * K, 6 * K)), 'padded rows weights (cpu)').toEqual(new Array(3 * K).fill(0));
      results.push(`${`moe_route ${o.label} padded rows`.padEnd(84)} routed to no expert, the rest bit-identical`);
    });
  }
  it('std.moe_route and std.moe_route_few: padded positions past the first 32 (40 rows of 1 a position, 70 of 2)', () => {
    // The few-row kernels hold the first 32 positions' padding in a mask and read later ones from
    // the table: a decode-shaped step padded only past that line (the mask empty), a verify-shaped
    // one on each side of it.
    const o = routings[4]!; // softmax top-10 of 64
    for (const [rows, padK, padded] of [[40, 1, [35]], [70, 2, [0, 33]]] as const) {
      const padSlots = Int32Array.from({ length: Math.ceil(rows / padK) }, (_, i) => ((padded as readonly number[]).includes(i) ? -1 : i));
      const bufs = { logits: random.normals(rows * o.E, 2), padSlots, ids: poisonI32(rows * o.topK), weights: poisonF32(rows * o.topK) };
      const label = `moe_route ${o.label}, ${rows} rows of ${padK} a position, padded positions ${padded.join(', ')}`;
      const r = onBoth(bufs, (gpu, p) =>
        gpu.launch(routeKernel, rowLaunch(rows, o.E, gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p, padK) }), ['ids', 'weights']);
      const few = runKernelOn(cudaGpu!, bufs, (gpu, p) =>
        gpu.launch(routeFewKernel, routeFewLaunch(gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p, padK) }), ['ids', 'weights']);
      compareI32(`${label} ids`, r.cpu.ids!, r.cuda.ids!);
      expect(Array.from(i32(few.ids!)), `${label}: route_few ids`).toEqual(Array.from(i32(r.cuda.ids!)));
      expect(sameBits(few.weights!, r.cuda.weights!), `${label}: route_few weights, bits of std.moe_route`).toBe(true);
      for (const pos of padded) {
        const at = pos * padK * o.topK, end = (pos + 1) * padK * o.topK;
        expect(Array.from(i32(few.ids!).subarray(at, end)), `${label}: position ${pos}'s ids`).toEqual(new Array(end - at).fill(-1));
        expect(Array.from(f32(few.weights!).subarray(at, end)), `${label}: position ${pos}'s weights`).toEqual(new Array(end - at).fill(0));
      }
      results.push(`${label.padEnd(84)} routed to no expert in both forms`);
    }
  });

  it('std.moe_route: softmax top-40 of 64 (more slots than a warp has lanes: picked one at a time), a tied row', () => {
    const o = { label: 'softmax top-40 of 64', E: 64, topK: 40, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1, bias: false };
    const rows = 3;
    const logits = random.normals(rows * o.E, 2);
    logits.fill(0.25, o.E, 2 * o.E);
    const bufs = { logits, bias: random.normals(o.E, 0.1), ids: poisonI32(rows * o.topK), weights: poisonF32(rows * o.topK) };
    const r = onBoth(bufs, (gpu, p) =>
      gpu.launch(routeKernel, rowLaunch(rows, o.E, gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p) }), ['ids', 'weights']);
    compareI32(`moe_route ${o.label} ids`, r.cpu.ids!, r.cuda.ids!);
    const rel = relErr(f32(r.cuda.weights!), f32(r.cpu.weights!));
    results.push(`${`moe_route ${o.label} weights`.padEnd(84)} rel ${rel.toExponential(2)}`);
    expect(rel).toBeLessThanOrEqual(1e-6);
  });

  // The fused router of few rows: the GEMV's logits against the twin's (f32 sums against f64), and
  // the ids and weights of its last CTA bit-identical to std.moe_route's over those same logits,
  // whose ids the twin gives (the route tests above). Launched twice: the last CTA resets the
  // counter, so the second launch (as a graph replay) routes again. Rows 1 and 3 are the first
  // rows of the 8-row case: a row's logits do not depend on the other rows.
  const gemvCases = [
    { ...routings[0]!, label: 'softmax top-10 of 512, norm_topk_prob, hidden 2048', D: 2048 },
    { ...routings[1]!, label: 'softmax top-8 of 64, no norm, hidden 100 (the scalar path)', E: 64, topK: 8, D: 100 },
    { ...routings[2]!, label: 'sigmoid + bias, 8 groups keep 4, top-8 of 64, scaling 2.5, hidden 512', E: 64, D: 512 },
    { ...routings[2]!, label: 'sigmoid + bias, 8 groups keep 4, top-10 of 512, scaling 2.5, hidden 2048', E: 512, topK: 10, D: 2048 },
    { ...routings[0]!, label: 'softmax top-10 of 64, norm_topk_prob, hidden 2048 (a CTA an expert)', E: 64, D: 2048 },
    { ...routings[5]!, label: 'sigmoid + bias, no groups, top-8 of 256, scaling 2.5, hidden 2048 (two experts a CTA)', D: 2048 },
  ];
  for (const o of gemvCases) {
    for (const dtype of ROW_TYPES) {
      it(`${dtype}: std.moe_router_gemv (router GEMV + route in its last CTA): ${o.label}, rows 1, 3, 8`, () => {
        const { E, D, topK } = o;
        const x8 = random.normals(8 * D, 1);
        const w = typed(E * D, dtype, 2 / Math.sqrt(D));
        const bias = random.normals(E, 0.1);
        let logits8: Uint8Array | undefined;
        for (const rows of [8, 3, 1]) {
          const label = `${dtype} moe_router_gemv ${o.label} rows ${rows}`;
          const bufs = {
            x: encodeRows(x8.subarray(0, rows * D), dtype), w, logits: poisonF32(rows * E), counter: new Uint32Array(1), bias,
            ids: poisonI32(rows * topK), weights: poisonF32(rows * topK),
          };
          const r = onBoth(bufs, (gpu, p) => {
            for (let i = 0; i < 2; i++) {
              gpu.launch(routerGemvKernel, routerGemvLaunch(E, gpu.defaultStream), {
                x: p.x!, w: p.w!, logits: p.logits!, counter: p.counter!, ...routeArgs(o, rows, p), hidden: D, dtype: FLOAT_DTYPE_CODE[dtype], ...NO_ROUTE_TAIL,
              });
            }
          }, ['logits', 'ids', 'weights', 'counter']);
          compare(`${label} logits`, 'f32', r.cpu.logits!, r.cuda.logits!);
          expect(Array.from(i32(r.cuda.counter!)), 'the counter is back at zero').toEqual([0]);
          if (logits8) {
            const alone = sameBits(r.cuda.logits!, logits8.subarray(0, 4 * rows * E));
            expect(alone, `${label}: logits bit-identical to the same rows of 8`).toBe(true);
          } else logits8 = r.cuda.logits!;
          // The route over CUDA's own logits: std.moe_route on CUDA (bits) and the twin (ids).
          const ref = onBoth({ logits: r.cuda.logits!, bias, ids: poisonI32(rows * topK), weights: poisonF32(rows * topK) }, (gpu, p) =>
            gpu.launch(routeKernel, rowLaunch(rows, E, gpu.defaultStream), { logits: p.logits!, ...routeArgs(o, rows, p) }), ['ids', 'weights']);
          compareI32(`${label} ids vs the twin over its logits`, ref.cpu.ids!, r.cuda.ids!);
          const rel = relErr(f32(r.cuda.weights!), f32(ref.cpu.weights!));
          const same = sameBits(r.cuda.ids!, ref.cuda.ids!) && sameBits(r.cuda.weights!, ref.cuda.weights!);
          results.push(`${`${label} weights`.padEnd(84)} rel ${rel.toExponential(2)} vs the twin, ${same ? 'bit-identical to' : 'DIFFER from'} std.moe_route`);
          expect(rel).toBeLessThanOrEqual(1e-6);
          expect(Array.from(i32(r.cuda.ids!)), `${label}: ids of std.moe_route`).toEqual(Array.from(i32(ref.cuda.ids!)));
          expect(sameBits(r.cuda.weights!, ref.cuda.weights!), `${label}: weights, bits of std.moe_route`).toBe(true);
        }
      });
    }
  }

  // The router GEMV's tail (what the layer takes instead of launching std.moe_shared_slots and
  // std.moe_group after it in few-row steps): the slots and the groups buffer bit for bit those of
  // the two kernels over the same route, and the twin's; the shared expert gated and not, 64 and 512
  // routed experts plus the shared one (the 80B's), groups alone (GLM-5's routing), 1, 3 and 8 rows.
  const tailCases = [
    { ...routings[4]!, label: 'softmax top-10 of 64 + a gated shared expert', D: 2048, shared: 'gated' },
    { ...routings[0]!, label: 'softmax top-10 of 512 + an ungated shared expert', D: 2048, shared: 'ungated' },
    { ...routings[5]!, label: 'sigmoid + bias top-8 of 256, groups only', D: 512, shared: 'none' },
  ] as const;
  for (const o of tailCases) {
    it(`bf16: std.moe_router_gemv's tail (shared-expert slots, groups): ${o.label}, rows 1, 3, 8, as std.moe_shared_slots + std.moe_group`, () => {
      const { E, D, topK } = o;
      const withShared = o.shared !== 'none';
      const held = withShared ? E + 1 : E;
      const slots = withShared ? topK + 1 : topK;
      const dtype = 'bf16';
      for (const rows of [1, 3, 8]) {
        const label = `moe_router_gemv tail ${o.label} rows ${rows}`;
        const bufs = {
          x: typed(rows * D, dtype), w: typed(E * D, dtype, 2 / Math.sqrt(D)), bias: random.normals(E, 0.1), gate: random.normals(D, 1 / Math.sqrt(D)),
          logits: poisonF32(rows * E), counter: new Uint32Array(1), ids: poisonI32(rows * topK), weights: poisonF32(rows * topK),
          slotIds: poisonI32(rows * slots), slotWeights: poisonF32(rows * slots), groups: poisonI32(moeGroupsLength(rows, slots, held)),
          refSlotIds: poisonI32(rows * slots), refSlotWeights: poisonF32(rows * slots), refGroups: poisonI32(moeGroupsLength(rows, slots, held)),
          lastSlotIds: poisonI32(rows * slots), lastSlotWeights: poisonF32(rows * slots),
          // At 8 rows a bucket's padding: positions 2, 4 and 5 (slot −1) routed to no expert.
          ...(rows === 8 ? { padSlots: Int32Array.of(0, 1, -1, 3, -1, -1, 6, 7) } : {}),
        };
        const r = onBoth(bufs, (gpu, p) => {
          const s = gpu.defaultStream;
          const gate = o.shared === 'gated' ? p.gate! : 0n;
          const common = { x: p.x!, w: p.w!, logits: p.logits!, counter: p.counter!, ...routeArgs(o, rows, p), hidden: D, dtype: FLOAT_DTYPE_CODE[dtype] };
          // A gated shared expert as the layer launches it: one CTA more makes the slot weights.
          gpu.launch(routerGemvKernel, routerGemvLaunch(E, s, o.shared === 'gated'), {
            ...common, sharedGate: gate, slotIds: p.slotIds!, slotWeights: p.slotWeights!, sharedId: withShared ? E : -1, groups: p.groups!, groupExperts: held,
          });
          // Without that CTA the last one makes them after the route.
          if (withShared) {
            gpu.launch(routerGemvKernel, routerGemvLaunch(E, s), {
              ...common, sharedGate: gate, slotIds: p.lastSlotIds!, slotWeights: p.lastSlotWeights!, sharedId: E, groups: 0n, groupExperts: held,
            });
          }
          // The same route again, then the two kernels the tail replaces.
          gpu.launch(routerGemvKernel, routerGemvLaunch(E, s), { ...common, ...NO_ROUTE_TAIL });
          if (withShared) {
            gpu.launch(sharedSlotsKernel, sharedSlotsLaunch(rows, s), {
              x: p.x!, gate, ids: p.ids!, weights: p.weights!, slotIds: p.refSlotIds!, slotWeights: p.refSlotWeights!, rows, hidden: D, topK, sharedId: E, dtype: FLOAT_DTYPE_CODE[dtype],
              ...padArgs(p),
            });
          }
          gpu.launch(groupKernel, groupLaunch(rows, slots, s), { ids: withShared ? p.refSlotIds! : p.ids!, groups: p.refGroups!, rows, experts: held, topK: slots });
        }, ['slotIds', 'slotWeights', 'groups', 'refSlotIds', 'refSlotWeights', 'refGroups', 'lastSlotIds', 'lastSlotWeights', 'ids']);
        const length = moeGroupsLength(rows, slots, held);
        expect(Array.from(i32(r.cuda.groups!)).slice(0, length), `${label}: groups as std.moe_group's`).toEqual(Array.from(i32(r.cuda.refGroups!)).slice(0, length));
        compareI32(`${label} groups vs the twin`, r.cpu.groups!, r.cuda.groups!);
        if (withShared) {
          expect(sameBits(r.cuda.slotIds!, r.cuda.refSlotIds!), `${label}: slot ids as std.moe_shared_slots'`).toBe(true);
          expect(sameBits(r.cuda.slotWeights!, r.cuda.refSlotWeights!), `${label}: slot weights, bits of std.moe_shared_slots`).toBe(true);
          expect(sameBits(r.cuda.lastSlotIds!, r.cuda.refSlotIds!), `${label}: slot ids made by the last CTA`).toBe(true);
          expect(sameBits(r.cuda.lastSlotWeights!, r.cuda.refSlotWeights!), `${label}: slot weights made by the last CTA`).toBe(true);
          compareI32(`${label} slot ids vs the twin`, r.cpu.slotIds!, r.cuda.slotIds!);
        }
        if (rows === 8) {
          const ids = i32(withShared ? r.cuda.slotIds! : r.cuda.ids!);
          for (const pos of [2, 4, 5]) expect(Array.from(ids.subarray(pos * slots, (pos + 1) * slots)), `${label}: padded row ${pos}`).toEqual(new Array(slots).fill(-1));
          expect(i32(r.cuda.groups!)[1], `${label}: the padded rows' entries outside the experts`).toBe(3 * slots);
        }
        results.push(`${label.padEnd(84)} slots and groups bit-identical to the kernels'`);
      }
    });
  }

  // The shared expert as the last slot of each row: the route's slots copied, its weight
  // sigmoid(x · gate) (f32 sums) or 1; rows 1, 5 and 64 (a row's slots the same in each), hidden
  // 2 048 (Qwen3-Next) and 30 (not a multiple of the CTA).
  for (const dtype of ROW_TYPES) {
    it(`${dtype}: std.moe_shared_slots, gated and ungated, hidden 2048 and 30, each row's slots alone and batched`, () => {
      const topK = 10, sharedId = 64;
      for (const D of [2048, 30]) {
        const x64 = random.normals(64 * D);
        const gate = random.normals(D, 1 / Math.sqrt(D));
        const ids64 = Int32Array.from({ length: 64 * topK }, () => random.int(0, sharedId - 1));
        const weights64 = Float32Array.from({ length: 64 * topK }, () => random.float());
        let batched: { ids: Uint8Array; weights: Uint8Array } | undefined;
        for (const rows of [64, 5, 1]) {
          for (const gated of [true, false]) {
            const bufs = {
              x: encodeRows(x64.subarray(0, rows * D), dtype), gate, ids: ids64.slice(0, rows * topK), weights: weights64.slice(0, rows * topK),
              slotIds: poisonI32(rows * (topK + 1)), slotWeights: poisonF32(rows * (topK + 1)),
            };
            const r = onBoth(bufs, (gpu, p) =>
              gpu.launch(sharedSlotsKernel, sharedSlotsLaunch(rows, gpu.defaultStream), {
                x: p.x!, gate: gated ? p.gate! : 0n, ids: p.ids!, weights: p.weights!, slotIds: p.slotIds!, slotWeights: p.slotWeights!, rows, hidden: D, topK, sharedId,
                dtype: FLOAT_DTYPE_CODE[dtype], padSlots: 0n, padK: 0,
              }), ['slotIds', 'slotWeights']);
            const label = `${dtype} moe_shared_slots D=${D} rows=${rows} ${gated ? 'gated' : 'ungated'}`;
            compareI32(`${label} ids`, r.cpu.slotIds!, r.cuda.slotIds!);
            const rel = relErr(f32(r.cuda.slotWeights!), f32(r.cpu.slotWeights!));
            results.push(`${`${label} weights`.padEnd(84)} rel ${rel.toExponential(2)}`);
            expect(rel).toBeLessThanOrEqual(1e-6);
            if (!gated) {
              expect(Array.from(f32(r.cuda.slotWeights!)).filter((_, i) => i % (topK + 1) === topK).every((v) => v === 1), `${label}: weight 1`).toBe(true);
              continue;
            }
            if (!batched) batched = { ids: r.cuda.slotIds!, weights: r.cuda.slotWeights! };
            else {
              expect(sameBits(r.cuda.slotIds!, batched.ids.subarray(0, 4 * rows * (topK + 1))), `${label}: ids as batched`).toBe(true);
              expect(sameBits(r.cuda.slotWeights!, batched.weights.subarray(0, 4 * rows * (topK + 1))), `${label}: weights as batched`).toBe(true);
            }
          }
        }
      }
    });
  }

  it('std.moe_localize: an expert-parallel rank\'s entries get local ids, the others the zero expert and weight 0', () => {
    const entries = 1000, experts = 512;
    const ids = Int32Array.from({ length: entries }, () => random.int(0, experts - 1));
    for (const [first, count] of [[0, 128], [256, 128], [384, 128]] as const) {
      const r = onBoth({ ids, weights: random.normals(entries) }, (gpu, p) =>
        gpu.launch(localizeKernel, flatLaunch(entries, gpu.defaultStream), { ids: p.ids!, weights: p.weights!, entries, first, count }), ['ids', 'weights']);
      compareI32(`moe_localize experts [${first}, ${first + count}) ids`, r.cpu.ids!, r.cuda.ids!);
      expect(Array.from(f32(r.cuda.weights!)), 'weights').toEqual(Array.from(f32(r.cpu.weights!)));
    }
  });

  /** The kernels, row type and codes of an expert format. */
  const formatOf = (format: ExpertFormat) => {
    const dtype = rowTypeOf(format);
    const fp8 = format.startsWith('fp8');
    return { k: EXPERT_KERNELS[format], dtype, fp8, codes: { wDtype: WEIGHT_DTYPE_CODE[fp8 ? 'f8e4m3' : dtype], rowDtype: FLOAT_DTYPE_CODE[dtype] } };
  };
  /** group → up → down → weighted sum, the grouped path the layer launches. */
  /** `tensorCores`: the GEMM pair the layer takes for `rows` (true), or the one given. */
  const groupedExperts = (gpu: GpuBackend, p: Ptrs, format: ExpertFormat, rows: number, D: number, I: number, E: number, topK: number, tensorCores: boolean | ExpertGemm = false): void => {
    const s = gpu.defaultStream;
    const { k, fp8, codes } = formatOf(format);
    const gemm = tensorCores === true ? expertsGemm(k, rows) : tensorCores || undefined;
    const up = gemm ? gemm.up : k.up;
    const down = gemm ? gemm.down : k.down;
    gpu.launch(groupKernel, groupLaunch(rows, topK, s), { ids: p.ids!, groups: p.groups!, rows, experts: E, topK });
    gpu.launch(up, gemm ? expertsGemmLaunch(gemm, 'up', rows, topK, I, E, gpu.device.computeCapability, s) : expertsUpLaunch(rows, topK, I, E, s), {
      input: p.x!, ids: p.ids!, groups: p.groups!, gateUp: p.gateUp!, gateUpScales: fp8 ? p.gateUpScales! : 0n, h: p.h!, rows, hidden: D, inter: I, experts: E, topK, ...codes,
    });
    gpu.launch(down, gemm ? expertsGemmLaunch(gemm, 'down', rows, topK, D, E, gpu.device.computeCapability, s) : expertsDownLaunch(rows, topK, D, E, s), {
      h: p.h!, ids: p.ids!, groups: p.groups!, down: p.down!, downScales: fp8 ? p.downScales! : 0n, y: p.y!, rows, hidden: D, inter: I, experts: E, topK, ...codes,
    });
    gpu.launch(expertsKernel, expertsLaunch(rows, D, s), { y: p.y!, ids: p.ids!, weights: p.weights!, output: p.out!, rows, hidden: D, experts: E, topK, dtype: codes.rowDtype });
  };
  /** The row-wise path: up per (row, slot), then down and the weighted sum per row. */
  const rowwiseExperts = (gpu: GpuBackend, p: Ptrs, format: ExpertFormat, rows: number, D: number, I: number, E: number, topK: number): void => {
    const s = gpu.defaultStream;
    const { k, fp8, codes } = formatOf(format);
    gpu.launch(k.upRowwise, expertsUpRowwiseLaunch(rows, topK, I, s), {
      input: p.x!, ids: p.ids!, gateUp: p.gateUp!, gateUpScales: fp8 ? p.gateUpScales! : 0n, h: p.h!, rows, hidden: D, inter: I, experts: E, topK, ...codes,
    });
    gpu.launch(k.rowwise, expertsRowwiseLaunch(rows, D, s), {
      h: p.h!, ids: p.ids!, weights: p.weights!, down: p.down!, downScales: fp8 ? p.downScales! : 0n, output: p.out!, rows, hidden: D, inter: I, experts: E, topK, ...codes,
    });
  };
  /** Buffers of an expert pass; `weights` reuses another pass's experts (drawing 8 × 3 × 512 × 2048 values is most of a case). */
  const expertBufs = (format: ExpertFormat, rows: number, D: number, I: number, E: number, topK: number, ids: Int32Array, weights?: Bufs): Bufs => {
    const dtype = rowTypeOf(format);
    const w = weights ? { gateUp: weights.gateUp!, gateUpScales: weights.gateUpScales!, down: weights.down!, downScales: weights.downScales! } : expertSet(format, E, D, I, random);
    return {
      x: typed(rows * D, dtype), ids, weights: Float32Array.from({ length: rows * topK }, () => 0.05 + random.float()),
      gateUp: w.gateUp, gateUpScales: w.gateUpScales, down: w.down, downScales: w.downScales,
      groups: poisonI32(moeGroupsLength(rows, topK, E)), h: poison(rows * topK * I, dtype), y: poison(rows * topK * D, dtype), out: poison(rows * D, dtype),
    };
  };

  /** topK distinct random experts per row; one id below the experts (one row: its last slot) and, past 3 rows, one past them. */
  const routedIds = (rows: number, topK: number, E: number): Int32Array => {
    const ids = new Int32Array(rows * topK);
    for (let r = 0; r < rows; r++) {
      const perm = Array.from({ length: E }, (_, e) => e).sort(() => random.float() - 0.5);
      for (let j = 0; j < topK; j++) ids[r * topK + j] = perm[j]!;
    }
    ids[rows > 1 ? topK + 1 : topK - 1] = -1;
    if (rows > 3) ids[3 * topK] = E;
    return ids;
  };

  // std.moe_group alone at a prefill's size: 4 096 rows of top-10 over 64, 512 and 2 048 experts (its
  // warps take 32, 16 and 4 segments of the entries), ids outside the experts scattered through.
  for (const E of [64, 512, 2048]) {
    it(`std.moe_group: 4 096 rows, top-10 of ${E} experts, ids outside the experts: the twin's buffer exactly`, () => {
      const rows = 4096, topK = 10;
      const ids = new Int32Array(rows * topK);
      for (let r = 0; r < rows; r++) {
        const taken = new Set<number>();
        for (let j = 0; j < topK; j++) {
          let e: number;
          do e = Math.floor(random.float() * E); while (taken.has(e));
          taken.add(e);
          ids[r * topK + j] = e;
        }
      }
      for (let i = 7; i < ids.length; i += 997) ids[i] = i % 2 ? -3 : E + 5;
      const r = onBoth({ ids, groups: poisonI32(moeGroupsLength(rows, topK, E)) }, (gpu, p) =>
        gpu.launch(groupKernel, groupLaunch(rows, topK, gpu.defaultStream), { ids: p.ids!, groups: p.groups!, rows, experts: E, topK }), ['groups']);
      compareI32(`moe_group ${rows} rows top-${topK} of ${E}`, r.cpu.groups!, r.cuda.groups!);
    });
  }

  // Shapes: 3 rows at the 80B expert shape; one row at Qwen3-Next's top-10 (the row-wise kernels'
  // one-row path: two warps a value in the down pass, each 4 experts at a time over its 5 slots),
  // and one tiny
  // unaligned (scalar paths); 40 rows over 8 experts (~30 entries per expert: two passes of 16
  // through each weight tile); D and I past 128 but not multiples of it (FP8 blocks cut short on
  // both axes).
  const SHAPES = [[2048, 512, 8, 6, 3], [2048, 512, 16, 10, 1], [30, 7, 5, 2, 4], [30, 7, 5, 3, 1], [2048, 512, 8, 6, 40], [1000, 136, 6, 4, 24]] as const;
  for (const format of EXPERT_FORMATS) {
    for (const [D, I, E, topK, rows] of SHAPES) {
      it(`${format}: std.moe_group + std.moe_experts_up + std.moe_experts_down + std.moe_experts, D ${D}, I ${I}, ${E} experts, top-${topK}, ${rows} rows (an id outside the experts), and the row-wise kernels' bits`, () => {
        const { dtype } = formatOf(format);
        const ids = routedIds(rows, topK, E);
        const bufs = expertBufs(format, rows, D, I, E, topK, ids);
        const label = `${format} D=${D} I=${I} E=${E} k=${topK} rows=${rows}`;
        const r = onBoth(bufs, (gpu, p) => groupedExperts(gpu, p, format, rows, D, I, E, topK), ['groups', 'h', 'y', 'out']);
        compareI32(`moe_group ${label}`, r.cpu.groups!, r.cuda.groups!);
        compare(`moe_experts_up ${label}`, dtype, r.cpu.h!, r.cuda.h!);
        compare(`moe_experts_down ${label}`, dtype, r.cpu.y!, r.cuda.y!);
        compare(`moe_experts ${label}`, dtype, r.cpu.out!, r.cuda.out!);
        // The row-wise kernels (each row re-reads its experts) on CUDA: the grouped ones give the same bits.
        const rw = runKernelOn(cudaGpu!, bufs, (gpu, p) => rowwiseExperts(gpu, p, format, rows, D, I, E, topK), ['h', 'out']);
        results.push(`${`moe grouped ≡ row-wise ${label}`.padEnd(84)} h ${sameBits(rw.h!, r.cuda.h!) ? 'bit-identical' : 'DIFFERS'}, out ${sameBits(rw.out!, r.cuda.out!) ? 'bit-identical' : 'DIFFERS'}`);
        expect(sameBits(rw.h!, r.cuda.h!), 'h: grouped vs row-wise bits').toBe(true);
        expect(sameBits(rw.out!, r.cuda.out!), 'out: grouped vs row-wise bits').toBe(true);
      });
    }

    // The CUDA-core grouped kernels (f32 rows, widths off 16) and the tensor-core GEMMs (every step of bf16 / f16 rows).
    for (const tensorCores of format === 'f32' ? [false] : [false, true]) it(`${format}: batch invariance: route + ${tensorCores ? 'tensor-core' : 'grouped'} experts give each of 48 rows sharing 8 experts exactly its result alone`, () => {
      const [D, I, E, topK, rows] = [2048, 512, 8, 4, 48];
      const { dtype } = formatOf(format);
      const bytes = floatBytes(dtype);
      const gpu = cudaGpu!;
      const logits = random.normals(rows * E, 2);
      logits.set(logits.subarray(0, E), 5 * E); // two rows routed alike
      const x = random.normals(rows * D);
      const p: Ptrs = {};
      for (const [name, data] of Object.entries(expertBufs(format, rows, D, I, E, topK, new Int32Array(rows * topK)))) {
        p[name] = gpu.alloc(Math.max(4, data.byteLength));
        gpu.upload(p[name]!, data);
      }
      p.logits = gpu.alloc(logits.byteLength);
      const step = (n: number, xs: Float32Array, ls: Float32Array): { ids: Int32Array; out: Uint8Array; h: Uint8Array } => {
        gpu.upload(p.x!, encodeRows(xs, dtype));
        gpu.upload(p.logits!, ls);
        gpu.launch(routeKernel, rowLaunch(n, E, gpu.defaultStream), {
          logits: p.logits!, bias: 0n, ids: p.ids!, weights: p.weights!, rows: n, experts: E, topK, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1,
          padSlots: 0n, padK: 0,
        });
        groupedExperts(gpu, p, format, n, D, I, E, topK, tensorCores);
        gpu.synchronize();
        return { ids: i32(gpu.download(p.ids!, 4 * n * topK)).slice(), out: gpu.download(p.out!, bytes * n * D), h: gpu.download(p.h!, bytes * n * topK * I) };
      };
      try {
        const all = step(rows, x, logits);
        const shared = new Set(Array.from(all.ids)).size;
        let same = 0;
        for (let r = 0; r < rows; r++) {
          const one = step(1, x.slice(r * D, (r + 1) * D), logits.slice(r * E, (r + 1) * E));
          expect(Array.from(one.ids), `row ${r} ids`).toEqual(Array.from(all.ids.subarray(r * topK, (r + 1) * topK)));
          const rowOut = all.out.subarray(bytes * r * D, bytes * (r + 1) * D);
          const rowH = all.h.subarray(bytes * r * topK * I, bytes * (r + 1) * topK * I);
          if (sameBits(one.out, rowOut) && sameBits(one.h, rowH)) same++;
        }
        results.push(`${`${format}${tensorCores ? ' gemm' : ''} batch invariance: ${rows} rows over ${shared} experts, top-${topK}, vs each row alone`.padEnd(84)} ${same}/${rows} bit-identical`);
        expect(same).toBe(rows);
      } finally {
        for (const ptr of Object.values(p)) gpu.free(ptr);
      }
    });
  }

  // The tensor-core expert GEMMs (every step of bf16 / f16 rows): the 80B expert widths with 80 entries per expert
  // (tiles cut short), 300 entries per expert (several tiles each), widths not multiples of 64 or
  // 128 (output columns, 32-wide k steps and FP8 blocks cut short), a few rows; each against the CPU
  // twin (kept small: the twin is most of the time), each row's bits alone and batched, and the
  // few-row pair's bits against the large pair's (64 rows: the most the layer gives the few-row pair).
  const GEMM_SHAPES = [[2048, 512, 4, 2, 160], [512, 256, 2, 2, 300], [1040, 272, 12, 4, 120], [2048, 512, 8, 6, 3], [512, 256, 6, 3, 64]] as const;
  for (const format of EXPERT_FORMATS.filter((f) => f !== 'f32')) {
    for (const [D, I, E, topK, rows] of GEMM_SHAPES) {
      it(`${format}: std.moe_gemm_up + std.moe_gemm_down (tensor cores), D ${D}, I ${I}, ${E} experts, top-${topK}, ${rows} rows (ids outside the experts)`, () => {
        const { dtype } = formatOf(format);
        const ids = routedIds(rows, topK, E);
        const bufs = expertBufs(format, rows, D, I, E, topK, ids);
        const label = `${format} D=${D} I=${I} E=${E} k=${topK} rows=${rows}`;
        const r = onBoth(bufs, (gpu, p) => groupedExperts(gpu, p, format, rows, D, I, E, topK, true), ['h', 'y', 'out']);
        compare(`moe_gemm_up ${label}`, dtype, r.cpu.h!, r.cuda.h!);
        compare(`moe_gemm_down ${label}`, dtype, r.cpu.y!, r.cuda.y!);
        compare(`moe_experts after the gemms ${label}`, dtype, r.cpu.out!, r.cuda.out!);
        // Each row alone (as a decode step runs it) gives the bits it gets in the batch (no split of k, its order fixed).
        const bytes = floatBytes(dtype);
        const weights = bufs.weights as Float32Array;
        for (const row of [0, 1, rows - 1]) {
          const one = expertBufs(format, 1, D, I, E, topK, ids.slice(row * topK, (row + 1) * topK), bufs);
          const xs = new Uint8Array(bufs.x!.buffer, bufs.x!.byteOffset + bytes * row * D, bytes * D);
          const alone = runKernelOn(cudaGpu!, { ...one, x: xs, weights: weights.slice(row * topK, (row + 1) * topK) }, (gpu, p) => groupedExperts(gpu, p, format, 1, D, I, E, topK, true), ['h', 'y', 'out']);
          expect(sameBits(alone.h!, r.cuda.h!.subarray(bytes * row * topK * I, bytes * (row + 1) * topK * I)), `row ${row}: h alone vs batched`).toBe(true);
          expect(sameBits(alone.y!, r.cuda.y!.subarray(bytes * row * topK * D, bytes * (row + 1) * topK * D)), `row ${row}: y alone vs batched`).toBe(true);
          expect(sameBits(alone.out!, r.cuda.out!.subarray(bytes * row * D, bytes * (row + 1) * D)), `row ${row}: out alone vs batched`).toBe(true);
        }
        results.push(`${`moe gemm rows alone ≡ batched ${label}`.padEnd(84)} h, y, out bit-identical`);
        // The other pair on the whole batch (the few-row one past FEW_GEMM_ROWS, the large one below): the same bits.
        const few = formatOf(format).k.gemm!.few;
        if (few) {
          const other = expertsGemm(formatOf(format).k, rows) === few ? formatOf(format).k.gemm! : few;
          const o = runKernelOn(cudaGpu!, bufs, (gpu, p) => groupedExperts(gpu, p, format, rows, D, I, E, topK, other), ['h', 'y', 'out']);
          expect(sameBits(o.h!, r.cuda.h!), 'h: the two GEMM pairs differ').toBe(true);
          expect(sameBits(o.y!, r.cuda.y!), 'y: the two GEMM pairs differ').toBe(true);
          results.push(`${`moe gemm few-row pair ≡ large pair ${label}`.padEnd(84)} h, y bit-identical`);
        }
      });
    }
  }

  for (const dtype of ROW_TYPES) {
    it(`${dtype}: std.moe_combine, gated (sigmoid) and ungated`, () => {
      for (const D of [2048, 30]) {
        const rows = 5;
        for (const gated of [true, false]) {
          const r = onBoth({ routed: typed(rows * D, dtype), shared: typed(rows * D, dtype), gate: random.normals(rows, 2), out: poison(rows * D, dtype) }, (gpu, p) =>
            gpu.launch(combineKernel, rowLaunch(rows, D, gpu.defaultStream), {
              routed: p.routed!, shared: p.shared!, gate: gated ? p.gate! : 0n, output: p.out!, rows, hidden: D, dtype: FLOAT_DTYPE_CODE[dtype],
            }), ['out']);
          compare(`${dtype} moe_combine D=${D} gated=${gated}`, dtype, r.cpu.out!, r.cuda.out!);
        }
      }
    });
  }

  // ---- std-attention -----------------------------------------------------------------------------------
  const shapes = [
    { label: 'Qwen3-Next-80B heads: 16 q / 2 kv, d 256, rotary 64, gated, norms 1 + w, pages of 16', H: 16, Hkv: 2, d: 256, rot: 64, gated: 1, norms: true, offset: 1, page: 16, hist: [45, 70, 20] },
    { label: '8 q / 8 kv, d 128, rotary 128, gated, norms w (x̂ rounded first), pages of 8', H: 8, Hkv: 8, d: 128, rot: 128, gated: 1, norms: true, offset: 0, round: 1, page: 8, hist: [33, 9, 17] },
    { label: '4 q / 1 kv, d 64, rotary 16, plain, no norms, pages of 4', H: 4, Hkv: 1, d: 64, rot: 16, gated: 0, norms: false, offset: 0, page: 4, hist: [13, 22, 5] },
    { label: '4 q / 2 kv, d 8, rotary 4, gated, norms 1 + w, pages of 4', H: 4, Hkv: 2, d: 8, rot: 4, gated: 1, norms: true, offset: 1, page: 4, hist: [10, 3, 18] },
    {
      label: 'Gemma 3n: 2 q / 1 kv, d 48, full rotary, norms w (rounded once), v_norm, window 7, scale 1, pages of 4', H: 2, Hkv: 1, d: 48, rot: 48, gated: 0, norms: true, offset: 0, round: 0,
      page: 4, hist: [13, 22, 5], window: 7, vNorm: 1, scale: 1,
    },
  ] as {
    label: string; H: number; Hkv: number; d: number; rot: number; gated: number; norms: boolean; offset: number; round?: number; page: number; hist: number[]; window?: number;
    vNorm?: number; scale?: number;
  }[];
  for (const dtype of ROW_TYPES) {
    for (const o of shapes) {
      it(`${dtype}: std.attn_prep + std.attn_core over several pages: ${o.label}`, () => {
        const maxSeqLen = 96;
        const maxPages = Math.ceil(maxSeqLen / o.page);
        const seqs = o.hist.length;
        const pool = seqs * maxPages;
        const blockTable = shuffledPages(pool);
        const W = qkvWidth(o);
        const cacheElements = pool * o.page * o.Hkv * o.d;
        const rope = ropeTable(maxSeqLen, o.rot, 1e7);
        // Step 1: every sequence's history as one prefill; step 2: decode, verify (4 rows), a padding row, decode.
        const steps = [
          { slots: [0, 1, 2], counts: o.hist, starts: [0, 0, 0] },
          { slots: [0, 1, -1, 2], counts: [1, 4, 1, 1], starts: [o.hist[0]!, o.hist[1]!, 0, o.hist[2]!] },
        ];
        const bufs: Bufs = {
          blockTable, kCache: typed(cacheElements, dtype), vCache: typed(cacheElements, dtype), cos: rope.cos, sin: rope.sin,
          qNorm: random.normals(o.d, 0.3), kNorm: random.normals(o.d, 0.3),
        };
        steps.forEach((s, n) => {
          const { rowStarts, rows, positions } = stepRows(s.counts.map((count, i) => ({ start: s.starts[i]!, count })));
          Object.assign(bufs, {
            [`rowStarts${n}`]: rowStarts, [`slots${n}`]: Int32Array.from(s.slots), [`positions${n}`]: positions,
            [`qkv${n}`]: typed(rows * W, dtype, 1.5), [`q${n}`]: poison(rows * o.H * o.d, dtype), [`out${n}`]: poison(rows * o.H * o.d, dtype),
          });
        });
        const k = ATTENTION_KERNELS[dtype];
        const r = onBoth(bufs, (gpu, p) => {
          steps.forEach((s, n) => {
            const rows = s.counts.reduce((a, b) => a + b, 0);
            const common = {
              qkv: p[`qkv${n}`]!, kCache: p.kCache!, vCache: p.vCache!, blockTable: p.blockTable!, slots: p[`slots${n}`]!, rowStarts: p[`rowStarts${n}`]!,
              positions: p[`positions${n}`]!, batch: s.counts.length, heads: o.H, kvHeads: o.Hkv, headDim: o.d, pageSize: o.page, maxPages, gated: o.gated,
              dtype: FLOAT_DTYPE_CODE[dtype], ownKv: 1,
            };
            const stream = gpu.defaultStream;
            gpu.launch(k.prep, prepLaunch(rows, o.H, o.Hkv, o.d, true, stream), {
              ...common, q: p[`q${n}`]!, qNorm: o.norms ? p.qNorm! : 0n, kNorm: o.norms ? p.kNorm! : 0n, cos: p.cos!, sin: p.sin!,
              rotaryDim: o.rot, maxPositions: maxSeqLen, eps: 1e-6, normOffset: o.offset, roundNormalized: o.round ?? (o.offset === 0 ? 1 : 0), vNorm: o.vNorm ?? 0,
            });
            // Step 1 as the layer launches a prefill, step 2 as a decode (sequences this short are one chunk either way).
            const chunks = keyChunks(n === 0 ? 'prefill' : 'decode', maxSeqLen);
            expect(chunks).toBe(1);
            gpu.launch(k.core, coreLaunch(rows, o.Hkv, o.d, floatBytes(dtype), chunks, gpu.device.multiprocessors, stream), {
              ...common, q: p[`q${n}`]!, out: p[`out${n}`]!, scale: o.scale ?? 1 / Math.sqrt(o.d), window: o.window ?? 0, chunks, partials: 0n,
            });
          });
        }, ['q0', 'out0', 'q1', 'out1', 'kCache', 'vCache']);
        for (const name of ['q0', 'q1', 'kCache', 'vCache']) compare(`${dtype} attn_prep ${name} ${o.label}`, dtype, r.cpu[name]!, r.cuda[name]!);
        // Softmax over many keys in f32 against the twin's f64: a little more room than one f32 rounding.
        const core = dtype === 'f32' ? 2e-5 : STEP[dtype];
        compare(`${dtype} attn_core prefill ${o.label}`, dtype, r.cpu.out0!, r.cuda.out0!, core);
        compare(`${dtype} attn_core decode/verify/padding ${o.label}`, dtype, r.cpu.out1!, r.cuda.out1!, core);
        // The padding row (batch position 2 of step 2, row 5) is zeros on both.
        const pad = decodeRows(r.cuda.out1!, dtype).subarray(5 * o.H * o.d, 6 * o.H * o.d);
        expect(pad.every((v) => v === 0)).toBe(true);
      });
    }
  }

  // ---- std-attention split-KV: rows of several key chunks, records merged by std.attn_combine ------------
  // The cache is filled directly (no prefill): decode rows at 1 501 keys, a verify of 4 rows at ~700,
  // a padding row, rows at exactly 128 keys (one chunk) and 129 (two). Each row's cut depends on its
  // key count and `chunks` only: the layer's launch and one of a single split (a CTA takes every
  // chunk of its row) give the same bits. std.attn_core (CUDA cores) on every row type; std.attn_decode
  // (tensor cores, 16-bit rows, head dims multiples of 8) against its twin, which rounds P per tile of
  // 16 keys as its warps do: two steps of the output's type, as std.attn_prefill.
  const splitShapes = [
    { label: 'Qwen3-Next-80B heads: 16 q / 2 kv, d 256, gated, pages of 16', H: 16, Hkv: 2, d: 256, gated: 1, page: 16 },
    { label: 'Gemma 3n E4B sliding heads: 8 q / 2 kv, d 256, window 512, pages of 16', H: 8, Hkv: 2, d: 256, gated: 0, page: 16, window: 512 },
    { label: 'group of 16 (two passes of 8 heads): 32 q / 2 kv, d 128, pages of 8', H: 32, Hkv: 2, d: 128, gated: 0, page: 8 },
    { label: 'group of 12 (8 heads, then 4): 12 q / 1 kv, d 256, gated, pages of 16', H: 12, Hkv: 1, d: 256, gated: 1, page: 16 },
    { label: '6 q / 2 kv, d 20 (rows not whole 16-byte pieces in 16-bit types), pages of 4', H: 6, Hkv: 2, d: 20, gated: 1, page: 4 },
    { label: 'group of 20 (tensor cores: a pass of 16 heads, then 4): 40 q / 2 kv, d 64, gated, pages of 16', H: 40, Hkv: 2, d: 64, gated: 1, page: 16 },
    { label: '4 q / 1 kv, d 40 (template 64), window 300, pages of 8', H: 4, Hkv: 1, d: 40, gated: 0, page: 8, window: 300 },
  ] as { label: string; H: number; Hkv: number; d: number; gated: number; page: number; window?: number }[];
  const splitCases = ROW_TYPES.flatMap((dtype) => [
    ...splitShapes.map((o) => ({ dtype, o, kernel: 'core' as const })),
    ...(dtype === 'f32' ? [] : splitShapes.filter((o) => o.d % 8 === 0).map((o) => ({ dtype, o, kernel: 'decode' as const }))),
  ]);
  for (const { dtype, o, kernel } of splitCases) {
    it(`${dtype}: std.attn_${kernel} + std.attn_combine over key chunks, the same bits at any split: ${o.label}`, () => {
      const maxSeqLen = 2048;
      const maxPages = maxSeqLen / o.page;
      const chunks = keyChunks('decode', maxSeqLen);
      expect(chunks).toBe(16);
      const seqs = [
        { slot: 0, start: 1500, count: 1 },
        { slot: 1, start: 700, count: 4 },
        { slot: -1, start: 0, count: 1 },
        { slot: 2, start: 127, count: 1 },
        { slot: 3, start: 128, count: 1 },
      ];
      const { bufs: step, rows, rowStarts } = pagedStep(o, dtype, seqs, 4 * maxPages);
      const bufs: Bufs = {
        ...step, outOneSplit: poison(rows * o.H * o.d, dtype), outLayer: poison(rows * o.H * o.d, dtype),
        partials: new Float32Array(partialsBytes(rows, o.H, o.d, chunks) / 4),
      };
      const k = ATTENTION_KERNELS[dtype];
      const r = onBoth(bufs, (gpu, p) => {
        const stream = gpu.defaultStream;
        const args = (out: bigint) => ({
          qkv: p.qkv!, kCache: p.kCache!, vCache: p.vCache!, blockTable: p.blockTable!, slots: p.slots!, rowStarts: p.rowStarts!, positions: p.positions!,
          batch: seqs.length, heads: o.H, kvHeads: o.Hkv, headDim: o.d, pageSize: o.page, maxPages, gated: o.gated, dtype: FLOAT_DTYPE_CODE[dtype], ownKv: 1,
          q: p.q!, out, scale: 1 / Math.sqrt(o.d), window: o.window ?? 0, chunks, partials: p.partials!,
        });
        // Three splits (CTA z takes chunks z, z + 3, …) and one; the layer's count depends on the device.
        const tensorCores = kernel === 'decode';
        const launch = (tensorCores ? attnDecodeLaunch : coreLaunch)(rows, o.Hkv, o.d, floatBytes(dtype), chunks, gpu.device.multiprocessors, stream);
        for (const [out, grid] of [[p.out!, [rows, o.Hkv, 3]], [p.outOneSplit!, [rows, o.Hkv, 1]], [p.outLayer!, launch.grid]] as const) {
          gpu.launch(tensorCores ? k.decode! : k.core, { ...launch, grid }, args(out));
          gpu.launch(k.combine, combineLaunch(rows, o.H, stream), args(out));
        }
      }, ['out', 'outOneSplit', 'outLayer']);
      const tolerance = dtype === 'f32' ? 2e-5 : kernel === 'decode' ? 2 * STEP[dtype] : STEP[dtype];
      compare(`${dtype} attn_${kernel} split ${o.label}`, dtype, r.cpu.out!, r.cuda.out!, tolerance);
      expect(sameBits(r.cuda.outOneSplit!, r.cuda.out!), `${dtype} attn_${kernel}: one split and three differ`).toBe(true);
      expect(sameBits(r.cuda.outLayer!, r.cuda.out!), `${dtype} attn_${kernel}: the layer's splits and three differ`).toBe(true);
      const pad = decodeRows(r.cuda.out!, dtype).subarray(rowStarts[2]! * o.H * o.d, rowStarts[3]! * o.H * o.d);
      expect(pad.every((v) => v === 0)).toBe(true);
    });
  }

  // ---- std-attention-prefill: a prefill chunk on tensor cores against the same twin ---------------------
  // Sequences of several 64-row tiles, a chunk continuing a sequence whose earlier keys are in the
  // cache, a padding sequence and a one-row one; head dims at each template (32: d 16 and 24, 64,
  // 128, 256). P is rounded to the row type before P·V (flash-attention's rounding); the twin
  // (prefillCpu) rounds it per key tile too, but its sums and exponentials are f64: two steps of the
  // output's type.
  const prefillShapes = [
    { label: 'Qwen3-Next-80B heads: 16 q / 2 kv, d 256, gated, pages of 16', H: 16, Hkv: 2, d: 256, gated: 1, page: 16 },
    { label: '8 q / 8 kv, d 128, plain, pages of 8', H: 8, Hkv: 8, d: 128, gated: 0, page: 8 },
    { label: '4 q / 1 kv, d 64, gated, pages of 4', H: 4, Hkv: 1, d: 64, gated: 1, page: 4 },
    { label: '6 q / 2 kv, d 24, gated, pages of 8', H: 6, Hkv: 2, d: 24, gated: 1, page: 8 },
    { label: '4 q / 2 kv, d 16, gated, pages of 4', H: 4, Hkv: 2, d: 16, gated: 1, page: 4 },
    { label: 'Gemma 3n sliding: 2 q / 1 kv, d 48, plain, window 37, pages of 8', H: 2, Hkv: 1, d: 48, gated: 0, page: 8, window: 37 },
    { label: 'Gemma 3n E4B sliding heads: 8 q / 2 kv, d 256, plain, window 70, pages of 16', H: 8, Hkv: 2, d: 256, gated: 0, page: 16, window: 70 },
  ] as { label: string; H: number; Hkv: number; d: number; gated: number; page: number; window?: number }[];
  for (const dtype of ['bf16', 'f16'] as const) {
    for (const o of prefillShapes) {
      it(`${dtype}: std.attn_prefill (tensor cores) equals the twin over multi-tile chunks: ${o.label}`, () => {
        const maxSeqLen = 256;
        const maxPages = maxSeqLen / o.page;
        const seqs = [
          { slot: 0, start: 0, count: 150 },
          { slot: 1, start: 90, count: 70 },
          { slot: -1, start: 0, count: 5 },
          { slot: 2, start: 40, count: 1 },
        ];
        const { bufs, rows, rowStarts } = pagedStep(o, dtype, seqs, 3 * maxPages);
        const k = ATTENTION_KERNELS[dtype];
        const r = onBoth(bufs, (gpu, p) => {
          gpu.launch(k.prefill!, attnPrefillLaunch(rows, seqs.length, o.H, o.d, floatBytes(dtype), gpu.device.computeCapability, gpu.defaultStream), {
            qkv: p.qkv!, kCache: p.kCache!, vCache: p.vCache!, blockTable: p.blockTable!, slots: p.slots!, rowStarts: p.rowStarts!, positions: p.positions!,
            batch: seqs.length, heads: o.H, kvHeads: o.Hkv, headDim: o.d, pageSize: o.page, maxPages, gated: o.gated, dtype: FLOAT_DTYPE_CODE[dtype], ownKv: 1,
            q: p.q!, out: p.out!, scale: 1 / Math.sqrt(o.d), window: o.window ?? 0,
          });
        }, ['out']);
        compare(`${dtype} attn_prefill ${o.label}`, dtype, r.cpu.out!, r.cuda.out!, 2 * STEP[dtype]);
        const pad = decodeRows(r.cuda.out!, dtype).subarray(rowStarts[2]! * o.H * o.d, rowStarts[3]! * o.H * o.d);
        expect(pad.every((v) => v === 0)).toBe(true);
      });
    }
  }
});
