import { bf16BitsToF32, fromBf16, InvalidArgumentError, SeededRandom, toBf16, type GemmArgs } from '@metrale/core';
import { afterEach, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/index.js';
import { asF32, expectDeviceError } from './helpers.js';

/** A row-major matrix as the test stores it: rows × cols within rows × ld, padding random too. */
interface Stored { rows: number; cols: number; ld: number; data: Float32Array }

function stored(rng: SeededRandom, rows: number, cols: number, ld = cols): Stored {
  return { rows, cols, ld, data: rng.normals(Math.max(1, rows * ld)) };
}

const at = (s: Stored, r: number, c: number): number => s.data[r * s.ld + c]!;

/** float64 reference of C = alpha·op(A)·op(B) + beta·C, from the values the device saw. */
function reference(m: number, n: number, k: number, A: Stored, B: Stored, C: Stored, tA: boolean, tB: boolean, alpha: number, beta: number): Float64Array {
  const out = new Float64Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let p = 0; p < k; p++) s += (tA ? at(A, p, i) : at(A, i, p)) * (tB ? at(B, j, p) : at(B, p, j));
      out[i * n + j] = alpha * s + (beta === 0 ? 0 : beta * at(C, i, j));
    }
  }
  return out;
}

/** max |got − want| / max |want|: a relative error that small entries cannot inflate. */
function relError(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < want.length; i++) {
    num = Math.max(num, Math.abs(got[i]! - want[i]!));
    den = Math.max(den, Math.abs(want[i]!));
  }
  return num / den;
}

