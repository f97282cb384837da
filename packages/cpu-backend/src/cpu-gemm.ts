import {
  E4M3_VALUES, FP8_BLOCK, InvalidArgumentError, bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, floatBytes,
  type DevicePtr, type FloatDtype, type GemmArgs,
} from '@metrale/core';
import type { MemoryArena } from './memory-arena.js';

/** A validated GEMM with every default filled in; frozen when captured. */
export interface GemmPlan {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly a: DevicePtr;
  readonly b: DevicePtr;
  readonly c: DevicePtr;
  readonly transA: boolean;
  readonly transB: boolean;
  readonly lda: number;
  readonly ldb: number;
  readonly ldc: number;
  readonly dtype: FloatDtype;
  readonly outDtype: FloatDtype;
  /** B as FP8 E4M3 codes with f32 [⌈n/128⌉][⌈k/128⌉] block scales at `bScales`. */
  readonly fp8: boolean;
  readonly bScales: DevicePtr;
  readonly alpha: number;
  readonly beta: number;
}

const DTYPES = new Set(['f32', 'bf16', 'f16']);

function dim(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new InvalidArgumentError(`gemm: ${name} must be a non-negative integer, got ${String(v)}`);
  return v;
}

/** Elements a row-major `rows × cols` matrix with leading dimension `ld` spans. */
const span = (rows: number, cols: number, ld: number): number => (rows === 0 || cols === 0 ? 0 : (rows - 1) * ld + cols);

/** Validates a GEMM's shape, types and leading dimensions (not its memory). */
export function planGemm(args: GemmArgs): GemmPlan {
  const m = dim('m', args.m);
  const n = dim('n', args.n);
  const k = dim('k', args.k);
  const transA = args.transA ?? false;
  const transB = args.transB ?? false;
  if (typeof transA !== 'boolean' || typeof transB !== 'boolean') throw new InvalidArgumentError('gemm: transA and transB must be booleans');
  const dtype = args.dtype;
  const outDtype = args.outDtype ?? dtype;
  if (!DTYPES.has(dtype)) throw new InvalidArgumentError(`gemm: dtype must be 'f32', 'bf16' or 'f16', got ${String(dtype)}`);
  if (!DTYPES.has(outDtype)) throw new InvalidArgumentError(`gemm: outDtype must be 'f32', 'bf16' or 'f16', got ${String(outDtype)}`);
  const fp8 = args.bDtype !== undefined;
  if (fp8) {
    if (args.bDtype !== 'f8e4m3') throw new InvalidArgumentError(`gemm: bDtype must be 'f8e4m3' when given, got ${String(args.bDtype)}`);
    if (typeof args.bScales !== 'bigint' || args.bScales === 0n) throw new InvalidArgumentError('gemm: an f8e4m3 B needs bScales (f32 block scales)');
    if (args.transB !== true) throw new InvalidArgumentError('gemm: an f8e4m3 B must be stored n×k (transB)');
    if (args.ldb !== undefined && args.ldb !== args.k) throw new InvalidArgumentError(`gemm: an f8e4m3 B must be packed (ldb = k = ${args.k}), got ldb ${args.ldb}`);
    if (dtype === 'f32') throw new InvalidArgumentError("gemm: an f8e4m3 B multiplies bf16 or f16 A, not f32");
  }
  for (const p of ['a', 'b', 'c'] as const) {
    if (typeof args[p] !== 'bigint') throw new InvalidArgumentError(`gemm: pointer ${p} must be a bigint, got ${String(args[p])}`);
  }
  // Stored shapes: A is m×k (k×m transposed), B is k×n (n×k transposed), C is m×n.
  const aCols = transA ? m : k;
  const bCols = transB ? k : n;
  const ld = (name: string, given: number | undefined, cols: number): number => {
    const v = dim(name, given ?? Math.max(1, cols));
    if (v < Math.max(1, cols)) throw new InvalidArgumentError(`gemm: ${name} = ${v} is less than the ${cols} columns of the stored matrix`);
    return v;
  };
  const alpha = args.alpha ?? 1;
  const beta = args.beta ?? 0;
  if (typeof alpha !== 'number' || typeof beta !== 'number') throw new InvalidArgumentError('gemm: alpha and beta must be numbers');
  return Object.freeze({
    m, n, k, a: args.a, b: args.b, c: args.c, transA, transB,
    lda: ld('lda', args.lda, aCols), ldb: ld('ldb', args.ldb, bCols), ldc: ld('ldc', args.ldc, n),
    dtype, outDtype, fp8, bScales: fp8 ? args.bScales! : 0n, alpha, beta,
  });
}

interface Spans { readonly a: number; readonly b: number; readonly c: number }

function spans(p: GemmPlan): Spans {
  return {
    a: span(p.transA ? p.k : p.m, p.transA ? p.m : p.k, p.lda),
    b: span(p.transB ? p.n : p.k, p.transB ? p.k : p.n, p.ldb),
    c: span(p.m, p.n, p.ldc),
  };
}

