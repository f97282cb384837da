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

// Scratch buffers reused across GEMMs: decoding a bf16 or FP8 weight into a fresh array on every
// call made the garbage collector the CPU device's largest cost.
let rowsScratch = new Float64Array(0);

function f64Scratch(count: number): Float64Array {
  if (rowsScratch.length < count) rowsScratch = new Float64Array(Math.max(count, 2 * rowsScratch.length));
  return rowsScratch;
}

/** A growable f32 scratch with a u32 view of the same bytes (bf16 decodes by shifting into the high half). */
class Scratch {
  f32 = new Float32Array(0);
  u32 = new Uint32Array(0);

  get(count: number): this {
    if (this.f32.length < count) {
      this.f32 = new Float32Array(Math.max(count, 2 * this.f32.length));
      this.u32 = new Uint32Array(this.f32.buffer);
    }
    return this;
  }
}

const aScratch = new Scratch();
const bScratch = new Scratch();

/** `count` 16-bit floats from bits[from..] into out.f32[at..]. */
function decode16(bits: Uint16Array, from: number, count: number, dtype: 'bf16' | 'f16', out: Scratch, at: number): void {
  if (dtype === 'f16') {
    const f = out.f32;
    for (let i = 0; i < count; i++) f[at + i] = f16BitsToF32(bits[from + i]!);
    return;
  }
  const u = out.u32;
  for (let i = 0; i < count; i++) u[at + i] = bits[from + i]! << 16;
}

/** Every 16-bit pattern's f32 value, one table per type, built on first use. */
const valueTables = new Map<'bf16' | 'f16', Float32Array>();

function valueTable(dtype: 'bf16' | 'f16'): Float32Array {
  let t = valueTables.get(dtype);
  if (!t) {
    t = new Float32Array(65536);
    const u = new Uint32Array(t.buffer);
    for (let b = 0; b < 65536; b++) {
      if (dtype === 'bf16') u[b] = b << 16;
      else t[b] = f16BitsToF32(b);
    }
    valueTables.set(dtype, t);
  }
  return t;
}

/** Rows of A below which a 16-bit B is read through the value table instead of decoded per chunk. */
const TABLE_ROWS = 8;

/** Stored rows of B decoded per call: few enough that the scratch stays small beside the weights. */
const B_CHUNK_ELEMENTS = 1 << 18;

/** Stored rows of B as f32: the array, and the offset and leading dimension to index it with. */
interface BRows { readonly data: Float32Array; readonly at: number; readonly ld: number }

/**
 * B as the GEMM reads it, some stored rows at a time: the device view itself for f32, decoded into
 * scratch for bf16, f16 and FP8 (code value × its block's scale).
 */
class StoredB {
  readonly #f32?: Float32Array;
  /** A 16-bit B's stored bits (undefined for f32 and FP8). */
  readonly bits?: Uint16Array;
  readonly #codes?: Uint8Array;
  readonly #scales?: Float32Array;
  readonly #cols: number;
  readonly #dtype: FloatDtype;
  readonly ld: number;
  /** Stored rows per `rows` call. */
  readonly chunk: number;

  constructor(arena: MemoryArena, call: string, p: GemmPlan, count: number) {
    this.#cols = p.transB ? p.k : p.n;
    this.#dtype = p.dtype;
    this.ld = p.ldb;
    const storedRows = p.transB ? p.n : p.k;
    if (p.fp8) {
      this.#codes = arena.typed(`${call} (B)`, p.b, count, Uint8Array);
      this.#scales = arena.typed(`${call} (B scales)`, p.bScales, Math.ceil(p.n / FP8_BLOCK) * Math.ceil(p.k / FP8_BLOCK), Float32Array);
    } else if (p.dtype === 'f32') {
      this.#f32 = arena.typed(`${call} (B)`, p.b, count, Float32Array);
    } else {
      this.bits = arena.typed(`${call} (B)`, p.b, count, Uint16Array);
    }
    this.chunk = this.#f32 ? storedRows : Math.max(4, 4 * Math.floor(B_CHUNK_ELEMENTS / (4 * Math.max(1, this.#cols))));
  }

