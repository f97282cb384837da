// GemmArgs resolved and checked: defaults filled in, leading dimensions at least the row length,
// and the bytes each row-major operand spans (for the backend's range checks).
import { FP8_BLOCK, InvalidArgumentError, floatBytes, type GemmArgs } from '@metrale/core';

/** How the addon numbers element types (native/cublaslt.h GemmType); the same as FLOAT_DTYPE_CODE. */
export const GEMM_TYPE = { f32: 0, bf16: 1, f16: 2 } as const;

export interface ResolvedGemm {
  /** B is block-FP8 (E4M3 codes + f32 scales): the backend's own kernel, not cuBLASLt. */
  readonly fp8: boolean;
  readonly abType: number;
  readonly cType: number;
  readonly transA: boolean;
  readonly transB: boolean;
  readonly lda: number;
  readonly ldb: number;
  readonly ldc: number;
  readonly alpha: number;
  readonly beta: number;
  /** Bytes from each operand's pointer to the end of its last element. */
  readonly aBytes: number;
  readonly bBytes: number;
  readonly cBytes: number;
  /** FP8 B: bytes of its scales. */
  readonly scaleBytes: number;
}

/** Elements a row-major rows×cols matrix with leading dimension ld spans. */
const span = (rows: number, cols: number, ld: number): number => (rows === 0 || cols === 0 ? 0 : (rows - 1) * ld + cols);

export function resolveGemm(args: GemmArgs): ResolvedGemm {
  const { m, n, k } = args;
  for (const [name, v] of [['m', m], ['n', n], ['k', k]] as const) {
    if (!Number.isSafeInteger(v) || v < 0) throw new InvalidArgumentError(`gemm: ${name} must be a non-negative integer, got ${v}`);
  }
  const dtype = args.dtype;
  const outDtype = args.outDtype ?? dtype;
  if (!(dtype in GEMM_TYPE) || !(outDtype in GEMM_TYPE)) {
    throw new InvalidArgumentError(`gemm: dtype and outDtype must be 'f32', 'bf16' or 'f16', got ${String(dtype)} -> ${String(outDtype)}`);
  }
  const fp8 = args.bDtype !== undefined;
  if (fp8) {
    if (args.bDtype !== 'f8e4m3') throw new InvalidArgumentError(`gemm: bDtype must be 'f8e4m3' when given, got ${String(args.bDtype)}`);
    if (typeof args.bScales !== 'bigint' || args.bScales === 0n) throw new InvalidArgumentError('gemm: an f8e4m3 B needs bScales (f32 block scales)');
    if (args.transB !== true) throw new InvalidArgumentError('gemm: an f8e4m3 B must be stored n×k (transB)');
    if (args.ldb !== undefined && args.ldb !== k) throw new InvalidArgumentError(`gemm: an f8e4m3 B must be packed (ldb = k = ${k}), got ldb ${args.ldb}`);
    if (args.transA) throw new InvalidArgumentError('gemm: an f8e4m3 B takes a row-major A (no transA)');
    if (dtype === 'f32') throw new InvalidArgumentError('gemm: an f8e4m3 B multiplies bf16 or f16 A, not f32');
  } else if (dtype === 'f32' && outDtype !== 'f32') {
    throw new InvalidArgumentError(`gemm: cuBLASLt has no f32 x f32 -> ${outDtype} GEMM; use outDtype 'f32'`);
  }
  const transA = args.transA ?? false, transB = args.transB ?? false;
  // Row-major storage: A is m×k (k×m when transposed), B is k×n (n×k when transposed), C is m×n.
  const aRows = transA ? k : m, aCols = transA ? m : k;
  const bRows = transB ? n : k, bCols = transB ? k : n;
  const lda = args.lda ?? Math.max(1, aCols), ldb = args.ldb ?? Math.max(1, bCols), ldc = args.ldc ?? Math.max(1, n);
  for (const [name, ld, cols] of [['lda', lda, aCols], ['ldb', ldb, bCols], ['ldc', ldc, n]] as const) {
    if (!Number.isSafeInteger(ld) || ld < Math.max(1, cols)) {
      throw new InvalidArgumentError(`gemm: ${name} = ${ld} is less than the ${cols} columns of the stored matrix`);
    }
  }
  for (const p of ['a', 'b', 'c'] as const) {
    if (typeof args[p] !== 'bigint') throw new InvalidArgumentError(`gemm: pointer ${p} must be a bigint, got ${String(args[p])}`);
  }
  const inBytes = floatBytes(dtype), outBytes = floatBytes(outDtype);
  return {
    fp8,
    abType: GEMM_TYPE[dtype],
    cType: GEMM_TYPE[outDtype],
    transA,
    transB,
    lda,
    ldb,
    ldc,
    alpha: args.alpha ?? 1,
    beta: args.beta ?? 0,
    aBytes: span(aRows, aCols, lda) * inBytes,
    bBytes: span(bRows, bCols, ldb) * (fp8 ? 1 : inBytes),
    cBytes: span(m, n, ldc) * outBytes,
    scaleBytes: fp8 ? 4 * Math.ceil(n / FP8_BLOCK) * Math.ceil(k / FP8_BLOCK) : 0,
  };
}
