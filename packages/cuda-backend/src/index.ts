// The public API of @metrale/cuda-backend. Importing it never loads the native addon or libcuda:
// probe() and CudaBackend.create() do, and report what is missing.
export { probe, selfCheck } from './probe.js';
export type { CudaProbe } from './probe.js';
export { CudaBackend } from './cuda-backend.js';
export type { CudaBackendOptions, GemmLibrary, PoolStats } from './cuda-backend.js';
export { cublasLtCandidates } from './cublaslt-paths.js';
export { layoutArgs, packArgsToBytes, LAUNCH_PARAM_BYTES } from './arg-packing.js';
export type { ArgLayout } from './arg-packing.js';
export { READ_AHEAD_MODES, testKernels, xorshift32 } from './test-kernels.js';
export { measureCeilings, measureCopyBandwidth, measureGemmRate, timeOnDevice } from './ceilings.js';
export type {
  Ceilings, CeilingsOptions, CopyBandwidthOptions, CopyCeiling, DeviceTiming, GemmCeiling, GemmRateOptions, TimeOnDeviceOptions,
} from './ceilings.js';
