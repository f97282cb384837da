// The model runtime: decoder blocks, architectures, checkpoints, generation (README.md).
export type { ResidualAdd } from './residual-add.js';
export type { AddsResidual, ResidualOperands } from './adds-residual.js';
export { addsResidual } from './adds-residual.js';
export { BlockScratch } from './block-scratch.js';
export type { BlockState } from './block-state.js';
export { compositeHooks } from './composite-hooks.js';
export type { DecoderBlockOptions } from './decoder-block.js';
export { DecoderBlock } from './decoder-block.js';
export { CompositeLayer } from './composite-layer.js';
export { DeviceMemory } from './device-memory.js';
export { StatelessLayer } from './stateless-layer.js';
export type { ModelAdapter, ModelBuildContext, ModelStack } from './model-adapter.js';
export { ArchitectureRegistry, architectures, registerArchitecture } from './architecture-registry.js';
export { Checkpoint } from './checkpoint.js';
export { eosTokenIds } from './eos-token-ids.js';
export { CheckpointWeights, scopeWeights } from './checkpoint-weights.js';
export { readF32, readOptionalF32, fileOfTensor } from './weight-tensors.js';
export type { Precision, DtypeChoice, Fp8Quantization } from './precision.js';
export { F32_PRECISION, DTYPE_CHOICES, FP8_BLOCK, readFp8Quantization, checkpointDtype, resolvePrecision, describePrecision } from './precision.js';
export type { WeightDtype, HostLinear, LinearWeight, LinearCall } from './linear-weight.js';
export {
  blocksOf, encodeFloats, dequantizeFp8, quantizeFp8, readLinear, readFloats, linearToF32, stackLinears, linearBytes, uploadLinear, runLinear, rowBytes,
} from './linear-weight.js';
export type { LoadModelOptions, LoadedModel, FitParallel } from './load-model.js';
export { buildModelStack, checkModelFits, loadModel } from './load-model.js';
export type { WeightBytes } from './checkpoint-precision.js';
export { checkFp8Tensors, weightBytes, gib } from './checkpoint-precision.js';
export type { PositionLogprobs, TokenLogprob } from './logprobs.js';
export { MAX_LOGPROBS, logSumExp, positionLogprobs, topLogprobs } from './logprobs.js';
export { TokenHistory, adjustLogits, adjustsLogits } from './logits-adjustment.js';
export type { SamplingParams } from './sampling.js';
export { checkSampling, isGreedy, probabilityFilter, sampleLogitsRow } from './sampling.js';
