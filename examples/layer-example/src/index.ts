export { plugin, plugin as default } from './plugin.js';
export { SlidingWindowLayer, type SlidingWindowState } from './sliding-window-layer.js';
export { readSlidingWindowConfig, type SlidingWindowConfig } from './sliding-window-config.js';
export { appendKernel, attendKernel } from './sliding-window-kernels.js';
