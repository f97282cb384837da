import { defineKernel, defineKernelModule } from '@metrale/core';
import { altupCorrectKernel, altupPredictKernel, magnitudeKernel, streamsMeanKernel } from './altup-kernels.js';
import { copyCpu, normAddCpu, pleAddCpu, sum3Cpu } from './gemma3n-rows.cpu.js';

// The row arithmetic of a Gemma 3n decoder layer around the std layers (kernels/gemma3n-rows.cu;
// KERNELS.md, "Gemma 3n"): data movement, residual sums, the per-layer input's add and Laurel's
// end, launched with core's rowLaunch / flatLaunch. Rows are of the row type `dtype` (0 f32,
// 1 bf16, 2 f16), the PLE path's output included; scales and norm weights f32.
const module = defineKernelModule('gemma3n-rows', new URL('./kernels/gemma3n-rows.fatbin', import.meta.url));

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

/** streams_i += y for i ≥ 1 (y: the PLE path's output rows). */
export const pleAddKernel = defineKernel({
  name: 'gemma3n.ple_add',
  params: { streams: 'ptr', y: 'ptr', rows: 'i32', hidden: 'i32', n: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'gemma3n_ple_add' },
  cpu: pleAddCpu,
});

/** out = x + RMSNorm(t) · w (Laurel's end). */
export const normAddKernel = defineKernel({
  name: 'gemma3n.norm_add',
  params: { x: 'ptr', t: 'ptr', weight: 'ptr', out: 'ptr', rows: 'i32', hidden: 'i32', eps: 'f32', dtype: 'i32' },
  cuda: { module, symbol: 'gemma3n_norm_add' },
  cpu: normAddCpu,
});

/** Every Gemma 3n kernel of the package (AltUp's and the decoder's rows). */
export const GEMMA3N_KERNELS = [altupPredictKernel, altupCorrectKernel, magnitudeKernel, streamsMeanKernel, copyKernel, sum3Kernel, pleAddKernel, normAddKernel];
