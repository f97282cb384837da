import { definePlugin } from '@metrale/core';
import { SlidingWindowLayer } from './sliding-window-layer.js';

/** The plugin object a metrale application loads: one layer type, 'sliding-window'. */
export const plugin = definePlugin({
  name: '@metrale/layer-example',
  // The contract version this package was written against, not core's constant: core checks it.
  specificationVersion: '1.0.0',
  layerTypes: ['sliding-window'],
  create: (context) => new SlidingWindowLayer(context),
});
