// GEMM through cuBLASLt against a float64 host reference. Error bounds, per element, with
// S = |alpha|·Σ_l |a_il·b_lj| + |beta·c0_ij| (the magnitude the sum is made of):
//   f32 inputs, f32 output (FP32 compute, no TF32):  |C − ref| ≤ 4e-5 · S
//   bf16 inputs, f32 output (FP32 accumulation):     |C − ref| ≤ 2e-4 · S
//   bf16 inputs, bf16 output:                        |C − ref| ≤ 2^-8 · |ref| + 2e-4 · S
// (2^-8 is bf16's unit roundoff; the S terms leave room for FP32 accumulation over k ≤ 1024.)
// The reference uses the bf16-rounded inputs, so only accumulation and output rounding count.
// GEMMs of m ≤ 8 rows with 16-bit A and B, row-major A and packed n × k B, go through the backend's
// backend_gemm_rows instead (f32 sums of k/32 products per lane, then a 5-level tree, k ≤ 4096):
//   f32 output:          |C − ref| ≤ 1e-5 · S
//   bf16 / f16 output:   |C − ref| ≤ 1e-5 · S + 2^-8 (bf16) or 2^-11 (f16) · |ref|
import { f16BitsToF32, fromBf16, toBf16, toF16, type GemmArgs } from '@metrale/core';
import { expect, it } from 'vitest';
import type { CudaBackend } from '../../src/index.js';
import { describeGpu, randomF32, useBackend } from './gpu-setup.js';

interface Case {
  m: number; n: number; k: number; transA: boolean; transB: boolean;
  pad: number; dtype: 'f32' | 'bf16'; outDtype: 'f32' | 'bf16'; alpha: number; beta: number;
  rows?: number[]; // rows of C to check (all when absent)
}

/** Runs one GEMM and returns the largest error as a fraction of its bound (≤ 1 passes). */
function runCase(b: CudaBackend, c: Case, launch: (args: GemmArgs) => void = (args) => b.gemm(args)): number {
  const { m, n, k, transA, transB, pad, dtype, outDtype, alpha, beta } = c;
  const aRows = transA ? k : m, aCols = transA ? m : k, bRows = transB ? n : k, bCols = transB ? k : n;
  const lda = aCols + pad, ldb = bCols + pad, ldc = n + pad;
  // Host copies as the device will see them (bf16-rounded where the device stores bf16).
  const roundIn = (x: Float32Array) => (dtype === 'bf16' ? fromBf16(toBf16(x)) : x);
  const roundOut = (x: Float32Array) => (outDtype === 'bf16' ? fromBf16(toBf16(x)) : x);
  const A = roundIn(randomF32(aRows * lda)), B = roundIn(randomF32(bRows * ldb)), C0 = roundOut(randomF32(m * ldc));
  const inBytes = dtype === 'bf16' ? 2 : 4, outBytes = outDtype === 'bf16' ? 2 : 4;
  const encode = (x: Float32Array, bf16: boolean) => (bf16 ? toBf16(x) : x);
  const pa = b.alloc(A.length * inBytes), pb = b.alloc(B.length * inBytes), pc = b.alloc(C0.length * outBytes);
  b.upload(pa, encode(A, dtype === 'bf16'));
  b.upload(pb, encode(B, dtype === 'bf16'));
  b.upload(pc, encode(C0, outDtype === 'bf16'));
  launch({ m, n, k, a: pa, b: pb, c: pc, transA, transB, lda, ldb, ldc, dtype, outDtype, alpha, beta });
  b.synchronize();
  const raw = b.download(pc, C0.length * outBytes);
  const C = outDtype === 'bf16' ? fromBf16(new Uint16Array(raw.buffer)) : new Float32Array(raw.buffer);
  for (const p of [pa, pb, pc]) b.free(p);

  const at = (i: number, l: number) => (transA ? A[l * lda + i]! : A[i * lda + l]!);
  const bt = (l: number, j: number) => (transB ? B[j * ldb + l]! : B[l * ldb + j]!);
  let worst = 0;
  for (const i of c.rows ?? Array.from({ length: m }, (_, i) => i)) {
    for (let j = 0; j < n; j++) {
      let sum = 0, mag = 0;
      for (let l = 0; l < k; l++) {
        const p = at(i, l) * bt(l, j);
        sum += p;
        mag += Math.abs(p);
      }
      const c0 = C0[i * ldc + j]!;
      const ref = alpha * sum + beta * c0;
      const scale = Math.abs(alpha) * mag + Math.abs(beta * c0);
      const bound =
        dtype === 'f32' ? 4e-5 * scale : outDtype === 'f32' ? 2e-4 * scale : 2 ** -8 * Math.abs(ref) + 2e-4 * scale;
      worst = Math.max(worst, Math.abs(C[i * ldc + j]! - ref) / Math.max(bound, 1e-30));
    }
    // Padding columns of C are never written.
    for (let j = n; j < ldc; j++) expect(C[i * ldc + j]).toBe(C0[i * ldc + j]);
  }
  return worst;
}

