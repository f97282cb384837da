export { plugin, plugin as default } from './plugin.js';
export { SlidingWindowLayer, type SlidingWindowState } from './sliding-window-layer.js';
export { readSlidingWindowConfig, positiveIntField, type SlidingWindowConfig } from './sliding-window-config.js';
export { appendKernel, attendKernel } from './sliding-window-kernels.js';
export { qwen3NextSlidingAdapter, qwen3NextSlidingLayerTypes, type Qwen3NextSlidingLayerType } from './qwen3-next-sliding.js';
export { TINY_CONFIG, tinyTensors, writeTinyCheckpoint } from './tiny-checkpoint.js';
export { byteLevelTokenizer, CHAT_TEMPLATE, SPECIAL_TOKENS } from './byte-level-tokenizer.js';
