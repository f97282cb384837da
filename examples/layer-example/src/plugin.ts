import { definePlugin } from '@metrale/core';
import { qwen3NextSlidingAdapter } from './qwen3-next-sliding.js';
import { SlidingWindowLayer } from './sliding-window-layer.js';

/**
 * The plugin object a metrale application loads: one layer type, 'sliding-window', and one
 * architecture, `qwen3_next_sliding`, built from it. Its version is its package.json's.
 */
export const plugin = definePlugin({
  name: '@metrale/layer-example',
  // The contract version this package was written against, not core's constant: core checks it.
  specificationVersion: '1.0.0',
  layerTypes: ['sliding-window'],
  architectures: [qwen3NextSlidingAdapter],
  create: (context) => new SlidingWindowLayer(context),
});