describeGpu('gemm through cuBLASLt', () => {
  const gpu = useBackend();
  const skip = () => !gpu().gemmLibrary.loaded;

  it('f32: every transpose combination, padded leading dimensions, alpha and beta', (ctx) => {
    if (skip()) return ctx.skip();
    for (const transA of [false, true]) {
      for (const transB of [false, true]) {
        const worst = runCase(gpu(), { m: 96, n: 80, k: 128, transA, transB, pad: 3, dtype: 'f32', outDtype: 'f32', alpha: 0.5, beta: 2 });
        console.log(`[cuda-backend gpu] gemm f32 transA=${transA} transB=${transB}: worst error ${worst.toFixed(3)} of its bound`);
        expect(worst).toBeLessThanOrEqual(1);
      }
    }
  });

  it('bf16 inputs with bf16 and with f32 output (x · Wᵀ, as a Linear layer does)', (ctx) => {
    if (skip()) return ctx.skip();
    for (const outDtype of ['bf16', 'f32'] as const) {
      const worst = runCase(gpu(), { m: 128, n: 192, k: 256, transA: false, transB: true, pad: 0, dtype: 'bf16', outDtype, alpha: 1, beta: 0 });
      console.log(`[cuda-backend gpu] gemm bf16 -> ${outDtype}: worst error ${worst.toFixed(3)} of its bound`);
      expect(worst).toBeLessThanOrEqual(1);
    }
  });

  it('bf16 at a tensor-core size (1024³, sampled rows) and odd sizes', (ctx) => {
    if (skip()) return ctx.skip();
    const big = runCase(gpu(), { m: 1024, n: 1024, k: 1024, transA: false, transB: true, pad: 0, dtype: 'bf16', outDtype: 'bf16', alpha: 1, beta: 0, rows: [0, 1, 511, 1023] });
    const odd = runCase(gpu(), { m: 33, n: 17, k: 65, transA: true, transB: false, pad: 1, dtype: 'bf16', outDtype: 'f32', alpha: -1.5, beta: 0.25 });
    console.log(`[cuda-backend gpu] gemm bf16 1024³: ${big.toFixed(3)}, odd 33x17x65: ${odd.toFixed(3)} of their bounds`);
    expect(big).toBeLessThanOrEqual(1);
    expect(odd).toBeLessThanOrEqual(1);
  });

  it('records a GEMM into a graph (preallocated workspace) and replays it correctly', (ctx) => {
    if (skip()) return ctx.skip();
    const b = gpu();
    const s = b.createStream();
    const worst = runCase(b, { m: 64, n: 256, k: 512, transA: false, transB: true, pad: 0, dtype: 'bf16', outDtype: 'f32', alpha: 1, beta: 0 }, (args) => {
      b.gemm(args); // eager first: heuristics and kernels loaded outside the capture
      b.memsetAsync(args.c, 0, args.m * args.n * 4);
      b.synchronize();
      b.beginCapture(s);
      b.gemm({ ...args, stream: s });
      const exec = b.instantiate(b.endCapture(s));
      b.launchGraph(exec, s);
      b.synchronize(s);
      b.destroyGraphExec(exec);
    });
    console.log(`[cuda-backend gpu] gemm replayed from a graph: worst error ${worst.toFixed(3)} of its bound`);
    expect(worst).toBeLessThanOrEqual(1);
    b.destroyStream(s);
  });

  it('rejects f32 x f32 -> bf16, which cuBLASLt does not offer', (ctx) => {
    if (skip()) return ctx.skip();
    const b = gpu();
    const p = b.alloc(64);
    expect(() => b.gemm({ m: 2, n: 2, k: 2, a: p, b: p, c: p, dtype: 'f32', outDtype: 'bf16' })).toThrow(/no f32 x f32 -> bf16/);
    b.free(p);
  });
});

