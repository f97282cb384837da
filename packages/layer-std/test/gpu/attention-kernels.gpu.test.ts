// std-attention: attention over several pages of a shuffled block table with GQA, partial RoPE,
// q/k norms, the output gate, verify rows and a padding row, at the Qwen3-Next-80B head shape (16
// heads, 2 KV heads, d 256, rotary 64) and three smaller ones: std.attn_prep + std.attn_core, the
// split-KV decode and std.attn_combine (the same bits at any split), and the tensor-core prefill.
// The method and bounds: kernel-check.ts. Without a GPU the suite skips and says why.
import { FLOAT_DTYPE_CODE, floatBytes, type FloatDtype } from '@metrale/core';
import { type KernelBuffers as Bufs } from '@metrale/core/testing';
import {
  ATTENTION_KERNELS, attnPrefillLaunch, attnDecodeLaunch, prepLaunch, coreLaunch, combineLaunch, keyChunks, partialsBytes, ropeTable,
} from '@metrale/layer-std';
import { expect, it } from 'vitest';
import { decodeRows } from '../setup.js';
import { STEP, ROW_TYPES, random, poison, typed, sameBits, onBoth, compare, describeKernels } from './kernel-check.js';

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

describeKernels('attention', () => {
  // ---- std-attention -----------------------------------------------------------------------------------
  const shapes = [
    { label: 'Qwen3-Next-80B heads: 16 q / 2 kv, d 256, rotary 64, gated, norms 1 + w, pages of 16', H: 16, Hkv: 2, d: 256, rot: 64, gated: 1, norms: true, offset: 1, page: 16, hist: [45, 50, 20] },
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
        // One key chunk (MIN_KEY_CHUNK keys) holds the longest row: the chunks' test is below.
        const maxSeqLen = 64;
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
  // a padding row, rows at exactly 64 keys (one chunk) and 65 (two). Each row's cut depends on its
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
      expect(chunks).toBe(32);
      const seqs = [
        { slot: 0, start: 1500, count: 1 },
        { slot: 1, start: 700, count: 4 },
        { slot: -1, start: 0, count: 1 },
        { slot: 2, start: 63, count: 1 },
        { slot: 3, start: 64, count: 1 },
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
