// The reduced-precision GEMMs and conversions of the data path: f16 operands, block-FP8 B
// (the product with the dequantized weight), and `convert` between float types, each against a
// float64 reference of the stored values.
import {
  InvalidArgumentError, SeededRandom, bf16BitsToF32, blocksOf, dequantizeFp8, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, fromBf16, quantizeFp8, toBf16, toF16,
  type FloatDtype,
} from '@metrale/core';
import { afterEach, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/index.js';

let gpu: CpuBackend;
afterEach(() => gpu.dispose());

function put(data: ArrayBufferView): bigint {
  const p = gpu.alloc(Math.max(4, data.byteLength));
  gpu.upload(p, data);
  return p;
}

const encode = (v: Float32Array, d: FloatDtype): ArrayBufferView => (d === 'f32' ? v : d === 'bf16' ? toBf16(v) : toF16(v));
const decode = (bytes: Uint8Array, d: FloatDtype): Float32Array => {
  const copy = bytes.slice();
  if (d === 'f32') return new Float32Array(copy.buffer);
  const bits = new Uint16Array(copy.buffer);
  return Float32Array.from(bits, (b) => (d === 'bf16' ? bf16BitsToF32(b) : f16BitsToF32(b)));
};
const stored = (v: Float32Array, d: FloatDtype): Float32Array => decode(new Uint8Array((encode(v, d) as Uint8Array).buffer.slice(0)), d);

function product(a: Float32Array, b: Float32Array, m: number, n: number, k: number, lda = k): Float64Array {
  const out = new Float64Array(m * n);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) {
    let s = 0;
    for (let q = 0; q < k; q++) s += a[i * lda + q]! * b[j * k + q]!;
    out[i * n + j] = s;
  }
  return out;
}

function worstRel(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let num = 0, den = 0;
  for (let i = 0; i < want.length; i++) {
    num = Math.max(num, Math.abs(got[i]! - want[i]!));
    den = Math.max(den, Math.abs(want[i]!));
  }
  return num / den;
}

describe('gemm with f16 operands', () => {
  it('multiplies the stored f16 values, accumulating in f32 or better, into f32, bf16 or f16', () => {
    gpu = new CpuBackend();
    const rng = new SeededRandom(11);
    const m = 5, n = 7, k = 33;
    const a = stored(rng.normals(m * k), 'f16'), b = stored(rng.normals(n * k), 'f16');
    const want = product(a, b, m, n, k);
    for (const out of ['f32', 'bf16', 'f16'] as const) {
      const c = gpu.alloc(m * n * 4);
      gpu.gemm({ m, n, k, a: put(toF16(a)), b: put(toF16(b)), c, transB: true, dtype: 'f16', outDtype: out });
      const got = decode(gpu.download(c, m * n * (out === 'f32' ? 4 : 2)), out);
      expect(worstRel(got, want), out).toBeLessThan(out === 'f32' ? 1e-6 : out === 'f16' ? 1e-3 : 8e-3);
    }
  });
});

