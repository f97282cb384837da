import { definePlugin, type MetralePlugin } from '@metrale/core';
import { createGemma3nLayer, GEMMA3N_LAYER_TYPES } from './gemma3n-plugin-layers.js';
import { PleLayer, type PleLayerOptions } from './ple-layer.js';

/**
 * A plugin whose layers use `options` (slot capacity, staging, sharing). The default export is
 * `plePlugin()`; an application that wants another capacity registers `plePlugin({ slotCapacity })`.
 */
export function plePlugin(options: PleLayerOptions = {}): MetralePlugin {
  return definePlugin({
    name: '@metrale/layer-ple',
    // The contract version this package was written against, not core's constant: core checks it.
    specificationVersion: '1.0.0',
    layerTypes: ['ple', ...GEMMA3N_LAYER_TYPES],
    modelTypes: ['gemma3n', 'gemma3n_text'],
    // `options` are the PLE layer's; AltUp and Laurel take theirs from the config.
    create: (context) => (context.layerType === 'ple' ? new PleLayer(context, options) : createGemma3nLayer(context)),
  });
}

/** The plugin object a metrale application loads: 'ple' and Gemma 3n's AltUp and Laurel layers. */
export const plugin = plePlugin();
