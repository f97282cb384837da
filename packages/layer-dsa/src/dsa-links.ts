import { InvalidArgumentError, type CreateLayerContext, type GpuBackend } from '@metrale/core';
import { readDsaConfig } from './dsa-config.js';
import { DsaLayer } from './dsa-layer.js';

/**
 * The full layers created so far, per backend and per config object: a model's layers are created
 * one by one through `plugin.create`, each with the same gpu and the same config object, so a
 * shared layer finds the previous full layer of its own model here. Weak on both keys: a model's
 * links go away with its config or backend.
 */
const links = new WeakMap<GpuBackend, WeakMap<object, Map<number, DsaLayer>>>();

function fullLayersOf(gpu: GpuBackend, config: object): Map<number, DsaLayer> {
  let byConfig = links.get(gpu);
  if (!byConfig) {
    byConfig = new WeakMap();
    links.set(gpu, byConfig);
  }
  let layers = byConfig.get(config);
  if (!layers) {
    layers = new Map();
    byConfig.set(config, layers);
  }
  return layers;
}

/**
 * Creates the DSA layer `context.layerIndex`. A 'full' layer is remembered for its model; a
 * 'shared' layer is linked to the previous full DSA layer of the same model (same gpu, same config
 * object), which must have been created before it, and reads that layer's selection buffers.
 */
export function createDsaLayer(context: CreateLayerContext): DsaLayer {
  const cfg = readDsaConfig(context.config, context.layerIndex);
  const layers = fullLayersOf(context.gpu, context.config);
  if (cfg.indexerType === 'full') {
    const layer = new DsaLayer(context);
    layers.set(cfg.layerIndex, layer);
    return layer;
  }
  const sourceIndex = cfg.selectionSource!;
  const source = layers.get(sourceIndex);
  if (!source || source.disposed) {
    throw new InvalidArgumentError(
      `dsa: layer ${cfg.layerIndex} is 'shared' (config indexer_types): it reuses the top-k selection of layer ${sourceIndex}, ` +
        `the previous 'full' DSA layer, which ${source ? 'was disposed' : 'has not been created'}; create the layers of a model in order, ` +
        `with the same gpu and the same config object`,
    );
  }
  return new DsaLayer(context, { selectionSource: source });
}