describe('gemm with a block-FP8 B', () => {
  function run(m: number, n: number, k: number, aDtype: 'bf16' | 'f16', outDtype: FloatDtype, lda = k, beta = 0): number {
    gpu = new CpuBackend();
    const rng = new SeededRandom(m * 100 + n + k);
    const w = rng.normals(n * k, 0.1);
    const { codes, scales } = quantizeFp8(w, n, k);
    const a = stored(rng.normals(m * lda), aDtype);
    const c0 = stored(rng.normals(m * n), outDtype);
    const c = put(encode(c0, outDtype));
    gpu.gemm({ m, n, k, a: put(encode(a, aDtype)), lda, b: put(codes), bDtype: 'f8e4m3', bScales: put(scales), c, transB: true, dtype: aDtype, outDtype, alpha: 0.5, beta });
    const dq = dequantizeFp8(codes, scales, n, k);
    const want = product(a, dq, m, n, k, lda).map((v, i) => 0.5 * v + beta * c0[i]!);
    return worstRel(decode(gpu.download(c, m * n * (outDtype === 'f32' ? 4 : 2)), outDtype), want);
  }

  it('is the product with the dequantized weight (partial blocks in n and k, f32 out)', () => {
    expect(run(3, 130, 200, 'bf16', 'f32')).toBeLessThan(1e-6);
    expect(run(70, 257, 129, 'f16', 'f32', 150, 1)).toBeLessThan(1e-6);
  });

  it('rounds once into a bf16 or f16 C', () => {
    expect(run(4, 64, 96, 'bf16', 'bf16')).toBeLessThan(8e-3);
    expect(run(4, 64, 96, 'bf16', 'f16')).toBeLessThan(1e-3);
  });

  it('refuses what the device kernels do not take', () => {
    gpu = new CpuBackend();
    const a = gpu.alloc(4096), b = gpu.alloc(4096), s = gpu.alloc(64), c = gpu.alloc(4096);
    const base = { m: 2, n: 8, k: 16, a, b, c, bDtype: 'f8e4m3' as const, bScales: s, transB: true, dtype: 'bf16' as const };
    expect(() => gpu.gemm({ ...base, bScales: undefined })).toThrow(/needs bScales/);
    expect(() => gpu.gemm({ ...base, transB: false })).toThrow(/stored n×k/);
    expect(() => gpu.gemm({ ...base, ldb: 20 })).toThrow(/packed/);
    expect(() => gpu.gemm({ ...base, dtype: 'f32' })).toThrow(InvalidArgumentError);
    // The scales must lie in memory: ⌈8/128⌉ × ⌈16/128⌉ f32.
    expect(blocksOf(8) * blocksOf(16)).toBe(1);
  });
});

describe('convert', () => {
  it('converts between every pair of float types, rounding to nearest even', () => {
    gpu = new CpuBackend();
    const rng = new SeededRandom(3);
    const values = Float32Array.from(rng.normals(37), (v, i) => (i === 5 ? 70000 : v * 10 ** (i % 5)));
    for (const from of ['f32', 'bf16', 'f16'] as const) {
      for (const to of ['f32', 'bf16', 'f16'] as const) {
        const src = put(encode(values, from));
        const dst = gpu.alloc(values.length * 4);
        gpu.convert({ src, srcDtype: from, dst, dstDtype: to, count: values.length });
        const got = decode(gpu.download(dst, values.length * (to === 'f32' ? 4 : 2)), to);
        const seen = stored(values, from);
        const want = Float32Array.from(seen, (v) => (to === 'f32' ? v : to === 'bf16' ? bf16BitsToF32(f32ToBf16Bits(v)) : f16BitsToF32(f32ToF16Bits(v))));
        expect(Array.from(got), `${from}→${to}`).toEqual(Array.from(want));
      }
    }
  });

  it('refuses overlapping ranges and unknown types; is recorded by a capture like a launch', () => {
    gpu = new CpuBackend();
    const p = gpu.alloc(64);
    expect(() => gpu.convert({ src: p, srcDtype: 'f32', dst: p + 8n, dstDtype: 'bf16', count: 4 })).toThrow(/overlap/);
    expect(() => gpu.convert({ src: p, srcDtype: 'f8' as never, dst: p + 32n, dstDtype: 'bf16', count: 4 })).toThrow(/srcDtype/);
    const q = gpu.alloc(16);
    gpu.upload(p, Float32Array.from([1, 2, 3, 4]));
    const stream = gpu.createStream();
    gpu.beginCapture(stream);
    gpu.convert({ src: p, srcDtype: 'f32', dst: q, dstDtype: 'bf16', count: 4, stream });
    const exec = gpu.instantiate(gpu.endCapture(stream));
    gpu.upload(p, Float32Array.from([5, 6, 7, 8]));
    gpu.launchGraph(exec, stream);
    gpu.synchronize(stream);
    expect(Array.from(fromBf16(new Uint16Array(gpu.download(q, 8).slice().buffer)))).toEqual([5, 6, 7, 8]);
  });
});
