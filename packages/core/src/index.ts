// The public API of @metrale/core. Everything a layer author, a backend or an application needs
// is exported here; the conformance kit is under '@metrale/core/testing'.

export * from './errors.js';

export type { DevicePtr } from './device/device-ptr.js';
export { NULL_PTR, offsetPtr } from './device/device-ptr.js';
export type { DType, FloatDtype } from './device/dtype.js';
export {
  DTYPE_BYTES, FLOAT_DTYPE_CODE, E4M3_MAX, E4M3_VALUES, f32ToBf16Bits, bf16BitsToF32, f16BitsToF32, f32ToF16Bits, e4m3ToF32, f32ToE4m3, floatBytes,
  roundTo, toBf16, fromBf16, toF16,
} from './device/dtype.js';
export type { DeviceMemoryView } from './device/memory-view.js';
export type { ElementRead, ElementWrite, ElementAccess } from './device/row-elements.js';
export { rowDtypeOf, elementReader, elementWriter, elementAccess, readElements, elementAt, roundRows } from './device/row-elements.js';
export type {
  Kernel, KernelArgs, KernelDefinition, KernelModule, KernelParam, KernelParams, KernelParamType, CpuKernelContext, Dims, EarlyStart,
} from './device/kernel.js';
export { defineKernel, defineKernelModule, validateKernelArgs, toDims, toEarlyStart } from './device/kernel.js';
export { requireKernels } from './device/require-kernels.js';
export { rowLaunch, flatLaunch } from './device/launch-shapes.js';
export type {
  GpuBackend, Stream, GpuEvent, Graph, GraphExec, HostBuffer, DeviceInfo, LaunchConfig, GemmArgs, ConvertArgs, BackendProbe,
} from './device/gpu-backend.js';

export type { Communicator, CommunicatorId, CollectiveArgs, CollectiveOp } from './parallel/communicator.js';
export { collectiveExtent } from './parallel/communicator.js';

export type { LayerState } from './contract/layer-state.js';
export type { LayerGraphHooks } from './contract/graph-hooks.js';
export type { LayerWriteOnAccept, GdnCarrySize } from './contract/write-on-accept.js';
export type { GdnCarryBinding } from './contract/gdn-carry-binding.js';
export type { TransformerLayer, LayerStep, StepTables, StepPhase, SpeculationMode, LayerLimits } from './contract/layer.js';
export type { KvPageBinding, LayerSequenceCache } from './contract/sequence-cache.js';
export type { ResolvedHooks } from './contract/default-hooks.js';
export { defaultHooks, resolveHooks } from './contract/default-hooks.js';

export { SPECIFICATION_VERSION } from './plugin/specification-version.js';
export type { PluginDefinition, MetralePlugin, CreateLayerContext, PluginOrigin } from './plugin/define-plugin.js';
export { definePlugin, validatePlugin, pluginLabel } from './plugin/define-plugin.js';
export { PluginRegistry } from './plugin/registry.js';
export type { PluginPackage } from './plugin/load-plugin.js';
export { loadPlugin, resolvePackageEntry, readPluginPackage, importPlugin, importPluginPackage } from './plugin/load-plugin.js';

export type { StepDriverOptions, StepResult, StepInput, StepPath } from './driver/step-driver.js';
export { StepDriver } from './driver/step-driver.js';
export { LayerTimer } from './driver/layer-timer.js';
export type { Sequence } from './driver/sequence.js';
export { BatchBuckets, defaultBuckets } from './driver/batch-buckets.js';
export type { GraphKey } from './driver/graph-cache.js';
export { graphKey } from './driver/graph-cache.js';
export type { Acceptance, ProbabilityTransform } from './driver/acceptance.js';
export { acceptGreedy, acceptMatching, acceptPickedIds, argmaxRow, pickAt, softmaxRow, sampleFrom } from './driver/acceptance.js';

export type { Seed } from './random/seeded-random.js';
export { SeededRandom, randomSeed } from './random/seeded-random.js';

export type { HostTensor } from './weights/host-tensor.js';
export { elementCount, expectShape, toF32, toI32 } from './weights/host-tensor.js';
export type { WeightSource } from './weights/weight-source.js';
export { MemoryWeightSource, prefixedWeights } from './weights/weight-source.js';
export { SafetensorsFile, encodeSafetensors, tensorOf } from './weights/safetensors.js';

export * from './fixture/index.js';

export * from './model/index.js';
export * from './engine/index.js';
export * from './kv/index.js';
export type { DraftProposer, NgramOptions, NgramSpec } from './spec/ngram-proposer.js';
export { NgramProposer, parseNgramSpec } from './spec/ngram-proposer.js';
export type { VerifyOutcome, VerifySequence } from './spec/verify-drafts.js';
export { verifyDrafts } from './spec/verify-drafts.js';
export type { AcceptedDrafts, SpeculationGateOptions } from './spec/speculation-gate.js';
export { SpeculationGate } from './spec/speculation-gate.js';

export type { ParallelContext } from './parallel/parallel-context.js';
export { splitEvenly } from './parallel/parallel-context.js';
export type { ShardSpec, ShardRule } from './parallel/sharded-weights.js';
export { shardWeights } from './parallel/sharded-weights.js';
export type { StepRunner } from './driver/step-runner.js';
export type { RankCommand, RankReply, RankEnvelope } from './parallel/rank-protocol.js';
export type { RankFollowerOptions } from './parallel/rank-follower.js';
export { serveRankCommands } from './parallel/rank-follower.js';
export type { FollowerLink, TensorParallelDriverOptions } from './parallel/tensor-parallel-driver.js';
export { TensorParallelDriver } from './parallel/tensor-parallel-driver.js';