/** Checks, without running, that A, B and C lie in live allocations (at capture time). */
export function checkGemmMemory(arena: MemoryArena, call: string, p: GemmPlan): void {
  if (p.m === 0 || p.n === 0) return;
  const s = spans(p);
  if (p.k > 0) {
    arena.check(`${call} (A)`, p.a, s.a * floatBytes(p.dtype));
    arena.check(`${call} (B)`, p.b, s.b * (p.fp8 ? 1 : floatBytes(p.dtype)));
    if (p.fp8) arena.check(`${call} (B scales)`, p.bScales, 4 * Math.ceil(p.n / FP8_BLOCK) * Math.ceil(p.k / FP8_BLOCK));
  }
  arena.check(`${call} (C)`, p.c, s.c * floatBytes(p.outDtype));
}

/** f32 values of a matrix: the device view itself for f32, a decoded copy for bf16 and f16. */
function readMatrix(arena: MemoryArena, call: string, ptr: DevicePtr, count: number, dtype: FloatDtype): Float32Array {
  if (dtype === 'f32') return arena.typed(call, ptr, count, Float32Array);
  const bits = arena.typed(call, ptr, count, Uint16Array);
  const out = new Float32Array(count);
  if (dtype === 'f16') {
    for (let i = 0; i < count; i++) out[i] = f16BitsToF32(bits[i]!);
    return out;
  }
  const words = new Uint32Array(out.buffer);
  for (let i = 0; i < count; i++) words[i] = bits[i]! << 16;
  return out;
}

/** A packed n×k FP8 B times its block scales, as f32: the matrix the product is defined with. */
function readFp8Matrix(arena: MemoryArena, call: string, p: GemmPlan): Float32Array {
  const { n, k } = p;
  const codes = arena.typed(`${call} (B)`, p.b, n * k, Uint8Array);
  const bk = Math.ceil(k / FP8_BLOCK);
  const scales = arena.typed(`${call} (B scales)`, p.bScales, Math.ceil(n / FP8_BLOCK) * bk, Float32Array);
  const out = new Float32Array(n * k);
  for (let j = 0; j < n; j++) {
    const row = Math.floor(j / FP8_BLOCK) * bk;
    for (let q = 0; q < k; q++) out[j * k + q] = E4M3_VALUES[codes[j * k + q]!]! * scales[row + Math.floor(q / FP8_BLOCK)]!;
  }
  return out;
}

/** C = alpha·op(A)·op(B) + beta·C, accumulating in doubles; with beta = 0, C is not read. */
export function runGemm(arena: MemoryArena, call: string, p: GemmPlan): void {
  const { m, n, k, lda, ldb, ldc, alpha, beta } = p;
  if (m === 0 || n === 0) return;
  const s = spans(p);
  const A = k > 0 ? readMatrix(arena, `${call} (A)`, p.a, s.a, p.dtype) : new Float32Array(0);
  const B = k === 0 ? new Float32Array(0) : p.fp8 ? readFp8Matrix(arena, call, p) : readMatrix(arena, `${call} (B)`, p.b, s.b, p.dtype);
  const outF32 = p.outDtype === 'f32';
  const C32 = outF32 ? arena.typed(`${call} (C)`, p.c, s.c, Float32Array) : undefined;
  const C16 = outF32 ? undefined : arena.typed(`${call} (C)`, p.c, s.c, Uint16Array);
  const encode = p.outDtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
  const decodeOut = p.outDtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
  const row = new Float64Array(k);
  const acc = new Float64Array(n);
  for (let i = 0; i < m; i++) {
    // Row i of op(A), gathered once so both loop orders below read it contiguously.
    if (p.transA) for (let q = 0; q < k; q++) row[q] = A[q * lda + i]!;
    else for (let q = 0, o = i * lda; q < k; q++) row[q] = A[o + q]!;
    if (p.transB) {
      // B stored n×k: each output is a dot product of two contiguous rows. Four at a time share
      // each load of row[q] and break the add dependency chain (about twice as fast in V8).
      let j = 0;
      for (; j + 4 <= n; j += 4) {
        let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        const o0 = j * ldb, o1 = o0 + ldb, o2 = o1 + ldb, o3 = o2 + ldb;
        for (let q = 0; q < k; q++) {
          const r = row[q]!;
          s0 += r * B[o0 + q]!;
          s1 += r * B[o1 + q]!;
          s2 += r * B[o2 + q]!;
          s3 += r * B[o3 + q]!;
        }
        acc[j] = s0;
        acc[j + 1] = s1;
        acc[j + 2] = s2;
        acc[j + 3] = s3;
      }
      for (; j < n; j++) {
        let sum = 0;
        for (let q = 0, o = j * ldb; q < k; q++) sum += row[q]! * B[o + q]!;
        acc[j] = sum;
      }
    } else {
      // i-k-j order: stream through rows of B, accumulating a whole output row.
      acc.fill(0);
      for (let q = 0; q < k; q++) {
        const av = row[q]!;
        for (let j = 0, o = q * ldb; j < n; j++) acc[j]! += av * B[o + j]!;
      }
    }
    const o = i * ldc;
    if (C32) {
      for (let j = 0; j < n; j++) C32[o + j] = beta === 0 ? alpha * acc[j]! : alpha * acc[j]! + beta * C32[o + j]!;
    } else {
      for (let j = 0; j < n; j++) {
        let v = alpha * acc[j]!;
        if (beta !== 0) v += beta * decodeOut(C16![o + j]!);
        C16![o + j] = encode(v);
      }
    }
  }
}
