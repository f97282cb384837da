// A test plugin whose one layer type, 'gemma3n-decoder', is decoder layer `layerIndex` of the
// gemma3n-text-tiny fixture, built by the adapter's own builder (buildGemma3nDecoderLayer) with its
// own scratch, in `precision` (default f32): what the conformance kit runs on the CPU backend and on
// the GPU lane's device. `ple` replaces the plugin that makes the 'ple' part.
import { Checkpoint, F32_PRECISION, definePlugin, scopeWeights, type MetralePlugin, type Precision, type WeightSource } from '@metrale/core';
import { Gemma3nScratch, plugin as plePlugin } from '@metrale/layer-ple';
import { buildGemma3nDecoderLayer } from '../../src/models/gemma3n-decoder.js';
import { gemma3nText } from '../../src/models/gemma3n-config.js';
import { readModelFixture } from './model-fixtures.js';

export function gemma3nDecoderPlugin(
  precision: Precision = F32_PRECISION, ple: MetralePlugin = plePlugin,
): { plugin: MetralePlugin; config: Record<string, unknown>; weights: WeightSource } {
  const checkpoint = Checkpoint.open(readModelFixture('gemma3n-text-tiny').dir);
  const t = gemma3nText(checkpoint.config);
  const plugin = definePlugin({
    name: 'gemma3n-decoder-layer', version: '0.0.0', specificationVersion: '1.0.0', layerTypes: ['gemma3n-decoder'],
    create: ({ gpu, layerIndex, limits, weights }) => {
      const scratch = new Gemma3nScratch(gpu, t.hidden, t.streams, limits.maxRows, precision.rows);
      const model = scopeWeights(weights, 'model.');
      let layer: ReturnType<typeof buildGemma3nDecoderLayer>;
      try {
        layer = buildGemma3nDecoderLayer({ gpu, model, t, limits, precision, scratch, ple, modelType: 'gemma3n_text' }, layerIndex, []);
      } catch (error) {
        scratch.dispose();
        throw error;
      }
      // The layer does not own the model's shared scratch; here it is the layer's alone.
      const dispose = layer.dispose.bind(layer);
      layer.dispose = () => {
        dispose();
        scratch.dispose();
      };
      return layer;
    },
  });
  return { plugin, config: checkpoint.config as Record<string, unknown>, weights: checkpoint.weights };
}
