// The model runtime: decoder blocks, architectures, checkpoints, generation (README.md).
export type { ResidualAdd } from './residual-add.js';
export { BlockScratch } from './block-scratch.js';
export type { BlockState } from './block-state.js';
export { compositeHooks } from './composite-hooks.js';
export type { DecoderBlockOptions } from './decoder-block.js';
export { DecoderBlock } from './decoder-block.js';
export type { ModelAdapter, ModelBuildContext, ModelStack } from './model-adapter.js';
export { ArchitectureRegistry, architectures, registerArchitecture } from './architecture-registry.js';
export { Checkpoint } from './checkpoint.js';
export { eosTokenIds } from './eos-token-ids.js';
export { CheckpointWeights, scopeWeights } from './checkpoint-weights.js';
export { readF32, readOptionalF32, fileOfTensor } from './weight-tensors.js';
export type { LoadModelOptions, LoadedModel } from './load-model.js';
export { loadModel } from './load-model.js';
export type { SamplingParams } from './sampling.js';
export { checkSampling, isGreedy, probabilityFilter, sampleLogitsRow } from './sampling.js';
export type { GenerateRequest, GenerateOutput, GenerateStats, FinishReason, ModelRunnerOptions, SpeculationStats } from './model-runner.js';
export { ModelRunner } from './model-runner.js';
