export { plugin, plugin as default, plePlugin } from './plugin.js';
export { PleLayer, type PleLayerOptions, type PleState, type PleScales } from './ple-layer.js';
export { PleSlotCache, type PleCacheOptions, type PleCacheStats, type PleDeviceBuffers } from './slot-cache.js';
export { readPleConfig, type PleConfig } from './ple-config.js';
export { PLE_TENSORS, scalarAs, f32ToF16Bits, type StorageDtype } from './ple-weights.js';
export { rangedPrefix, isRanged, type RangedWeightSource, type TensorDescription } from './tensor-reader.js';
export { combineKernel, embedGatherKernel, gateMulKernel, mapSetKernel, outNormKernel, threadsFor } from './ple-kernels.js';
export { geluTanh } from './ple-gate.cpu.js';
export { AltUpPredictLayer, AltUpCorrectLayer, type AltUpOptions } from './altup-layers.js';
export { AltUpStreamsIn, AltUpStreamsOut, type AltUpStreamsOptions } from './altup-streams.js';
export { LaurelLayer, type LaurelOptions } from './laurel-layer.js';
export { Gemma3nDecoderLayer, type Gemma3nDecoderParts, type Gemma3nDecoderOptions } from './gemma3n-decoder-layer.js';
export { Gemma3nScratch } from './gemma3n-scratch.js';
export { asRowValues } from './gemma3n-stateless.js';
export {
  altupPredictKernel, altupCorrectKernel, magnitudeKernel, copyKernel, sum3Kernel, pleAddKernel, streamsMeanKernel, normAddKernel, GEMMA3N_KERNELS,
} from './gemma3n-kernels.js';
