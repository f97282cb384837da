import { definePlugin } from '@metrale/core';
import { createDsaLayer } from './dsa-links.js';

/**
 * The plugin a metrale application loads: layer type 'dsa', the attention layers of GLM-5
 * (`glm_moe_dsa`) and GLM-5.3 (`glm5_next`). Layers of one model are created in order with the
 * same gpu and config object, so a 'shared' layer links to its model's previous full layer.
 */
export const plugin = definePlugin({
  name: '@metrale/layer-dsa',
  // The contract version this package was written against; core checks it.
  specificationVersion: '1.0.0',
  layerTypes: ['dsa'],
  modelTypes: ['glm_moe_dsa', 'glm5_next'],
  create: (context) => createDsaLayer(context),
});
