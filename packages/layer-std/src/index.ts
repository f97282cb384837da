// The public API of @metrale/layer-std.
export { plugin, plugin as default, STD_LAYER_TYPES } from './plugin.js';
export { EmbeddingLayer, type EmbeddingOptions } from './embedding-layer.js';
export { RmsNormLayer, type RmsNormOptions } from './rms-norm-layer.js';
export { LayerNormLayer, type LayerNormOptions } from './layer-norm-layer.js';
export { MlpLayer, type MlpOptions } from './mlp-layer.js';
export { MoeLayer } from './moe-layer.js';
export { qwen3NextMoeOptions, glmMoeOptions, checkMoe, expertParallelMoe, type MoeOptions, type MoeRouting, type SharedExpert } from './moe-config.js';
export { AttentionLayer, type AttentionState } from './attention-layer.js';
export { qwen3NextAttentionOptions, ropeOf, checkAttention, type AttentionOptions, type KvSource } from './attention-config.js';
export { LmHeadLayer, type LmHeadOptions } from './lm-head-layer.js';
export { AllReduceLayer } from './all-reduce-layer.js';
export { VocabParallelHead, type VocabParallelHeadOptions } from './vocab-parallel-head.js';
export { stdShardRule, expertParallelShardRule } from './std-shard-rule.js';
export { residualAdd, requireResidualAdd } from './residual-add.js';
export { buildPreNormDecoder, type PreNormDecoderSpec, type PreNormLayer } from './pre-norm-decoder.js';
export { DeviceSampler } from './device-sampler.js';
export { ropeTable } from './rope-table.js';
export { requireKernels } from './require-kernels.js';
export { embedKernel, rmsNormKernel, addRmsNormKernel, layerNormKernel, addKernel, siluMulKernel, geluMulKernel, softcapKernel } from './rows-kernels.js';
export { rowLaunch, flatLaunch } from '@metrale/core';
export { sparsityCutoff, normalQuantile } from './activation-sparsity.js';
export type { GateActivation } from './swiglu.js';
export { geluTanh } from './rows.cpu.js';
export {
  routeKernel, routeFewKernel, routerGemvKernel, sharedSlotsKernel, sharedSlotsLaunch, routeForm, routeFewLaunch, routerGemvLaunch, FEW_ROUTE_ROWS, FEW_ROUTE_MAX_TOP_K, type RouteForm,
  fusedRouteTail, FUSED_TAIL_ROWS,
  localizeKernel, groupKernel, expertsUpKernel, expertsDownKernel, expertsKernel, combineKernel, groupLaunch, expertsUpLaunch, expertsDownLaunch, expertsLaunch,
  moeGroupsLength, moeGrouped, GROUPED_MIN_ENTRIES_PER_EXPERT, groupedStageBytes, expertsUpRowwiseKernel, expertsRowwiseKernel, expertsUpRowwiseLaunch, expertsRowwiseLaunch,
  EXPERT_KERNELS, EXPERT_FORMATS, FEW_GEMM_ROWS, FP8_TENSOR_CORE_MIN_BATCH, expertFormat, expertsGemm, expertsGemmLaunch, moeTensorCores, type ExpertFormat, type ExpertGemm, type ExpertKernels,
} from './moe-kernels.js';
export {
  prepKernel, prepLaunch, coreKernel, coreLaunch, combineLaunch, keyChunks, partialsBytes, attnPrefillLaunch, prefillOnTensorCores, attnDecodeLaunch, decodeOnTensorCores, ATTENTION_KERNELS,
  type AttentionKernels,
} from './attention-kernels.js';
export { WEIGHT_DTYPE_CODE } from './elements.cpu.js';
export {
  argmaxKernel, argmaxLaunch, argmaxSlices, argmaxPartialsBytes, logprobsKernel, sampleKernel, SAMPLE_POOLED_TOP_K, SAMPLE_SLICE, sampleLaunch, samplePhases, sampleScratchBytes,
  sampleScratchZeroBytes, sampleSlices, type SamplePhaseRow,
} from './sample-kernels.js';
export { LOGPROBS_HEAD, LOGPROBS_ROW_WORDS, LOGPROBS_TOP, SAMPLE_PARAMS, SAMPLE_PHASE_DRAW, readLogprobsRow } from './sample-layout.js';
export { routeRow, topIndices } from './moe.cpu.js';
export { keyChunksOf, KEY_CHUNK_ALIGN, MAX_KEY_CHUNKS, MIN_KEY_CHUNK } from './key-chunks.js';
export { filteredProbs } from './sample.cpu.js';