type Half = 'bf16' | 'f16';
type Out = 'f32' | 'bf16' | 'f16';

const encode16 = (x: Float32Array, d: Half): Uint16Array => (d === 'bf16' ? toBf16(x) : toF16(x));
/** Every f16 value by its bits (a table: decoding tens of millions of weights one call each is slow). */
const F16_VALUES = Float32Array.from({ length: 65536 }, (_, bits) => f16BitsToF32(bits));
const decode16 = (bits: Uint16Array, d: Half): Float32Array => {
  if (d === 'bf16') return fromBf16(bits);
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = F16_VALUES[bits[i]!]!;
  return out;
};
/** The values as the device stores them in `d`. */
const stored = (x: Float32Array, d: Out): Float32Array => (d === 'f32' ? x : decode16(encode16(x, d), d));
const outBytes = (d: Out) => (d === 'f32' ? 4 : 2);

/** An n × k weight (B, stored n × k and packed), uploaded once for the cases of its shape. */
interface Weight { n: number; k: number; dtype: Half; values: Float32Array; ptr: bigint }

function uploadWeight(b: CudaBackend, n: number, k: number, dtype: Half): Weight {
  const values = stored(randomF32(n * k), dtype);
  const ptr = b.alloc(n * k * 2);
  b.upload(ptr, encode16(values, dtype));
  return { n, k, dtype, values, ptr };
}

interface RowsCase {
  m: number; out: Out; lda?: number; ldc?: number; alpha?: number; beta?: number;
  /** A starts this many elements into its allocation (1: not 16-byte aligned). */
  aOffset?: number;
}

/**
 * C = alpha · A · Wᵀ + beta · C0 for random A and C0 (padding between rows of A and of C), through
 * `launch` (b.gemm by default); returns the worst |C − ref| / bound over C (≤ 1 passes), with the
 * kernel's bound or (`cublasLt`) the cuBLASLt one above, and C.
 */
