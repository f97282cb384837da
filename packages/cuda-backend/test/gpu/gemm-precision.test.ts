// The data path's GEMMs and conversions on the device against float64 references of the stored
// values: block-FP8 B through the backend's kernels (the rows one for m ≤ 8, on tensor cores and on
// its per-code path, its wide form to 64 rows, the tensor-core tiles above on 16-byte loads and per
// element; partial 128-blocks in n and k; bf16 and f16 A; f32, bf16, f16 C;
// alpha and beta), f16 operands through cuBLASLt, and `convert` between every pair of types
// (bit-exact with core's encoders, which the CPU backend uses: one rounding of the same value). Bounds per element, S = Σ |a·b| + |beta·c0|:
// f32 C: |C − ref| ≤ 1e-5 · S (f32 accumulation over the blocks); a 16-bit C: one more rounding.
import {
  SeededRandom, bf16BitsToF32, dequantizeFp8, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, quantizeFp8, toBf16, toF16, type FloatDtype, type GpuBackend,
} from '@metrale/core';
import { expect, it } from 'vitest';
import { describeGpu, useBackend } from './gpu-setup.js';

const encode = (v: Float32Array, d: FloatDtype): ArrayBufferView => (d === 'f32' ? v : d === 'bf16' ? toBf16(v) : toF16(v));
const decode = (bytes: Uint8Array, d: FloatDtype): Float32Array => {
  const copy = bytes.slice();
  if (d === 'f32') return new Float32Array(copy.buffer);
  return Float32Array.from(new Uint16Array(copy.buffer), (b) => (d === 'bf16' ? bf16BitsToF32(b) : f16BitsToF32(b)));
};
const bytesOf = (d: FloatDtype) => (d === 'f32' ? 4 : 2);
const asBytes = (v: ArrayBufferView) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
/** The values as the device stores them in `d`. */
const stored = (v: Float32Array, d: FloatDtype): Float32Array => decode(asBytes(encode(v, d)), d);

function put(gpu: GpuBackend, data: ArrayBufferView): bigint {
  const p = gpu.alloc(Math.max(4, data.byteLength));
  gpu.upload(p, data);
  return p;
}

interface Fp8Case { m: number; n: number; k: number; a: 'bf16' | 'f16'; c: FloatDtype; lda: number; ldc: number; alpha: number; beta: number }

/** The worst |C − ref| / bound over C, where ref is the float64 product with the dequantized B. */
function fp8Case(gpu: GpuBackend, t: Fp8Case, seed: number): number {
  const rng = new SeededRandom(seed);
  const { codes, scales } = quantizeFp8(rng.normals(t.n * t.k, 0.05), t.n, t.k);
  const a = stored(rng.normals(t.m * t.lda), t.a);
  const c0 = stored(rng.normals(t.m * t.ldc), t.c);
  const pa = put(gpu, encode(a, t.a)), pb = put(gpu, codes), ps = put(gpu, scales), pc = put(gpu, encode(c0, t.c));
  gpu.gemm({ m: t.m, n: t.n, k: t.k, a: pa, lda: t.lda, b: pb, bDtype: 'f8e4m3', bScales: ps, c: pc, ldc: t.ldc, transB: true, dtype: t.a, outDtype: t.c, alpha: t.alpha, beta: t.beta });
  gpu.synchronize();
  const got = decode(gpu.download(pc, t.m * t.ldc * bytesOf(t.c)), t.c);
  for (const p of [pa, pb, ps, pc]) gpu.free(p);
  const w = dequantizeFp8(codes, scales, t.n, t.k);
  const unit = t.c === 'f32' ? 0 : t.c === 'bf16' ? 2 ** -8 : 2 ** -11;
  let worst = 0;
  for (let i = 0; i < t.m; i++) {
    for (let j = 0; j < t.n; j++) {
      let s = 0, mag = 0;
      for (let q = 0; q < t.k; q++) {
        const p = a[i * t.lda + q]! * w[j * t.k + q]!;
        s += p;
        mag += Math.abs(p);
      }
      const ref = t.alpha * s + t.beta * c0[i * t.ldc + j]!;
      const bound = 1e-5 * (Math.abs(t.alpha) * mag + Math.abs(t.beta * c0[i * t.ldc + j]!)) + unit * Math.abs(ref) + 1e-30;
      worst = Math.max(worst, Math.abs(got[i * t.ldc + j]! - ref) / bound);
    }
  }
  return worst;
}