describe('gemm', () => {
  let gpu: CpuBackend;
  afterEach(() => gpu.dispose());

  function upload(values: Float32Array, dtype: 'f32' | 'bf16'): bigint {
    const data = dtype === 'f32' ? values : toBf16(values);
    const p = gpu.alloc(data.byteLength);
    gpu.upload(p, data);
    return p;
  }

  /** Rounds stored values through bf16 so the reference sees what the device sees. */
  const asBf16 = (s: Stored): Stored => ({ ...s, data: fromBf16(toBf16(s.data)) });

  function run(opts: { m: number; n: number; k: number; tA: boolean; tB: boolean; pad?: number; alpha?: number; beta?: number; dtype: 'f32' | 'bf16'; outDtype: 'f32' | 'bf16' }): number {
    const { m, n, k, tA, tB, dtype, outDtype } = opts;
    const pad = opts.pad ?? 0;
    const rng = new SeededRandom(m * 1000 + n * 10 + k + (tA ? 7 : 0) + (tB ? 13 : 0) + pad);
    let A = tA ? stored(rng, k, m, m + pad) : stored(rng, m, k, k + pad);
    let B = tB ? stored(rng, n, k, k + pad) : stored(rng, k, n, n + pad);
    let C = stored(rng, m, n, n + pad);
    if (dtype === 'bf16') [A, B] = [asBf16(A), asBf16(B)];
    if (outDtype === 'bf16') C = asBf16(C);
    const a = upload(A.data, dtype);
    const b = upload(B.data, dtype);
    const c = upload(C.data, outDtype);
    const args: GemmArgs = { m, n, k, a, b, c, transA: tA, transB: tB, dtype, outDtype, alpha: opts.alpha, beta: opts.beta };
    if (pad) Object.assign(args, { lda: A.ld, ldb: B.ld, ldc: C.ld });
    gpu.gemm(args);
    const raw = gpu.download(c, C.data.length * (outDtype === 'f32' ? 4 : 2));
    const all = outDtype === 'f32' ? asF32(raw) : fromBf16(new Uint16Array(raw.buffer));
    const got = new Float64Array(m * n);
    for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) got[i * n + j] = all[i * C.ld + j]!;
    // Padding columns of C are untouched.
    for (let i = 0; i < m; i++) for (let j = n; j < C.ld; j++) expect(all[i * C.ld + j]).toBe(C.data[i * C.ld + j]);
    return relError(got, reference(m, n, k, A, B, C, tA, tB, opts.alpha ?? 1, opts.beta ?? 0));
  }

  const combos = [[false, false], [false, true], [true, false], [true, true]] as const;

  it.each(combos)('f32, transA=%s transB=%s, packed', (tA, tB) => {
    gpu = new CpuBackend();
    expect(run({ m: 13, n: 17, k: 29, tA, tB, dtype: 'f32', outDtype: 'f32' })).toBeLessThan(1e-6);
  });

  it.each(combos)('f32, transA=%s transB=%s, padded leading dims, alpha and beta', (tA, tB) => {
    gpu = new CpuBackend();
    expect(run({ m: 9, n: 11, k: 21, tA, tB, pad: 5, alpha: 0.75, beta: -1.25, dtype: 'f32', outDtype: 'f32' })).toBeLessThan(1e-6);
  });

  it.each(combos)('bf16 in, bf16 out, transA=%s transB=%s, alpha and beta', (tA, tB) => {
    gpu = new CpuBackend();
    // One bf16 rounding of the output: relative error ≤ 2⁻⁸ of the largest entry.
    expect(run({ m: 7, n: 12, k: 40, tA, tB, pad: 3, alpha: 1.5, beta: 0.5, dtype: 'bf16', outDtype: 'bf16' })).toBeLessThan(2 ** -8);
  });

  // Few rows read a 16-bit B through a value table, more rows decode it in chunks: both paths.
  it.each([3, 7, 8, 21])('bf16 in, bf16 out, %i rows, padded, both B layouts', (m) => {
    gpu = new CpuBackend();
    for (const tB of [false, true]) expect(run({ m, n: 10, k: 33, tA: false, tB, pad: 2, beta: 0.25, dtype: 'bf16', outDtype: 'bf16' })).toBeLessThan(2 ** -8);
  });

  it('decodes a wide bf16 B in several chunks of rows', () => {
    gpu = new CpuBackend();
    expect(run({ m: 9, n: 30, k: 20_000, tA: false, tB: true, dtype: 'bf16', outDtype: 'f32' })).toBeLessThan(1e-6);
  });

  it('bf16 in, f32 out is exact up to f32 accumulation', () => {
    gpu = new CpuBackend();
    expect(run({ m: 8, n: 8, k: 64, tA: false, tB: true, dtype: 'bf16', outDtype: 'f32' })).toBeLessThan(1e-6);
  });

  it('rounds bf16 output to nearest even', () => {
    gpu = new CpuBackend();
    // 1 + 2⁻⁸ is halfway between bf16 neighbours 1 and 1 + 2⁻⁷: ties go to the even one, 1.
    const a = upload(new Float32Array([1 + 2 ** -8, 1 + 3 * 2 ** -8]), 'f32');
    const b = upload(new Float32Array([1]), 'f32');
    const c = gpu.alloc(4);
    gpu.gemm({ m: 2, n: 1, k: 1, a, b, c, dtype: 'f32', outDtype: 'bf16' });
    const bits = new Uint16Array(gpu.download(c, 4).buffer);
    expect(bf16BitsToF32(bits[0]!)).toBe(1);
    expect(bf16BitsToF32(bits[1]!)).toBe(1 + 2 ** -6);
  });

  it('does not read C when beta is 0 (poisoned C stays out of the result)', () => {
    gpu = new CpuBackend();
    const a = upload(new Float32Array([2]), 'f32');
    const b = upload(new Float32Array([3]), 'f32');
    const c = gpu.alloc(4); // 0xff bytes: NaN
    gpu.gemm({ m: 1, n: 1, k: 1, a, b, c, dtype: 'f32' });
    expect(asF32(gpu.download(c, 4))[0]).toBe(6);
    gpu.gemm({ m: 1, n: 1, k: 0, a, b, c, dtype: 'f32', beta: 0.5 });
    expect(asF32(gpu.download(c, 4))[0]).toBe(3);
  });

  it('validates shapes, leading dimensions and memory', () => {
    gpu = new CpuBackend();
    const a = gpu.alloc(4 * 6);
    const b = gpu.alloc(4 * 6);
    const c = gpu.alloc(4 * 4);
    const base = { m: 2, n: 2, k: 3, a, b, c, dtype: 'f32' } as const;
    gpu.gemm(base);
    expect(() => gpu.gemm({ ...base, lda: 2 })).toThrow(/lda = 2 is less than the 3 columns/);
    expect(() => gpu.gemm({ ...base, m: -1 })).toThrow(InvalidArgumentError);
    expect(() => gpu.gemm({ ...base, dtype: 'f8' as never })).toThrow(/dtype/);
    expectDeviceError(() => gpu.gemm({ ...base, k: 4 }), [/gemm \(A\)/, /past the end/]);
    expectDeviceError(() => gpu.gemm({ ...base, ldc: 3 }), [/gemm \(C\)/, /past the end/]);
    expect(gpu.stats().gemmsLaunched).toBe(1);
  });

  it('is captured with its arguments frozen and replayed against current memory', () => {
    gpu = new CpuBackend();
    const rng = new SeededRandom(40);
    const s = gpu.createStream();
    const a = gpu.alloc(4 * 4);
    const b = gpu.alloc(4 * 4);
    const c = gpu.alloc(4 * 4);
    const args = { m: 2, n: 2, k: 2, a, b, c, dtype: 'f32' as const, alpha: 2, stream: s };
    gpu.beginCapture(s);
    gpu.gemm(args);
    args.alpha = 100;
    const exec = gpu.instantiate(gpu.endCapture(s));
    const A = rng.normals(4);
    const B = rng.normals(4);
    gpu.upload(a, A);
    gpu.upload(b, B);
    gpu.launchGraph(exec, s);
    const got = asF32(gpu.download(c, 16));
    for (let i = 0; i < 2; i++) {
      for (let j = 0; j < 2; j++) {
        expect(got[i * 2 + j]).toBeCloseTo(2 * (A[i * 2]! * B[j]! + A[i * 2 + 1]! * B[2 + j]!), 5);
      }
    }
    expect(gpu.stats()).toMatchObject({ gemmsLaunched: 0, nodesReplayed: 1 });
  });

  it('runs a model-sized f32 GEMM in reasonable time', () => {
    gpu = new CpuBackend();
    const rng = new SeededRandom(41);
    const [m, n, k] = [64, 512, 512];
    const a = upload(rng.normals(m * k), 'f32');
    const b = upload(rng.normals(n * k), 'f32');
    const c = gpu.alloc(4 * m * n);
    const t0 = performance.now();
    gpu.gemm({ m, n, k, a, b, c, dtype: 'f32', transB: true });
    gpu.gemm({ m, n, k, a, b, c, dtype: 'f32' });
    expect(performance.now() - t0).toBeLessThan(5000);
  });
});
