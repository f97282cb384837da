// The kernels the backend itself launches (kernels/convert.cu, kernels/gemm-fp8.cu,
// kernels/gemm-rows.cu): the element conversion of `convert`, the block-FP8 GEMMs of `gemm` and its
// few-row 16-bit GEMMs (decode). CUDA only: the CPU backend computes the same operations in its own
// gemm and convert.
import { defineKernel, defineKernelModule, type LaunchConfig, type Stream } from '@metrale/core';

// '../dist/kernels/…' resolves to the package's dist/kernels both from src/ (tests) and from
// dist/index.js (the bundle), since both sit one level below the package root.
const convertModule = defineKernelModule('convert', new URL('../dist/kernels/convert.fatbin', import.meta.url));
const gemmFp8Module = defineKernelModule('gemm-fp8', new URL('../dist/kernels/gemm-fp8.fatbin', import.meta.url));
const gemmRowsModule = defineKernelModule('gemm-rows', new URL('../dist/kernels/gemm-rows.fatbin', import.meta.url));

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

export const gemmFp8RowsKernel = defineKernel({
  name: 'backend.gemm_fp8_rows',
  params: GEMM_FP8_PARAMS,
  cuda: { module: gemmFp8Module, symbol: 'backend_gemm_fp8_rows' },
});

export const gemmFp8TiledKernel = defineKernel({
  name: 'backend.gemm_fp8_tiled',
  params: GEMM_FP8_PARAMS,
  cuda: { module: gemmFp8Module, symbol: 'backend_gemm_fp8_tiled' },
});

/** backend_gemm_fp8_rows: 8 warps per CTA, a warp per output column. */
export function gemmFp8RowsLaunch(n: number, stream: Stream): LaunchConfig {
  return { grid: Math.max(1, Math.ceil(n / 8)), block: 256, stream };
}

/** backend_gemm_fp8_tiled: a CTA of 4 warps per 64 × 64 tile of C. */
export function gemmFp8TiledLaunch(m: number, n: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, Math.ceil(n / 64)), Math.max(1, Math.ceil(m / 64))], block: 128, stream };
}

/**
 * Rows of A up to which `gemm` multiplies 16-bit A and B (bf16 · bf16 or f16 · f16, row-major A,
 * packed n × k B) with backend_gemm_rows instead of cuBLASLt: its registers hold one sum per row
 * and output column.
 */
export const GEMM_ROWS_MAX = 8;

export const gemmRowsKernel = defineKernel({
  name: 'backend.gemm_rows',
  params: {
    a: 'ptr', abCode: 'i32', b: 'ptr', c: 'ptr', cCode: 'i32',
    m: 'i32', n: 'i32', k: 'i32', lda: 'i32', ldc: 'i32', alpha: 'f32', beta: 'f32',
  },
  cuda: { module: gemmRowsModule, symbol: 'backend_gemm_rows' },
});

/** Output columns (rows of B) each warp of backend_gemm_rows owns (kCols in kernels/gemm-rows.cu). */
const GEMM_ROWS_COLUMNS_PER_WARP = 2;

/**
 * backend_gemm_rows: a warp per 2 output columns, in CTAs of 4, 2 or 1 warps. The kernel is bound
 * by reading B once, which takes many loads in flight on every multiprocessor, not a few full
 * ones: CTAs of 4 warps where that still makes at least 2 CTAs per multiprocessor (n > 2104 on a
 * 132-SM H200: n 12352 → 1544 CTAs, n 9216 → 1152), else the largest smaller CTA that does
 * (n 2048 → 512 CTAs of 2 warps, 3.9 per multiprocessor), down to 1 warp for small n.
 */
export function gemmRowsLaunch(n: number, multiprocessors: number, stream: Stream): LaunchConfig {
  const warps = Math.max(1, Math.ceil(n / GEMM_ROWS_COLUMNS_PER_WARP));
  let perCta = 4;
  while (perCta > 1 && Math.ceil(warps / perCta) < 2 * multiprocessors) perCta /= 2;
  return { grid: Math.ceil(warps / perCta), block: 32 * perCta, stream };
}