describeGpu('gemm with a block-FP8 B (the backend kernels)', () => {
  const backend = useBackend();
  const cases: Fp8Case[] = [
    { m: 1, n: 384, k: 512, a: 'bf16', c: 'f32', lda: 512, ldc: 384, alpha: 1, beta: 0 },
    { m: 5, n: 200, k: 130, a: 'bf16', c: 'bf16', lda: 136, ldc: 208, alpha: 0.5, beta: 1 },
    { m: 8, n: 257, k: 96, a: 'f16', c: 'f16', lda: 96, ldc: 257, alpha: 1, beta: 0 },
    // The rows kernel's tensor-core path at Qwen3-Next-80B's widths (in_proj_qkvz at one row, out_proj
    // at two, attention's q/gate/k/v at eight), and k a multiple of 16 with rows that are not 16-byte aligned (the per-code path).
    { m: 1, n: 12288, k: 2048, a: 'bf16', c: 'bf16', lda: 2048, ldc: 12288, alpha: 1, beta: 0 },
    { m: 2, n: 2048, k: 4096, a: 'bf16', c: 'bf16', lda: 4104, ldc: 2048, alpha: 1, beta: 1 },
    { m: 8, n: 9216, k: 2048, a: 'bf16', c: 'bf16', lda: 2048, ldc: 9216, alpha: 1, beta: 0 },
    { m: 3, n: 130, k: 256, a: 'f16', c: 'f32', lda: 260, ldc: 130, alpha: 1, beta: 0 },
    { m: 9, n: 130, k: 300, a: 'bf16', c: 'f32', lda: 300, ldc: 130, alpha: 1, beta: 0 },
    { m: 100, n: 640, k: 2048, a: 'bf16', c: 'bf16', lda: 2048, ldc: 640, alpha: 1, beta: 0 },
    // The rows kernel's wide form (9 to 64 rows, 16-byte loads): out_proj at batch 64 (k = 4096,
    // beta), 16 rows over a wide n (CTAs of 8 warps on an H100 or H200), a k that ends inside a
    // 128-wide block with n ending inside a CTA's columns (f16, m 17: a group of one row), 40 rows
    // with lda past k. (The mock driver's GEMM is a plain loop: the shapes stay small.)
    { m: 64, n: 2048, k: 4096, a: 'bf16', c: 'bf16', lda: 4096, ldc: 2048, alpha: 1, beta: 1 },
    { m: 16, n: 4352, k: 2048, a: 'bf16', c: 'bf16', lda: 2048, ldc: 4352, alpha: 1, beta: 0 },
    { m: 17, n: 200, k: 144, a: 'f16', c: 'f32', lda: 152, ldc: 200, alpha: 0.5, beta: 0.25 },
    { m: 40, n: 520, k: 640, a: 'bf16', c: 'f32', lda: 648, ldc: 520, alpha: 1, beta: 0 },
    // The tiled kernel's 16-byte loads: several tiles of rows (m 130), past the wide form (m 65).
    { m: 130, n: 384, k: 2048, a: 'bf16', c: 'f32', lda: 2048, ldc: 390, alpha: 1, beta: 0 },
    { m: 65, n: 256, k: 512, a: 'bf16', c: 'bf16', lda: 512, ldc: 256, alpha: 1, beta: 0 },
    { m: 333, n: 100, k: 200, a: 'f16', c: 'f32', lda: 210, ldc: 100, alpha: 2, beta: 0.5 },
  ];
  for (const [i, t] of cases.entries()) {
    it(`m ${t.m} n ${t.n} k ${t.k}, ${t.a} A → ${t.c} C${t.beta ? ', beta' : ''}`, () => {
      expect(fp8Case(backend(), t, 100 + i)).toBeLessThanOrEqual(1);
    });
  }

  // A row's products, their order and the warps' split of k do not depend on m up to 64 rows, so
  // a decode row gets the same bits whatever the batch it shares (the rows kernel to 8 rows, its
  // wide form above); for both splits of k: n of at least 2 CTAs an SM (8 warps each on an H100 or
  // H200's 132 multiprocessors) and fewer (16 warps), as in_proj_qkvz and out_proj take them.
  for (const [n, k] of [[4352, 1024], [1024, 2048]] as const) {
    it(`gives a row the same bits at 1, 8, 9, 24 and 64 rows (n ${n}, k ${k})`, () => {
      const gpu = backend();
      const rng = new SeededRandom(n + k);
      const { codes, scales } = quantizeFp8(rng.normals(n * k, 0.05), n, k);
      const a = toBf16(rng.normals(64 * k));
      const pa = put(gpu, a), pb = put(gpu, codes), ps = put(gpu, scales), pc = gpu.alloc(64 * n * 2);
      const rowsOf = (m: number): Uint8Array => {
        gpu.gemm({ m, n, k, a: pa, b: pb, bDtype: 'f8e4m3', bScales: ps, c: pc, transB: true, dtype: 'bf16', outDtype: 'bf16' });
        gpu.synchronize();
        return gpu.download(pc, m * n * 2).slice();
      };
      try {
        const all = rowsOf(64);
        for (const m of [1, 8, 9, 24]) {
          const some = rowsOf(m);
          expect(Buffer.compare(Buffer.from(some), Buffer.from(all.subarray(0, m * n * 2))), `the first ${m} rows`).toBe(0);
        }
      } finally {
        for (const p of [pa, pb, ps, pc]) gpu.free(p);
      }
    });
  }

  it('is captured into a graph and replays with the current inputs', () => {
    const gpu = backend();
    const m = 4, n = 256, k = 256;
    const rng = new SeededRandom(9);
    const { codes, scales } = quantizeFp8(rng.normals(n * k, 0.05), n, k);
    const pa = put(gpu, toBf16(rng.normals(m * k))), pb = put(gpu, codes), ps = put(gpu, scales), pc = gpu.alloc(m * n * 4);
    const stream = gpu.createStream();
    gpu.beginCapture(stream);
    gpu.gemm({ m, n, k, a: pa, b: pb, bDtype: 'f8e4m3', bScales: ps, c: pc, transB: true, dtype: 'bf16', outDtype: 'f32', stream });
    const exec = gpu.instantiate(gpu.endCapture(stream));
    const a2 = rng.normals(m * k);
    gpu.upload(pa, toBf16(a2));
    gpu.launchGraph(exec, stream);
    gpu.synchronize(stream);
    const eager = gpu.alloc(m * n * 4);
    gpu.gemm({ m, n, k, a: pa, b: pb, bDtype: 'f8e4m3', bScales: ps, c: eager, transB: true, dtype: 'bf16', outDtype: 'f32', stream });
    gpu.synchronize(stream);
    expect(Array.from(decode(gpu.download(pc, m * n * 4), 'f32'))).toEqual(Array.from(decode(gpu.download(eager, m * n * 4), 'f32')));
    gpu.destroyGraphExec(exec);
    gpu.destroyStream(stream);
    for (const p of [pa, pb, ps, pc, eager]) gpu.free(p);
  });
});

