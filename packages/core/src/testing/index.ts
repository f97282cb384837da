// @metrale/core/testing: what a layer author runs in their own tests.
export type { ConformanceOptions, ConformanceReport, CheckResult, CheckStatus } from './conformance.js';
export { runLayerConformance, CONFORMANCE_CHECKS } from './conformance.js';
export { faultInjectingBackend } from './capture-fault.js';
export type { FaultCounts, FaultInjectionOptions, TransferCounts } from './capture-fault.js';
export { relativeError } from './compare.js';
export type {
  CheckLayerFixtureOptions, FixtureDirectories, FixtureDirectoriesOptions, LayerFixtureRun,
} from './layer-fixtures.js';
export { checkLayerFixture, fixtureDirectories } from './layer-fixtures.js';
export type { EnsureFatbinsOptions, GpuLaneDevice, GpuLaneDeviceOptions } from './gpu-lane.js';
export { ensureFatbins, gpuLaneDevice } from './gpu-lane.js';
export type { KernelBuffers, KernelLaunch, KernelOutputs, KernelPointers } from './kernel-buffers.js';
export { runKernelOn, runKernelOnBoth, encodeRows, decodeRows } from './kernel-buffers.js';
