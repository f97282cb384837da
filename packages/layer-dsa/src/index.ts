// The public API of @metrale/layer-dsa.
export { plugin, plugin as default } from './plugin.js';
export { DsaLayer, PREFILL_SCORE_ROWS, type DsaState, type DsaSelection, type DsaLayerOptions } from './dsa-layer.js';
export { createDsaLayer } from './dsa-links.js';
export {
  readDsaConfig, dsaGeometry, defaultKvCacheDtype, KV_DTYPE_CODE, INDEX_DTYPE_CODE,
  type DsaConfig, type DsaGeometry, type DsaVariant, type IndexCacheDtype, type KvCacheDtype, type IndexerType,
} from './dsa-config.js';
export { loadDsaWeights, dsaWeightShapes, type DsaHostWeights } from './dsa-weights.js';
export { segmentLinears, uploadSegments, runSegments, type HostLinearSegment, type LinearSegment, type SegmentsCall } from './dsa-linear-segments.js';
export { loadRowElements, storeRowElements, rowElementBytes } from './dsa-row-elements.js';
export {
  mlaAppendKernel, indexAppendKernel, poolAppendKernel, ringStoreKernel, qRopeKernel, indexScoreKernel, topkKernel, sparseAttnKernel,
} from './dsa-kernels.js';
export { rowLaunch, indexScoreLaunch, topkLaunch, sparseAttnLaunch, INDEX_KEY_TILE } from './dsa-launch.js';
export {
  f32ToE4m3, e4m3ToF32, fp8Scale, ropeInvFreq, applyRope, selectTopk, canonicalScore, positionOfRow, E4M3_MAX,
} from './dsa-numerics.js';
export { mlaAppendCpu, indexAppendCpu, poolAppendCpu, ringStoreCpu, qRopeCpu } from './dsa-append.cpu.js';
export type { MlaAppendArgs, IndexAppendArgs, PoolAppendArgs, RingStoreArgs, QRopeArgs } from './dsa-append.cpu.js';
export { indexScoreCpu, topkCpu, candidateCount, type IndexScoreArgs, type TopkArgs } from './dsa-index.cpu.js';
export { sparseAttnCpu, type SparseAttnArgs } from './dsa-attn.cpu.js';