function rowsCase(b: CudaBackend, w: Weight, t: RowsCase, options: { launch?: (args: GemmArgs) => void; cublasLt?: boolean } = {}) {
  const { m, out } = t, { n, k, dtype } = w;
  const lda = t.lda ?? k, ldc = t.ldc ?? n, alpha = t.alpha ?? 1, beta = t.beta ?? 0, aOffset = t.aOffset ?? 0;
  const A = stored(randomF32(m * lda), dtype), C0 = stored(randomF32(m * ldc), out);
  const pa = b.alloc((aOffset + A.length) * 2), pc = b.alloc(C0.length * outBytes(out));
  const a = pa + BigInt(aOffset * 2);
  b.upload(a, encode16(A, dtype));
  b.upload(pc, out === 'f32' ? C0 : encode16(C0, out));
  const args: GemmArgs = { m, n, k, a, b: w.ptr, c: pc, lda, ldc, transB: true, dtype, outDtype: out, alpha, beta };
  (options.launch ?? ((g: GemmArgs) => b.gemm(g)))(args);
  b.synchronize();
  const raw = b.download(pc, C0.length * outBytes(out));
  const C = out === 'f32' ? new Float32Array(raw.buffer, raw.byteOffset, C0.length) : decode16(new Uint16Array(raw.buffer, raw.byteOffset, C0.length), out);
  b.free(pa);
  b.free(pc);

  const unit = out === 'f32' ? 0 : out === 'bf16' ? 2 ** -8 : 2 ** -11;
  const accumulation = options.cublasLt ? 2e-4 : 1e-5;
  const B = w.values;
  let worst = 0;
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let sum = 0, mag = 0;
      for (let l = 0, ai = i * lda, bj = j * k; l < k; l++) {
        const p = A[ai + l]! * B[bj + l]!;
        sum += p;
        mag += Math.abs(p);
      }
      const c0 = C0[i * ldc + j]!;
      const ref = alpha * sum + beta * c0;
      const bound = accumulation * (Math.abs(alpha) * mag + Math.abs(beta * c0)) + unit * Math.abs(ref);
      worst = Math.max(worst, Math.abs(C[i * ldc + j]! - ref) / Math.max(bound, 1e-30));
    }
    // Padding columns of C are never written.
    for (let j = n; j < ldc; j++) expect(C[i * ldc + j]).toBe(C0[i * ldc + j]);
  }
  return { worst, c: C };
}

