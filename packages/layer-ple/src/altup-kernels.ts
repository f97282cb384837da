import { defineKernel, defineKernelModule } from '@metrale/core';
import { correctCpu, magnitudeCpu, predictCpu, streamsMeanCpu } from './altup.cpu.js';

// AltUp's row kernels (kernels/altup.cu; KERNELS.md, "Gemma 3n"), launched with rowLaunch (one CTA
// per row). Rows are of the row type `dtype` (0 f32, 1 bf16, 2 f16); router, norm and coefficient
// weights f32. GEMMs (the stream projections) go through the backend's GEMM.
const module = defineKernelModule('altup', new URL('./kernels/altup.fatbin', import.meta.url));

/** The most AltUp streams (`altup_num_inputs`) the CUDA kernels take; Gemma 3n has 4. */
export const ALTUP_MAX_STREAMS = 16;

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

/** out = the mean of a row's n streams (AltUp's unembedding). */
export const streamsMeanKernel = defineKernel({
  name: 'gemma3n.streams_mean',
  params: { streams: 'ptr', out: 'ptr', rows: 'i32', hidden: 'i32', n: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'gemma3n_streams_mean' },
  cpu: streamsMeanCpu,
});