  rows(r0: number, count: number): BRows {
    if (this.#f32) return { data: this.#f32, at: r0 * this.ld, ld: this.ld };
    const cols = this.#cols;
    const out = bScratch.get(count * cols);
    if (this.#codes) {
      // FP8 is packed n×k (ld = k): stored row r is output column r.
      const codes = this.#codes;
      const scales = this.#scales!;
      const f = out.f32;
      const bk = Math.ceil(cols / FP8_BLOCK);
      for (let r = 0; r < count; r++) {
        const scaleRow = Math.floor((r0 + r) / FP8_BLOCK) * bk;
        const from = (r0 + r) * cols;
        for (let q0 = 0; q0 < cols; q0 += FP8_BLOCK) {
          const scale = scales[scaleRow + q0 / FP8_BLOCK]!;
          const end = Math.min(cols, q0 + FP8_BLOCK);
          for (let q = q0; q < end; q++) f[r * cols + q] = E4M3_VALUES[codes[from + q]!]! * scale;
        }
      }
    } else {
      const dtype = this.#dtype as 'bf16' | 'f16';
      if (this.ld === cols) decode16(this.bits!, r0 * cols, count * cols, dtype, out, 0);
      else for (let r = 0; r < count; r++) decode16(this.bits!, (r0 + r) * this.ld, cols, dtype, out, r * cols);
    }
    return { data: out.f32, at: 0, ld: cols };
  }
}

/**
 * op(A) as m contiguous rows of k doubles, gathered before C is written (so C may overlap A).
 */
function gatherA(arena: MemoryArena, call: string, p: GemmPlan, count: number): Float64Array {
  const { m, k, lda } = p;
  const rows = f64Scratch(m * k);
  let f32: Float32Array;
  if (p.dtype === 'f32') {
    f32 = arena.typed(`${call} (A)`, p.a, count, Float32Array);
  } else {
    decode16(arena.typed(`${call} (A)`, p.a, count, Uint16Array), 0, count, p.dtype, aScratch.get(count), 0);
    f32 = aScratch.f32;
  }
  for (let i = 0; i < m; i++) {
    if (p.transA) for (let q = 0; q < k; q++) rows[i * k + q] = f32[q * lda + i]!;
    else for (let q = 0, o = i * lda; q < k; q++) rows[i * k + q] = f32[o + q]!;
  }
  return rows;
}

/** C = alpha·op(A)·op(B) + beta·C, accumulating in doubles; with beta = 0, C is not read. */
export function runGemm(arena: MemoryArena, call: string, p: GemmPlan): void {
  const { m, n, k, ldc, alpha, beta } = p;
  if (m === 0 || n === 0) return;
  const s = spans(p);
  const A = k > 0 ? gatherA(arena, call, p, s.a) : new Float64Array(0);
  const B = k > 0 ? new StoredB(arena, call, p, s.b) : undefined;
  const outF32 = p.outDtype === 'f32';
  const C32 = outF32 ? arena.typed(`${call} (C)`, p.c, s.c, Float32Array) : undefined;
  const C16 = outF32 ? undefined : arena.typed(`${call} (C)`, p.c, s.c, Uint16Array);
  const encode = p.outDtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
  const decodeOut = p.outDtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
  const store = (i: number, j: number, sum: number): void => {
    const o = i * ldc + j;
    if (C32) C32[o] = beta === 0 ? alpha * sum : alpha * sum + beta * C32[o]!;
    else C16![o] = encode(beta === 0 ? alpha * sum : alpha * sum + beta * decodeOut(C16![o]!));
  };
  if (!B) {
    for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) store(i, j, 0);
    return;
  }
  if (p.transB && B.bits && m < TABLE_ROWS) {
    // Few rows (decode steps): each B element is used m times, so looking its value up in a table
    // costs less than decoding the weight into scratch first.
    const table = valueTable(p.dtype as 'bf16' | 'f16');
    const bits = B.bits;
    const ld = B.ld;
    let j = 0;
    for (; j + 4 <= n; j += 4) {
      const o0 = j * ld, o1 = o0 + ld, o2 = o1 + ld, o3 = o2 + ld;
      for (let i = 0; i < m; i++) {
        let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (let q = 0, a = i * k; q < k; q++) {
          const r = A[a + q]!;
          s0 += r * table[bits[o0 + q]!]!;
          s1 += r * table[bits[o1 + q]!]!;
          s2 += r * table[bits[o2 + q]!]!;
          s3 += r * table[bits[o3 + q]!]!;
        }
        store(i, j, s0);
        store(i, j + 1, s1);
        store(i, j + 2, s2);
        store(i, j + 3, s3);
      }
    }
    for (; j < n; j++) {
      for (let i = 0; i < m; i++) {
        let sum = 0;
        for (let q = 0, a = i * k, o = j * ld; q < k; q++) sum += A[a + q]! * table[bits[o + q]!]!;
        store(i, j, sum);
      }
    }
    return;
  }
  if (p.transB) {
    // B stored n×k: each output is a dot product of two contiguous rows. Four B rows at a time,
    // decoded once for every row of A, share each load of A and break the add dependency chain.
    for (let c0 = 0; c0 < n; c0 += B.chunk) {
      const cn = Math.min(B.chunk, n - c0);
      const { data: b, at, ld } = B.rows(c0, cn);
      let c = 0;
      for (; c + 4 <= cn; c += 4) {
        const o0 = at + c * ld, o1 = o0 + ld, o2 = o1 + ld, o3 = o2 + ld;
        for (let i = 0; i < m; i++) {
          let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
          for (let q = 0, a = i * k; q < k; q++) {
            const r = A[a + q]!;
            s0 += r * b[o0 + q]!;
            s1 += r * b[o1 + q]!;
            s2 += r * b[o2 + q]!;
            s3 += r * b[o3 + q]!;
          }
          store(i, c0 + c, s0);
          store(i, c0 + c + 1, s1);
          store(i, c0 + c + 2, s2);
          store(i, c0 + c + 3, s3);
        }
      }
      for (; c < cn; c++) {
        const o = at + c * ld;
        for (let i = 0; i < m; i++) {
          let sum = 0;
          for (let q = 0, a = i * k; q < k; q++) sum += A[a + q]! * b[o + q]!;
          store(i, c0 + c, sum);
        }
      }
    }
    return;
  }
  // B stored k×n: i-k-j order, streaming through rows of B and accumulating a whole output row.
  const { data: b, at, ld } = B.rows(0, k);
  const acc = new Float64Array(n);
  for (let i = 0; i < m; i++) {
    acc.fill(0);
    for (let q = 0; q < k; q++) {
      const av = A[i * k + q]!;
      for (let j = 0, o = at + q * ld; j < n; j++) acc[j]! += av * b[o + j]!;
    }
    for (let j = 0; j < n; j++) store(i, j, acc[j]!);
  }
}
