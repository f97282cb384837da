// The kernels the backend itself launches (kernels/convert.cu, kernels/gemm-fp8.cu): the element
// conversion of `convert` and the block-FP8 GEMMs of `gemm`. CUDA only: the CPU backend computes
// the same operations in its own gemm and convert.
import { defineKernel, defineKernelModule, type LaunchConfig, type Stream } from '@metrale/core';
import { GEMM_TYPE } from './gemm-args.js';

// '../dist/kernels/…' resolves to the package's dist/kernels both from src/ (tests) and from
// dist/index.js (the bundle), since both sit one level below the package root.
const convertModule = defineKernelModule('convert', new URL('../dist/kernels/convert.fatbin', import.meta.url));
const gemmFp8Module = defineKernelModule('gemm-fp8', new URL('../dist/kernels/gemm-fp8.fatbin', import.meta.url));

export const convertKernel = defineKernel({
  name: 'backend.convert',
  params: { src: 'ptr', srcCode: 'i32', dst: 'ptr', dstCode: 'i32', count: 'u64' },
  cuda: { module: convertModule, symbol: 'backend_convert' },
});

/** 4 warps of 8 element groups per CTA, at most 4 CTAs per multiprocessor's worth. */
export function convertLaunch(count: number, multiprocessors: number, stream: Stream): LaunchConfig {
  return { grid: Math.max(1, Math.min(Math.ceil(count / 256), 4 * multiprocessors)), block: 256, stream };
}

const GEMM_FP8_PARAMS = {
  a: 'ptr', aCode: 'i32', b: 'ptr', scales: 'ptr', c: 'ptr', cCode: 'i32',
  m: 'i32', n: 'i32', k: 'i32', lda: 'i32', ldc: 'i32', alpha: 'f32', beta: 'f32',
} as const;

/** Rows of A up to which the warp-per-column kernel runs (its registers hold one sum per row). */
export const GEMM_FP8_ROWS_MAX = 8;
/**
 * Rows of A up to which `backend_gemm_fp8_rows_wide` takes what the rows kernel's tensor-core
 * path cannot (m > 8), where 16-byte loads apply; past it, or without them, the tiled kernel.
 */
export const GEMM_FP8_ROWS_WIDE_MAX = 64;

export const gemmFp8RowsKernel = defineKernel({
  name: 'backend.gemm_fp8_rows',
  params: GEMM_FP8_PARAMS,
  cuda: { module: gemmFp8Module, symbol: 'backend_gemm_fp8_rows' },
});

export const gemmFp8RowsWideKernel = defineKernel({
  name: 'backend.gemm_fp8_rows_wide',
  params: GEMM_FP8_PARAMS,
  cuda: { module: gemmFp8Module, symbol: 'backend_gemm_fp8_rows_wide' },
});

export const gemmFp8TiledKernel = defineKernel({
  name: 'backend.gemm_fp8_tiled',
  params: GEMM_FP8_PARAMS,
  cuda: { module: gemmFp8Module, symbol: 'backend_gemm_fp8_tiled' },
});

/**
 * backend_gemm_fp8_rows and _rows_wide: a CTA per 16 output columns (the rows of its tensor-core
 * products), its warps splitting k: 8 warps, or 16 where the CTAs are fewer than two a
 * multiprocessor (narrow outputs: each CTA then keeps more of its weight bytes in flight). The
 * split depends on n only, so a row's sums are the same at any m. On the rows kernel's per-code
 * path (shapes that cannot take 16-byte loads) the same CTAs take every (grid's warps)-th column,
 * a warp each.
 */
export function gemmFp8RowsLaunch(n: number, multiprocessors: number, stream: Stream): LaunchConfig {
  const grid = Math.max(1, Math.ceil(n / 16));
  return { grid, block: grid < 2 * multiprocessors ? 512 : 256, stream };
}

/** Which block-FP8 GEMM kernel takes a product (`backend_gemm_fp8_*`). */
export type Fp8GemmKernel = 'rows' | 'rows-wide' | 'tiled';

/**
 * The kernel for m rows of A (`GemmArgs` resolved: A's `GEMM_TYPE` code, lda, and the A and B
 * pointers): the rows kernel up to 8 rows; up to GEMM_FP8_ROWS_WIDE_MAX its wide form where A is
 * 16-bit and A's rows and B take 16-byte loads (k a multiple of 16, lda of 8, both 16-byte
 * aligned: the kernels' `vector_loads`), so a row gets the bits the rows kernel gives it; else the
 * tiled kernel.
 */
export function fp8GemmKernel(m: number, k: number, lda: number, aCode: number, a: bigint, b: bigint): Fp8GemmKernel {
  if (m <= GEMM_FP8_ROWS_MAX) return 'rows';
  const vector = aCode !== GEMM_TYPE.f32 && k % 16 === 0 && lda % 8 === 0 && a % 16n === 0n && b % 16n === 0n;
  return vector && m <= GEMM_FP8_ROWS_WIDE_MAX ? 'rows-wide' : 'tiled';
}

/** backend_gemm_fp8_tiled: a CTA of 4 warps per 64 × 64 tile of C. */
export function gemmFp8TiledLaunch(m: number, n: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, Math.ceil(n / 64)), Math.max(1, Math.ceil(m / 64))], block: 128, stream };
}
