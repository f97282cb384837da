// Every CPU twin that reads or writes bf16 / f16 rows or FP8 weights, launched on the CPU backend
// over random data, against an independent float64 reference written here from the kernels'
// contract (KERNELS.md): inputs decoded from their stored type, f64 arithmetic, one rounding where
// the kernel stores (and RMSNorm's and the q/k norms' rounding of x̂ as Hugging Face does). The
// twins agree with the references to float64 noise (bound 1e-6, far below one bf16 or f16 step).
import { CpuBackend } from '@metrale/cpu-backend';
import { FLOAT_DTYPE_CODE, SeededRandom, floatBytes, roundTo, type FloatDtype, relativeL2Error } from '@metrale/core';
import { runKernelOn, type KernelBuffers as Bufs, type KernelPointers as Ptrs } from '@metrale/core/testing';
import {
  ATTENTION_KERNELS, EXPERT_FORMATS, EXPERT_KERNELS, keyChunks, keyChunksOf, partialsBytes, WEIGHT_DTYPE_CODE, addKernel, addRmsNormKernel, combineKernel, embedKernel, expertsKernel, expertsLaunch, expertsRowwiseLaunch,
  expertsUpRowwiseLaunch, flatLaunch, geluMulKernel, geluTanh, layerNormKernel, rmsNormKernel, ropeTable, rowLaunch, siluMulKernel, sparsityCutoff, type ExpertFormat,
} from '@metrale/layer-std';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expertSet, rowTypeOf } from './expert-weights.js';
import { decodeRows, encodeRows, sigmoid, silu } from './setup.js';

const random = new SeededRandom(77);
let cpu: CpuBackend;
beforeAll(() => void (cpu = new CpuBackend()));
afterAll(() => cpu.dispose());

const ROW_TYPES: readonly FloatDtype[] = ['bf16', 'f16'];
const BOUND = 1e-6;

/** Random f32 values stored as `dtype`, and the values stored. */
function stored(n: number, dtype: FloatDtype, scale = 1): { bytes: ArrayBufferView; values: Float32Array } {
  const v = random.normals(n, scale);
  const bytes = encodeRows(v, dtype);
  return { bytes, values: decodeRows(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength), dtype) };
}
const poison = (n: number, dtype: FloatDtype): ArrayBufferView => encodeRows(new Float32Array(n).fill(Number.NaN), dtype);
const run = (bufs: Bufs, launch: (p: Ptrs) => void, outputs: string[]) => runKernelOn(cpu, bufs, (_gpu, p) => launch(p), outputs);
const rounded = (dtype: FloatDtype, values: ArrayLike<number>): Float64Array => Float64Array.from(values, (v) => roundTo(dtype, v));

