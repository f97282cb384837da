import { definePlugin } from '@metrale/core';
import { GdnLayer } from './gdn-layer.js';

/** The plugin a metrale application loads: layer type 'gdn', for Qwen3-Next and Qwen3.5 checkpoints. */
export const plugin = definePlugin({
  name: '@metrale/layer-gdn',
  // The contract version this package was written against; core checks it.
  specificationVersion: '1.0.0',
  layerTypes: ['gdn'],
  modelTypes: ['qwen3_next', 'qwen3_5', 'qwen3_5_text', 'qwen3_5_moe', 'qwen3_5_moe_text'],
  create: (context) => new GdnLayer(context),
});
