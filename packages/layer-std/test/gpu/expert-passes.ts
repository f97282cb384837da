// The MoE expert passes the GPU expert tests launch (moe-experts- and moe-gemm-kernels.gpu.test.ts):
// a weight format's kernels and codes, the grouped and row-wise paths as the layer launches them,
// a pass's buffers and a route's ids. Random values from the test file's own stream (kernel-check.ts).
import { FLOAT_DTYPE_CODE, type GpuBackend } from '@metrale/core';
import { type KernelBuffers as Bufs, type KernelPointers as Ptrs } from '@metrale/core/testing';
import {
  EXPERT_KERNELS, WEIGHT_DTYPE_CODE, expertsDownLaunch, expertsKernel, expertsLaunch, expertsGemm, expertsGemmLaunch, expertsRowwiseLaunch, expertsUpLaunch, expertsUpRowwiseLaunch, groupKernel, groupLaunch, moeGroupsLength, type ExpertFormat, type ExpertGemm,
} from '@metrale/layer-std';
import { expertSet, rowTypeOf } from '../expert-weights.js';
import { random, poisonI32, poison, typed } from './kernel-check.js';

/** The kernels, row type and codes of an expert format. */
export const formatOf = (format: ExpertFormat) => {
  const dtype = rowTypeOf(format);
  const fp8 = format.startsWith('fp8');
  return { k: EXPERT_KERNELS[format], dtype, fp8, codes: { wDtype: WEIGHT_DTYPE_CODE[fp8 ? 'f8e4m3' : dtype], rowDtype: FLOAT_DTYPE_CODE[dtype] } };
};
/** group → up → down → weighted sum, the grouped path the layer launches. */
/** `tensorCores`: the GEMM pair the layer takes for `rows` (true), or the one given. */
export const groupedExperts = (gpu: GpuBackend, p: Ptrs, format: ExpertFormat, rows: number, D: number, I: number, E: number, topK: number, tensorCores: boolean | ExpertGemm = false): void => {
  const s = gpu.defaultStream;
  const { k, fp8, codes } = formatOf(format);
  const gemm = tensorCores === true ? expertsGemm(k, rows) : tensorCores || undefined;
  const up = gemm ? gemm.up : k.up;
  const down = gemm ? gemm.down : k.down;
  gpu.launch(groupKernel, groupLaunch(rows, topK, s), { ids: p.ids!, groups: p.groups!, rows, experts: E, topK });
  gpu.launch(up, gemm ? expertsGemmLaunch(gemm, 'up', rows, topK, I, E, gpu.device.computeCapability, s) : expertsUpLaunch(format, rows, topK, D, I, E, s), {
    input: p.x!, ids: p.ids!, groups: p.groups!, gateUp: p.gateUp!, gateUpScales: fp8 ? p.gateUpScales! : 0n, h: p.h!, rows, hidden: D, inter: I, experts: E, topK, ...codes,
  });
  gpu.launch(down, gemm ? expertsGemmLaunch(gemm, 'down', rows, topK, D, E, gpu.device.computeCapability, s) : expertsDownLaunch(format, rows, topK, D, I, E, s), {
    h: p.h!, ids: p.ids!, groups: p.groups!, down: p.down!, downScales: fp8 ? p.downScales! : 0n, y: p.y!, rows, hidden: D, inter: I, experts: E, topK, ...codes,
  });
  gpu.launch(expertsKernel, expertsLaunch(rows, D, s), { y: p.y!, ids: p.ids!, weights: p.weights!, output: p.out!, rows, hidden: D, experts: E, topK, dtype: codes.rowDtype });
};
/** The row-wise path: up per (row, slot), then down and the weighted sum per row. */
export const rowwiseExperts = (gpu: GpuBackend, p: Ptrs, format: ExpertFormat, rows: number, D: number, I: number, E: number, topK: number): void => {
  const s = gpu.defaultStream;
  const { k, fp8, codes } = formatOf(format);
  gpu.launch(k.upRowwise, expertsUpRowwiseLaunch(rows, topK, I, s), {
    input: p.x!, ids: p.ids!, gateUp: p.gateUp!, gateUpScales: fp8 ? p.gateUpScales! : 0n, h: p.h!, rows, hidden: D, inter: I, experts: E, topK, ...codes,
  });
  gpu.launch(k.rowwise, expertsRowwiseLaunch(rows, D, s), {
    h: p.h!, ids: p.ids!, weights: p.weights!, down: p.down!, downScales: fp8 ? p.downScales! : 0n, output: p.out!, rows, hidden: D, inter: I, experts: E, topK, ...codes,
  });
};
/** Buffers of an expert pass; `weights` reuses another pass's experts (drawing 8 × 3 × 512 × 2048 values is most of a case). */
export const expertBufs = (format: ExpertFormat, rows: number, D: number, I: number, E: number, topK: number, ids: Int32Array, weights?: Bufs): Bufs => {
  const dtype = rowTypeOf(format);
  const w = weights ? { gateUp: weights.gateUp!, gateUpScales: weights.gateUpScales!, down: weights.down!, downScales: weights.downScales! } : expertSet(format, E, D, I, random);
  return {
    x: typed(rows * D, dtype), ids, weights: Float32Array.from({ length: rows * topK }, () => 0.05 + random.float()),
    gateUp: w.gateUp, gateUpScales: w.gateUpScales, down: w.down, downScales: w.downScales,
    groups: poisonI32(moeGroupsLength(rows, topK, E)), h: poison(rows * topK * I, dtype), y: poison(rows * topK * D, dtype), out: poison(rows * D, dtype),
  };
};

/** topK distinct random experts per row; one id below the experts (one row: its last slot) and, past 3 rows, one past them. */
export const routedIds = (rows: number, topK: number, E: number): Int32Array => {
  const ids = new Int32Array(rows * topK);
  for (let r = 0; r < rows; r++) {
    const perm = Array.from({ length: E }, (_, e) => e).sort(() => random.float() - 0.5);
    for (let j = 0; j < topK; j++) ids[r * topK + j] = perm[j]!;
  }
  ids[rows > 1 ? topK + 1 : topK - 1] = -1;
  if (rows > 3) ids[3 * topK] = E;
  return ids;
};