describeGpu('gemm of a few rows (backend_gemm_rows, m ≤ 8)', () => {
  const gpu = useBackend();

  // Real proportions: an attention output (n 2048, k 4096), an MLP up / gate (n 12352 and 9216, k
  // 2048); every m of 1, 3 and 8 with each type, f32 and 16-bit C, beta with padded C.
  const shapes: { n: number; k: number; dtype: Half; cases: RowsCase[] }[] = [
    { n: 2048, k: 4096, dtype: 'bf16', cases: [{ m: 1, out: 'bf16' }] },
    { n: 2048, k: 4096, dtype: 'f16', cases: [{ m: 8, out: 'f32', ldc: 2056, alpha: 0.5, beta: 1 }] },
    { n: 12352, k: 2048, dtype: 'bf16', cases: [{ m: 8, out: 'bf16' }] },
    { n: 12352, k: 2048, dtype: 'f16', cases: [{ m: 1, out: 'f32' }] },
    { n: 9216, k: 2048, dtype: 'bf16', cases: [{ m: 3, out: 'f32', ldc: 9221, beta: 1 }] },
    { n: 9216, k: 2048, dtype: 'f16', cases: [{ m: 3, out: 'f16' }] },
  ];
  for (const { n, k, dtype, cases } of shapes) {
    it(`n ${n} k ${k} ${dtype}: m ${cases.map((c) => `${c.m} → ${c.out}${c.beta ? ' (beta)' : ''}`).join(', ')}`, () => {
      const b = gpu();
      const w = uploadWeight(b, n, k, dtype);
      for (const t of cases) {
        const { worst } = rowsCase(b, w, t);
        console.log(`[cuda-backend gpu] gemm rows m ${t.m} n ${n} k ${k} ${dtype} → ${t.out}: worst error ${worst.toFixed(3)} of its bound`);
        expect(worst, `m ${t.m}`).toBeLessThanOrEqual(1);
      }
      b.free(w.ptr);
    });
  }

  it('odd shapes: the vector path with a partial last step and odd n, and the scalar path', () => {
    const b = gpu();
    const odd: { n: number; k: number; dtype: Half; cases: RowsCase[]; why: string }[] = [
      { n: 37, k: 72, dtype: 'bf16', why: 'vector, one partial step', cases: [{ m: 3, out: 'bf16', ldc: 40, beta: 1 }, { m: 8, out: 'f32', alpha: -1.5 }] },
      { n: 37, k: 72, dtype: 'f16', why: 'vector, one partial step', cases: [{ m: 5, out: 'f16', ldc: 41, alpha: 2, beta: 0.5 }] },
      { n: 129, k: 2056, dtype: 'bf16', why: 'vector, full steps and a partial one', cases: [{ m: 2, out: 'bf16', lda: 2064 }, { m: 6, out: 'f32', beta: 1, ldc: 130 }] },
      { n: 50, k: 30, dtype: 'bf16', why: 'scalar: k % 8 ≠ 0', cases: [{ m: 3, out: 'f32' }, { m: 8, out: 'bf16', beta: 1, ldc: 51 }] },
      { n: 64, k: 128, dtype: 'f16', why: 'scalar: lda % 8 ≠ 0', cases: [{ m: 2, out: 'f16', lda: 130, beta: 1, ldc: 70 }] },
      { n: 64, k: 128, dtype: 'bf16', why: 'scalar: A not 16-byte aligned', cases: [{ m: 1, out: 'bf16', aOffset: 1 }, { m: 7, out: 'f32', aOffset: 3, lda: 136 }] },
    ];
    for (const { n, k, dtype, cases, why } of odd) {
      const w = uploadWeight(b, n, k, dtype);
      for (const t of cases) {
        const { worst } = rowsCase(b, w, t);
        console.log(`[cuda-backend gpu] gemm rows m ${t.m} n ${n} k ${k} ${dtype} → ${t.out} (${why}): worst error ${worst.toFixed(3)} of its bound`);
        expect(worst, `${why}, m ${t.m}`).toBeLessThanOrEqual(1);
      }
      b.free(w.ptr);
    }
  });

  it('m = 9 still goes through cuBLASLt, close to the kernel on the same rows', (ctx) => {
    const b = gpu();
    if (!b.gemmLibrary.loaded) return ctx.skip();
    const w = uploadWeight(b, 2048, 2048, 'bf16');
    const t: RowsCase = { m: 9, out: 'f32', ldc: 2050 };
    const lt = rowsCase(b, w, t, { cublasLt: true });
    // The same product as m 8 + m 1 through the kernel (A and C of row 8 offset into their buffers).
    const rows = rowsCase(b, w, t, {
      launch: (args) => {
        b.gemm({ ...args, m: 8 });
        b.gemm({ ...args, m: 1, a: args.a + BigInt(8 * args.lda! * 2), c: args.c + BigInt(8 * args.ldc! * 4) });
      },
    });
    console.log(`[cuda-backend gpu] gemm m 9 (cuBLASLt): ${lt.worst.toFixed(3)}, as m 8 + m 1 (kernel): ${rows.worst.toFixed(3)} of their bounds`);
    expect(lt.worst).toBeLessThanOrEqual(1);
    expect(rows.worst).toBeLessThanOrEqual(1);
    b.free(w.ptr);
  });

  it('is captured into a graph and replays with the current inputs, as eager', () => {
    const b = gpu();
    const m = 4, n = 512, k = 1024;
    const w = uploadWeight(b, n, k, 'bf16');
    const pa = b.alloc(m * k * 2), pc = b.alloc(m * n * 4), eager = b.alloc(m * n * 4);
    const args: GemmArgs = { m, n, k, a: pa, b: w.ptr, c: pc, transB: true, dtype: 'bf16', outDtype: 'f32' };
    const s = b.createStream();
    b.beginCapture(s);
    b.gemm({ ...args, stream: s });
    const exec = b.instantiate(b.endCapture(s));
    b.upload(pa, toBf16(randomF32(m * k)));
    b.launchGraph(exec, s);
    b.gemm({ ...args, c: eager, stream: s });
    b.synchronize(s);
    expect(Buffer.from(b.download(pc, m * n * 4)).equals(Buffer.from(b.download(eager, m * n * 4)))).toBe(true);
    b.destroyGraphExec(exec);
    b.destroyStream(s);
    for (const p of [w.ptr, pa, pc, eager]) b.free(p);
  });
});
