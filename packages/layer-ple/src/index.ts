export { plugin, plugin as default, plePlugin } from './plugin.js';
export { PleLayer, type PleLayerOptions, type PleState, type PleScales } from './ple-layer.js';
export { PleSlotCache, type PleCacheOptions, type PleCacheStats, type PleDeviceBuffers } from './slot-cache.js';
export { readPleConfig, type PleConfig } from './ple-config.js';
export { PLE_TENSORS, scalarAs, f32ToF16Bits, type StorageDtype } from './ple-weights.js';
export { rangedPrefix, isRanged, type RangedWeightSource, type TensorDescription } from './tensor-reader.js';
export { combineKernel, embedGatherKernel, gateMulKernel, mapSetKernel, outNormKernel, threadsFor } from './ple-kernels.js';
export { geluTanh } from './ple-gate.cpu.js';
