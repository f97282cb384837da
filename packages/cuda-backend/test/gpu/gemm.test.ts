// GEMM through cuBLASLt against a float64 host reference. Error bounds, per element, with
// S = |alpha|·Σ_l |a_il·b_lj| + |beta·c0_ij| (the magnitude the sum is made of):
//   f32 inputs, f32 output (FP32 compute, no TF32):  |C − ref| ≤ 4e-5 · S
//   bf16 inputs, f32 output (FP32 accumulation):     |C − ref| ≤ 2e-4 · S
//   bf16 inputs, bf16 output:                        |C − ref| ≤ 2^-8 · |ref| + 2e-4 · S
// (2^-8 is bf16's unit roundoff; the S terms leave room for FP32 accumulation over k ≤ 1024.)
// The reference uses the bf16-rounded inputs, so only accumulation and output rounding count.
import { fromBf16, toBf16, type GemmArgs } from '@metrale/core';
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