describe('CPU twins of the row kernels against float64 references, bf16 and f16', () => {
  for (const dtype of ROW_TYPES) {
    const code = FLOAT_DTYPE_CODE[dtype];
    it(`${dtype}: std.embed (tokens outside the table give zeros), scaled`, () => {
      const [V, D, rows] = [30, 24, 6];
      const table = stored(V * D, dtype);
      const tokens = Int32Array.from([3, 29, -1, 0, 30, 7]);
      const scale = roundTo(dtype, Math.sqrt(D));
      const out = run({ tokens, table: table.bytes, out: poison(rows * D, dtype) }, (p) =>
        cpu.launch(embedKernel, rowLaunch(rows, D, cpu.defaultStream), { tokens: p.tokens!, table: p.table!, out: p.out!, rows, hidden: D, vocab: V, scale, dtype: code }), ['out']);
      const want = rounded(dtype, Array.from({ length: rows * D }, (_, i) => {
        const t = tokens[Math.floor(i / D)]!;
        return t >= 0 && t < V ? Math.fround(scale * table.values[t * D + (i % D)]!) : 0;
      }));
      expect(relativeL2Error(decodeRows(out.out!, dtype), want)).toBeLessThan(BOUND);
    });

    // GlmMoeDsaRMSNorm: w · x̂.to(dtype); Qwen3NextRMSNorm: (x̂ · (1 + w)).to(dtype); Gemma3nRMSNorm: (x̂ · w).type_as(x).
    for (const [offset, roundNormalized, label] of [[0, 1, 'GLM'], [1, 0, 'Qwen3-Next'], [0, 0, 'Gemma 3n']] as const) {
      it(`${dtype}: std.rms_norm, offset ${offset}, roundNormalized ${roundNormalized} (${label}), and in place`, () => {
        const [D, rows] = [40, 5];
        const x = stored(rows * D, dtype, 3);
        const w = random.normals(D, 0.3).map((v) => roundTo(dtype, v + (offset ? 0 : 1)));
        const out = run({ x: x.bytes, y: poison(rows * D, dtype), w }, (p) => {
          const args = { weight: p.w!, rows, hidden: D, eps: 1e-6, offset, roundNormalized, dtype: code };
          cpu.launch(rmsNormKernel, rowLaunch(rows, D, cpu.defaultStream), { ...args, input: p.x!, output: p.y! });
          cpu.launch(rmsNormKernel, rowLaunch(rows, D, cpu.defaultStream), { ...args, input: p.x!, output: p.x! });
        }, ['y', 'x']);
        const want = new Float64Array(rows * D);
        for (let r = 0; r < rows; r++) {
          const row = x.values.subarray(r * D, (r + 1) * D);
          const inv = 1 / Math.sqrt(row.reduce((a, v) => a + v * v, 0) / D + 1e-6);
          row.forEach((v, i) => (want[r * D + i] = roundTo(dtype, (roundNormalized ? roundTo(dtype, v * inv) : v * inv) * (offset + w[i]!))));
        }
        expect(relativeL2Error(decodeRows(out.y!, dtype), want)).toBeLessThan(BOUND);
        expect(relativeL2Error(decodeRows(out.x!, dtype), want)).toBeLessThan(BOUND);
      });
    }

    it(`${dtype}: std.add_rms_norm is std.add then std.rms_norm, the sum apart or over its first addend`, () => {
      const [D, rows] = [40, 5];
      const a = stored(rows * D, dtype, 3);
      const b = stored(rows * D, dtype, 3);
      const w = random.normals(D, 0.3);
      const out = run({ a: a.bytes, a2: a.bytes, b: b.bytes, w, ...Object.fromEntries(['sum', 'y', 'sum2', 'y2', 'y3'].map((k) => [k, poison(rows * D, dtype)])) }, (p) => {
        const args = { weight: p.w!, rows, hidden: D, eps: 1e-6, offset: 1, roundNormalized: 0, dtype: code };
        cpu.launch(addKernel, flatLaunch(rows * D, cpu.defaultStream), { a: p.a!, b: p.b!, out: p.sum2!, count: rows * D, dtype: code });
        cpu.launch(rmsNormKernel, rowLaunch(rows, D, cpu.defaultStream), { ...args, input: p.sum2!, output: p.y2! });
        cpu.launch(addRmsNormKernel, rowLaunch(rows, D, cpu.defaultStream), { ...args, a: p.a!, b: p.b!, sum: p.sum!, output: p.y! });
        cpu.launch(addRmsNormKernel, rowLaunch(rows, D, cpu.defaultStream), { ...args, a: p.a2!, b: p.b!, sum: p.a2!, output: p.y3! });
      }, ['sum', 'y', 'sum2', 'y2', 'a2', 'y3']);
      for (const [fused, plain] of [['sum', 'sum2'], ['y', 'y2'], ['a2', 'sum2'], ['y3', 'y2']] as const) expect(Array.from(out[fused]!), fused).toEqual(Array.from(out[plain]!));
      expect(decodeRows(out.y2!, dtype).some(Number.isNaN)).toBe(false);
    });

    it(`${dtype}: std.layer_norm with bias`, () => {
      const [D, rows] = [36, 4];
      const x = stored(rows * D, dtype, 2);
      const w = random.normals(D, 0.3).map((v) => v + 1);
      const b = random.normals(D, 0.2);
      const out = run({ x: x.bytes, y: poison(rows * D, dtype), w, b }, (p) =>
        cpu.launch(layerNormKernel, rowLaunch(rows, D, cpu.defaultStream), { input: p.x!, output: p.y!, weight: p.w!, bias: p.b!, rows, hidden: D, eps: 1e-5, dtype: code }), ['y']);
      const want = new Float64Array(rows * D);
      for (let r = 0; r < rows; r++) {
        const row = x.values.subarray(r * D, (r + 1) * D);
        const mean = row.reduce((a, v) => a + v, 0) / D;
        const inv = 1 / Math.sqrt(row.reduce((a, v) => a + (v - mean) ** 2, 0) / D + 1e-5);
        row.forEach((v, i) => (want[r * D + i] = roundTo(dtype, (v - mean) * inv * w[i]! + b[i]!)));
      }
      expect(relativeL2Error(decodeRows(out.y!, dtype), want)).toBeLessThan(BOUND);
    });

    it(`${dtype}: std.add (in place) and std.silu_mul`, () => {
      const n = 301;
      const a = stored(n, dtype);
      const b = stored(n, dtype);
      const sum = run({ a: a.bytes, b: b.bytes, out: poison(n, dtype) }, (p) => {
        cpu.launch(addKernel, flatLaunch(n, cpu.defaultStream), { a: p.a!, b: p.b!, out: p.out!, count: n, dtype: code });
        cpu.launch(addKernel, flatLaunch(n, cpu.defaultStream), { a: p.a!, b: p.b!, out: p.a!, count: n, dtype: code });
      }, ['out', 'a']);
      const want = rounded(dtype, Array.from(a.values, (v, i) => Math.fround(v + b.values[i]!)));
      expect(Array.from(decodeRows(sum.out!, dtype))).toEqual(Array.from(want));
      expect(Array.from(decodeRows(sum.a!, dtype))).toEqual(Array.from(want));
      const [I, rows] = [13, 3];
      const gu = stored(rows * 2 * I, dtype, 3);
      const h = run({ gu: gu.bytes, out: poison(rows * I, dtype) }, (p) =>
        cpu.launch(siluMulKernel, rowLaunch(rows, I, cpu.defaultStream), { gateUp: p.gu!, out: p.out!, rows, inter: I, dtype: code }), ['out']);
      const hw = rounded(dtype, Array.from({ length: rows * I }, (_, i) => {
        const r = Math.floor(i / I);
        return silu(gu.values[r * 2 * I + (i % I)]!) * gu.values[r * 2 * I + I + (i % I)]!;
      }));
      expect(relativeL2Error(decodeRows(h.out!, dtype), hw)).toBeLessThan(BOUND);
    });

    it(`${dtype}: std.gelu_mul with activation sparsity, each step rounded as Gemma3nTextMLP._gaussian_topk holds it`, () => {
      const [I, rows] = [37, 4];
      const cutoff = sparsityCutoff(0.95)!;
      // HF's `std_multiplier.type(inputs.dtype)`.
      expect(roundTo(dtype, cutoff)).toBe(dtype === 'bf16' ? 1.6484375 : 1.64453125);
      const gu = stored(rows * 2 * I, dtype, 3);
      const h = run({ gu: gu.bytes, out: poison(rows * I, dtype) }, (p) =>
        cpu.launch(geluMulKernel, rowLaunch(rows, I, cpu.defaultStream), { gateUp: p.gu!, out: p.out!, rows, inter: I, cutoff, sparse: 1, dtype: code }), ['out']);
      const R = (v: number) => roundTo(dtype, v);
      const want = new Float64Array(rows * I);
      for (let r = 0; r < rows; r++) {
        const g = gu.values.subarray(r * 2 * I, r * 2 * I + I);
        const mean = g.reduce((a, v) => a + v, 0) / I;
        const std = Math.sqrt(g.reduce((a, v) => a + (v - mean) ** 2, 0) / I);
        // mean and std in the row type, std · multiplier, mean + that, g − cut-off: each a row-type tensor.
        const cut = R(R(mean) + R(R(std) * R(cutoff)));
        for (let i = 0; i < I; i++) want[r * I + i] = R(geluTanh(Math.max(0, R(g[i]! - cut))) * gu.values[r * 2 * I + I + i]!);
      }
      expect(relativeL2Error(decodeRows(h.out!, dtype), want)).toBeLessThan(BOUND);
    });
  }
});

