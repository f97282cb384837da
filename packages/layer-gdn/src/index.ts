// The public API of @metrale/layer-gdn.
export { plugin, plugin as default } from './plugin.js';
export { GdnLayer, type GdnState } from './gdn-layer.js';
export { readGdnConfig, type GdnConfig, type GdnWeightDtype } from './gdn-config.js';
export { loadGdnWeights, groupSplitProjections, FUSED_NAMES, SPLIT_NAMES, COMMON_NAMES, type GdnHostWeights } from './gdn-weights.js';
export { recurrentKernel, foldKernel, chunkKernel } from './gdn-kernels.js';
export { recurrentLaunch, chunkLaunch, gdnBlock } from './gdn-launch.js';
export { recurrentCpu, foldCpu, chunkCpu, type RecurrentArgs, type FoldArgs, type ChunkArgs } from './gdn.cpu.js';
