import { definePlugin, type MetralePlugin } from '@metrale/core';
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
    layerTypes: ['ple'],
    modelTypes: ['gemma3n', 'gemma3n_text'],
    create: (context) => new PleLayer(context, options),
  });
}

/** The plugin object a metrale application loads: one layer type, 'ple'. */
export const plugin = plePlugin();
