import { defineKernel, defineKernelModule, type LaunchConfig, type Stream } from '@metrale/core';
import { correctCpu, magnitudeCpu, predictCpu } from './altup.cpu.js';
import { copyCpu, normAddCpu, pleAddCpu, streamsMeanCpu, sum3Cpu } from './gemma3n-rows.cpu.js';

// The Gemma 3n decoder's own kernels (kernels/gemma3n.cu; KERNELS.md, "gemma3n"): AltUp and the
// row arithmetic around the std layers. Rows are of the row type `dtype` (0 f32, 1 bf16, 2 f16);
// norm, router and coefficient weights f32.
const module = defineKernelModule('gemma3n', new URL('./kernels/gemma3n.fatbin', import.meta.url));

/** One CTA per row over `width` elements (≤ 1024 threads). */
export function rowLaunch(rows: number, width: number, stream: Stream): LaunchConfig {
  return { grid: Math.max(1, rows), block: Math.min(1024, 32 * Math.ceil(Math.max(1, width) / 32)), stream };
}

/** Elementwise kernels: 256 threads per CTA. */
export function flatLaunch(count: number, stream: Stream): LaunchConfig {
  return { grid: Math.max(1, Math.ceil(count / 256)), block: 256, stream };
}

const ROUTER = { routerNorm: 'ptr', router: 'ptr', rows: 'i32', hidden: 'i32', n: 'i32', active: 'i32', eps: 'f32', dtype: 'i32' } as const;

/** AltUp predict: pred_j = s_j + Σ_i R_ji s_i over a row's n streams (rowLaunch over H). */
export const altupPredictKernel = defineKernel({
  name: 'gemma3n.altup_predict',
  params: { streams: 'ptr', pred: 'ptr', coefs: 'ptr', ...ROUTER },
  cuda: { module, symbol: 'gemma3n_altup_predict' },
  cpu: predictCpu,
});

/** AltUp correct: corr_j = pred_j + (c_j + 1)(o − pred_k), input rows [pred_0 … pred_{n−1} | o]. */
export const altupCorrectKernel = defineKernel({
  name: 'gemma3n.altup_correct',
  params: { input: 'ptr', corr: 'ptr', coefs: 'ptr', ...ROUTER },
  cuda: { module, symbol: 'gemma3n_altup_correct' },
  cpu: correctCpu,
});

/** out = y · rms(target) / sqrt(max(mean(y²), 1e−5)) (AltUp's stream init and unembedding). */
export const magnitudeKernel = defineKernel({
  name: 'gemma3n.magnitude',
  params: { target: 'ptr', targetStride: 'i32', y: 'ptr', out: 'ptr', outStride: 'i32', rows: 'i32', hidden: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'gemma3n_magnitude' },
  cpu: magnitudeCpu,
});

/** dst = src (· scale) row by row at their strides, between row types. */
export const copyKernel = defineKernel({
  name: 'gemma3n.copy',
  params: { src: 'ptr', srcStride: 'i32', dst: 'ptr', dstStride: 'i32', scale: 'ptr', rows: 'i32', hidden: 'i32', srcDtype: 'i32', dstDtype: 'i32' },
  cuda: { module, symbol: 'gemma3n_copy' },
  cpu: copyCpu,
});

/** out = (a + b + c) · scale elementwise (c may be 0n). */
export const sum3Kernel = defineKernel({
  name: 'gemma3n.sum3',
  params: { a: 'ptr', b: 'ptr', c: 'ptr', out: 'ptr', count: 'i32', scale: 'f32', dtype: 'i32' },
  cuda: { module, symbol: 'gemma3n_sum3' },
  cpu: sum3Cpu,
});

/** streams_i += y (f32) for i ≥ 1. */
export const pleAddKernel = defineKernel({
  name: 'gemma3n.ple_add',
  params: { streams: 'ptr', y: 'ptr', rows: 'i32', hidden: 'i32', n: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'gemma3n_ple_add' },
  cpu: pleAddCpu,
});

/** out = the mean of a row's n streams. */
export const streamsMeanKernel = defineKernel({
  name: 'gemma3n.streams_mean',
  params: { streams: 'ptr', out: 'ptr', rows: 'i32', hidden: 'i32', n: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'gemma3n_streams_mean' },
  cpu: streamsMeanCpu,
});

/** out = x + RMSNorm(t) · w (Laurel's end). */
export const normAddKernel = defineKernel({
  name: 'gemma3n.norm_add',
  params: { x: 'ptr', t: 'ptr', weight: 'ptr', out: 'ptr', rows: 'i32', hidden: 'i32', eps: 'f32', dtype: 'i32' },
  cuda: { module, symbol: 'gemma3n_norm_add' },
  cpu: normAddCpu,
});

export const GEMMA3N_KERNELS = [altupPredictKernel, altupCorrectKernel, magnitudeKernel, copyKernel, sum3Kernel, pleAddKernel, streamsMeanKernel, normAddKernel];