describe('CPU twins of the expert kernels against float64 references, every weight format', () => {
  // Several 128-blocks, neither D nor I a multiple of 128; ids outside the experts on two entries.
  const [E, D, I, topK, rows] = [5, 160, 136, 2, 4];
  for (const format of EXPERT_FORMATS) {
    it(`${format}: up, down, weighted sum (grouped path) and the row-wise pair, then combine`, () => {
      const dtype = rowTypeOf(format);
      const codes = { wDtype: WEIGHT_DTYPE_CODE[format.startsWith('fp8') ? 'f8e4m3' : dtype], rowDtype: FLOAT_DTYPE_CODE[dtype] };
      const k = EXPERT_KERNELS[format];
      const w = expertSet(format, E, D, I, random);
      const x = stored(rows * D, dtype);
      const ids = Int32Array.from([0, 3, 4, -1, 2, 0, E, 1]);
      const weights = Float32Array.from({ length: rows * topK }, () => 0.1 + random.float());
      const bufs: Bufs = {
        x: x.bytes, ids, weights, gateUp: w.gateUp, gateUpScales: w.gateUpScales, down: w.down, downScales: w.downScales, groups: new Int32Array(64),
        h: poison(rows * topK * I, dtype), y: poison(rows * topK * D, dtype), out: poison(rows * D, dtype), h2: poison(rows * topK * I, dtype), out2: poison(rows * D, dtype),
      };
      const s = cpu.defaultStream;
      const r = run(bufs, (p) => {
        const scales = { gateUpScales: format.startsWith('fp8') ? p.gateUpScales! : 0n, downScales: format.startsWith('fp8') ? p.downScales! : 0n };
        const common = { ids: p.ids!, rows, hidden: D, inter: I, experts: E, topK, ...codes };
        cpu.launch(k.up, { grid: 1, block: 128, stream: s }, { ...common, input: p.x!, groups: p.groups!, gateUp: p.gateUp!, gateUpScales: scales.gateUpScales, h: p.h! });
        cpu.launch(k.down, { grid: 1, block: 128, stream: s }, { ...common, h: p.h!, groups: p.groups!, down: p.down!, downScales: scales.downScales, y: p.y! });
        cpu.launch(expertsKernel, expertsLaunch(rows, D, s), { y: p.y!, ids: p.ids!, weights: p.weights!, output: p.out!, rows, hidden: D, experts: E, topK, dtype: codes.rowDtype });
        cpu.launch(k.upRowwise, expertsUpRowwiseLaunch(rows, topK, I, s), { ...common, input: p.x!, gateUp: p.gateUp!, gateUpScales: scales.gateUpScales, h: p.h2! });
        cpu.launch(k.rowwise, expertsRowwiseLaunch(rows, D, s), { ...common, h: p.h2!, weights: p.weights!, down: p.down!, downScales: scales.downScales, output: p.out2! });
      }, ['h', 'y', 'out', 'h2', 'out2']);
      // Reference: h = R(silu(g)·u), y = R(down·h), out = R(Σ w·y), R the rounding to the row type.
      const hWant = new Float64Array(rows * topK * I);
      const yWant = new Float64Array(rows * topK * D);
      const outWant = new Float64Array(rows * D);
      for (let rj = 0; rj < rows * topK; rj++) {
        const e = ids[rj]!;
        if (e < 0 || e >= E) continue;
        const r0 = Math.floor(rj / topK) * D;
        for (let i = 0; i < I; i++) {
          let g = 0;
          let u = 0;
          for (let d = 0; d < D; d++) {
            g += w.gu[(e * 2 * I + i) * D + d]! * x.values[r0 + d]!;
            u += w.gu[(e * 2 * I + I + i) * D + d]! * x.values[r0 + d]!;
          }
          hWant[rj * I + i] = roundTo(dtype, silu(g) * u);
        }
        for (let d = 0; d < D; d++) {
          let t = 0;
          for (let i = 0; i < I; i++) t += w.dn[(e * D + d) * I + i]! * hWant[rj * I + i]!;
          yWant[rj * D + d] = roundTo(dtype, t);
          outWant[Math.floor(rj / topK) * D + d]! += weights[rj]! * yWant[rj * D + d]!;
        }
      }
      const out = rounded(dtype, outWant);
      expect(relativeL2Error(decodeRows(r.h!, dtype), hWant)).toBeLessThan(BOUND);
      expect(relativeL2Error(decodeRows(r.y!, dtype), yWant)).toBeLessThan(BOUND);
      expect(relativeL2Error(decodeRows(r.out!, dtype), out)).toBeLessThan(BOUND);
      // The row-wise pair gives the grouped path's bits.
      expect(Array.from(r.h2!)).toEqual(Array.from(r.h!));
      expect(Array.from(r.out2!)).toEqual(Array.from(r.out!));

      const shared = stored(rows * D, dtype);
      const gate = random.normals(rows, 2);
      const c = run({ routed: r.out!, shared: shared.bytes, gate, out: poison(rows * D, dtype) }, (p) =>
        cpu.launch(combineKernel, rowLaunch(rows, D, s), { routed: p.routed!, shared: p.shared!, gate: p.gate!, output: p.out!, rows, hidden: D, dtype: codes.rowDtype }), ['out']);
      const routed = decodeRows(r.out!, dtype);
      const cWant = rounded(dtype, Array.from({ length: rows * D }, (_, i) => routed[i]! + sigmoid(gate[Math.floor(i / D)]!) * shared.values[i]!));
      expect(relativeL2Error(decodeRows(c.out!, dtype), cWant)).toBeLessThan(BOUND);
    });
  }
});