describeGpu('gemm with f16 operands (cuBLASLt)', () => {
  const backend = useBackend();
  it('is the product of the stored values within f32 accumulation and one output rounding', () => {
    const gpu = backend();
    const rng = new SeededRandom(21);
    const m = 33, n = 70, k = 257;
    const a = stored(rng.normals(m * k), 'f16'), b = stored(rng.normals(n * k), 'f16');
    for (const out of ['f32', 'f16'] as const) {
      const pa = put(gpu, toF16(a)), pb = put(gpu, toF16(b)), pc = gpu.alloc(m * n * 4);
      gpu.gemm({ m, n, k, a: pa, b: pb, c: pc, transB: true, dtype: 'f16', outDtype: out });
      gpu.synchronize();
      const got = decode(gpu.download(pc, m * n * bytesOf(out)), out);
      for (const p of [pa, pb, pc]) gpu.free(p);
      let worst = 0;
      for (let i = 0; i < m; i++) {
        for (let j = 0; j < n; j++) {
          let s = 0, mag = 0;
          for (let q = 0; q < k; q++) {
            s += a[i * k + q]! * b[j * k + q]!;
            mag += Math.abs(a[i * k + q]! * b[j * k + q]!);
          }
          const bound = 1e-5 * mag + (out === 'f16' ? 2 ** -11 * Math.abs(s) : 0) + 1e-30;
          worst = Math.max(worst, Math.abs(got[i * n + j]! - s) / bound);
        }
      }
      expect(worst, out).toBeLessThanOrEqual(1);
    }
  });
});

describeGpu('convert', () => {
  const backend = useBackend();
  it('rounds every value once to nearest even, for every pair of float types', () => {
    const gpu = backend();
    const rng = new SeededRandom(5);
    const values = Float32Array.from(rng.normals(100_003), (v, i) => (i % 97 === 0 ? v * 70000 : i % 89 === 0 ? v * 1e-6 : v));
    for (const from of ['f32', 'bf16', 'f16'] as const) {
      const seen = stored(values, from);
      for (const to of ['f32', 'bf16', 'f16'] as const) {
        const src = put(gpu, encode(values, from)), dst = gpu.alloc(values.length * 4);
        gpu.convert({ src, srcDtype: from, dst, dstDtype: to, count: values.length });
        gpu.synchronize();
        const got = gpu.download(dst, values.length * bytesOf(to));
        gpu.free(src);
        gpu.free(dst);
        const want = to === 'f32' ? seen : to === 'bf16' ? Uint16Array.from(seen, (v) => f32ToBf16Bits(v)) : Uint16Array.from(seen, (v) => f32ToF16Bits(v));
        expect(Buffer.from(got).equals(Buffer.from(asBytes(want))), `${from}→${to}`).toBe(true);
      }
    }
  });
});