describe('CPU twins of the attention kernels against a float64 reference, bf16 and f16', () => {
  // q/k norms: Qwen3NextRMSNorm ((x̂ · (1 + w)) rounded once), Gemma3nRMSNorm ((x̂ · w) once), GLM (w · x̂ rounded first).
  for (const dtype of ROW_TYPES) for (const [normOffset, roundNormalized] of [[1, 0], [0, 0], [0, 1]] as const) {
    it(`${dtype}: std.attn_prep (q/k norms ${normOffset ? '1 + w' : 'w'}${roundNormalized ? ' after x̂ rounded' : ''}, rounded, partial RoPE, the cache) and std.attn_core (GQA, gate)`, () => {
      const [H, Hkv, d, rot, page, maxSeqLen] = [4, 2, 16, 8, 4, 16];
      const code = FLOAT_DTYPE_CODE[dtype];
      const bytes = floatBytes(dtype);
      const W = H * d * 2 + 2 * Hkv * d;
      const maxPages = maxSeqLen / page;
      const rows = 7; // one sequence's prefill of 7 positions (slot 1)
      const qkv = stored(rows * W, dtype, 1.5);
      const qNorm = random.normals(d, 0.3).map((v) => roundTo(dtype, v));
      const kNorm = random.normals(d, 0.3).map((v) => roundTo(dtype, v));
      const rope = ropeTable(maxSeqLen, rot, 1e4);
      const blockTable = Int32Array.from({ length: 2 * maxPages }, (_, i) => (i * 3 + 1) % (2 * maxPages));
      const cacheElements = 2 * maxPages * page * Hkv * d;
      const k = ATTENTION_KERNELS[dtype];
      const r = run({
        qkv: qkv.bytes, kCache: poison(cacheElements, dtype), vCache: poison(cacheElements, dtype), blockTable, slots: Int32Array.from([1]),
        rowStarts: Int32Array.from([0, rows]), positions: Int32Array.from({ length: rows }, (_, i) => i), q: poison(rows * H * d, dtype),
        out: poison(rows * H * d, dtype), qNorm, kNorm, cos: rope.cos, sin: rope.sin,
      }, (p) => {
        const common = {
          qkv: p.qkv!, kCache: p.kCache!, vCache: p.vCache!, blockTable: p.blockTable!, slots: p.slots!, rowStarts: p.rowStarts!, positions: p.positions!,
          batch: 1, heads: H, kvHeads: Hkv, headDim: d, pageSize: page, maxPages, gated: 1, dtype: code, ownKv: 1,
        };
        cpu.launch(k.prep, { grid: rows, block: 32, stream: cpu.defaultStream }, {
          ...common, q: p.q!, qNorm: p.qNorm!, kNorm: p.kNorm!, cos: p.cos!, sin: p.sin!, rotaryDim: rot, maxPositions: maxSeqLen, eps: 1e-6, normOffset, roundNormalized, vNorm: 0,
        });
        cpu.launch(k.core, { grid: [rows, Hkv], block: 256, stream: cpu.defaultStream }, { ...common, q: p.q!, out: p.out!, scale: 1 / Math.sqrt(d), window: 0, chunks: 1, partials: 0n });
      }, ['q', 'kCache', 'vCache', 'out']);
      // Reference: the norm's output rounded (x̂ first with roundNormalized), rotated in f64, rounded where stored.
      const half = rot / 2;
      const prep = (row: number, at: number, w: Float32Array): Float64Array => {
        const x = qkv.values.subarray(row * W + at, row * W + at + d);
        const inv = 1 / Math.sqrt(x.reduce((a, v) => a + v * v, 0) / d + 1e-6);
        const n = Float64Array.from(x, (v, i) => roundTo(dtype, (roundNormalized ? roundTo(dtype, v * inv) : v * inv) * (normOffset + w[i]!)));
        const o = Float64Array.from(n);
        for (let i = 0; i < half; i++) {
          const c = rope.cos[row * half + i]!;
          const s = rope.sin[row * half + i]!;
          o[i] = n[i]! * c - n[i + half]! * s;
          o[i + half] = n[i + half]! * c + n[i]! * s;
        }
        return o.map((v) => roundTo(dtype, v));
      };
      const qWant = new Float64Array(rows * H * d);
      const keys: Float64Array[][] = [];
      const values: Float32Array[][] = [];
      for (let row = 0; row < rows; row++) {
        for (let h = 0; h < H; h++) qWant.set(prep(row, h * 2 * d, qNorm), (row * H + h) * d);
        keys.push(Array.from({ length: Hkv }, (_, h) => prep(row, H * 2 * d + h * d, kNorm)));
        values.push(Array.from({ length: Hkv }, (_, h) => qkv.values.subarray(row * W + H * 2 * d + Hkv * d + h * d, row * W + H * 2 * d + Hkv * d + (h + 1) * d)));
      }
      expect(relativeL2Error(decodeRows(r.q!, dtype), qWant)).toBeLessThan(BOUND);
      const kc = decodeRows(r.kCache!, dtype);
      const vc = decodeRows(r.vCache!, dtype);
      for (let t = 0; t < rows; t++) {
        for (let h = 0; h < Hkv; h++) {
          const at = ((blockTable[maxPages + Math.floor(t / page)]! * page + (t % page)) * Hkv + h) * d;
          expect(relativeL2Error(kc.subarray(at, at + d), keys[t]![h]!)).toBeLessThan(BOUND);
          expect(Array.from(vc.subarray(at, at + d))).toEqual(Array.from(values[t]![h]!));
        }
      }
      const outWant = new Float64Array(rows * H * d);
      for (let row = 0; row < rows; row++) {
        for (let h = 0; h < H; h++) {
          const kv = Math.floor(h / (H / Hkv));
          const q = qWant.subarray((row * H + h) * d, (row * H + h + 1) * d);
          const scores = keys.slice(0, row + 1).map((kk) => kk[kv]!.reduce((a, v, i) => a + v * q[i]!, 0) / Math.sqrt(d));
          const m = Math.max(...scores);
          const e = scores.map((s) => Math.exp(s - m));
          const z = e.reduce((a, b) => a + b, 0);
          for (let i = 0; i < d; i++) {
            const o = e.reduce((a, p, t) => a + p * values[t]![kv]![i]!, 0) / z;
            outWant[(row * H + h) * d + i] = roundTo(dtype, o * sigmoid(qkv.values[row * W + h * 2 * d + d + i]!));
          }
        }
      }
      expect(relativeL2Error(decodeRows(r.out!, dtype), outWant)).toBeLessThan(BOUND);
      expect(bytes * cacheElements).toBe(r.kCache!.byteLength);
    });
  }
  // Split-KV: rows of 300 to 1 100 keys cut into chunks (records of f32 sums), merged by std.attn_combine;
  // std.attn_decode's twin (P rounded per tile of 16 keys) against the same one-chunk std.attn_core.
  const splitCases = ROW_TYPES.flatMap((dtype) => (dtype === 'f32' ? ['core' as const] : ['core' as const, 'decode' as const]).map((kernel) => ({ dtype, kernel })));
  for (const { dtype, kernel } of splitCases) {
    it(`${dtype}: std.attn_${kernel} over key chunks + std.attn_combine equal std.attn_core's one-chunk result (f32 records), a window too`, () => {
      const [H, Hkv, d, page, maxSeqLen] = [6, 2, 24, 16, 1152];
      const code = FLOAT_DTYPE_CODE[dtype];
      const maxPages = maxSeqLen / page;
      const positions = Int32Array.from([1100, 299, 700, 63]);
      const rows = positions.length;
      const W = H * d * 2 + 2 * Hkv * d;
      const cacheElements = rows * maxPages * page * Hkv * d;
      const chunks = keyChunks('decode', maxSeqLen);
      expect(chunks).toBe(18);
      // Rows of 1 101, 300, 701 and 64 keys: 18, 5, 11 chunks of 64 and one.
      expect(Array.from(positions, (p) => keyChunksOf(p + 1, chunks).n)).toEqual([18, 5, 11, 1]);
      // Past MAX_KEY_CHUNKS chunks of 64 keys the chunks grow by whole tiles for each warp: 5 000 keys, 40 of 128 (the last 8 keys).
      expect(keyChunksOf(5000, 64)).toEqual({ n: 40, size: 128 });
      for (const window of [0, 400]) {
        const bufs = {
          qkv: stored(rows * W, dtype, 1.5).bytes, q: stored(rows * H * d, dtype, 1.5).bytes,
          kCache: stored(cacheElements, dtype).bytes, vCache: stored(cacheElements, dtype).bytes,
          blockTable: Int32Array.from({ length: rows * maxPages }, (_, i) => (i * 7 + 3) % (rows * maxPages)),
          slots: Int32Array.from({ length: rows }, (_, i) => i), rowStarts: Int32Array.from({ length: rows + 1 }, (_, i) => i), positions,
          out: poison(rows * H * d, dtype), whole: poison(rows * H * d, dtype), partials: new Float32Array(partialsBytes(rows, H, d, chunks) / 4),
        };
        const r = run(bufs, (p) => {
          const args = {
            qkv: p.qkv!, kCache: p.kCache!, vCache: p.vCache!, blockTable: p.blockTable!, slots: p.slots!, rowStarts: p.rowStarts!, positions: p.positions!,
            batch: rows, heads: H, kvHeads: Hkv, headDim: d, pageSize: page, maxPages, gated: 1, dtype: code, ownKv: 1, q: p.q!, scale: 1 / Math.sqrt(d), window,
          };
          const k = ATTENTION_KERNELS[dtype];
          const split = { ...args, out: p.out!, chunks, partials: p.partials! };
          cpu.launch(kernel === 'decode' ? k.decode! : k.core, { grid: [rows, Hkv, 2], block: 256, stream: cpu.defaultStream }, split);
          cpu.launch(k.combine, { grid: [rows, H], block: 128, stream: cpu.defaultStream }, split);
          cpu.launch(k.core, { grid: [rows, Hkv], block: 256, stream: cpu.defaultStream }, { ...args, out: p.whole!, chunks: 1, partials: 0n });
        }, ['out', 'whole']);
        // The records' f32 sums and the merge's exponentials: within a rounding step of the row type, most values equal.
        const got = decodeRows(r.out!, dtype);
        const want = decodeRows(r.whole!, dtype);
        expect(got.some((v) => Number.isNaN(v))).toBe(false);
        expect(relativeL2Error(got, want)).toBeLessThan(dtype === 'bf16' ? 8e-3 : 1e-3);
        // The last row (128 keys) is one chunk: written by the kernel directly; std.attn_core's the same bits.
        if (kernel === 'core') expect(Array.from(got.subarray(3 * H * d))).toEqual(Array.from(want.subarray(3 * H * d)));
      }
    });
  }
});
