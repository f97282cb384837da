import { F32_PRECISION, InvalidArgumentError, scopeWeights, type CreateLayerContext, type TransformerLayer } from '@metrale/core';
import { AltUpCorrectLayer, AltUpPredictLayer } from './altup-layers.js';
import { AltUpStreamsIn, AltUpStreamsOut } from './altup-streams.js';
import { LaurelLayer } from './laurel-layer.js';
import { gemma3nTextConfig } from './ple-config.js';

/** The Gemma 3n layer types this plugin makes besides 'ple' (the decoder layer itself is assembled by a model's adapter). */
export const GEMMA3N_LAYER_TYPES = ['altup-predict', 'altup-correct', 'laurel', 'altup-streams-in', 'altup-streams-out'] as const;

/**
 * One of Gemma 3n's AltUp or Laurel layers from a Hugging Face config, for the plugin path
 * (conformance kit, check-layer): sizes from `hidden_size`, `altup_num_inputs` (default 4),
 * `altup_active_idx` (default 0), `laurel_rank`, `rms_norm_eps`; tensors as for 'ple' (the text
 * model's, its prefix removed): `layers.l.altup.*` / `layers.l.laurel.*` for layer l
 * (`layerIndex`), the model's `altup_projections.*` / `altup_unembed_projections.*` for the streams.
 */
export function createGemma3nLayer(context: CreateLayerContext): TransformerLayer<any> {
  const { gpu, weights, limits, layerIndex } = context;
  const precision = context.precision ?? F32_PRECISION;
  const { c, where } = gemma3nTextConfig(context.config);
  const int = (name: string, fallback?: number, min = 1): number => {
    const v = c[name] ?? fallback;
    if (!Number.isSafeInteger(v) || (v as number) < min) throw new InvalidArgumentError(`${context.layerType}: ${where}.${name} must be an integer ≥ ${min}, got ${JSON.stringify(v)}`);
    return v as number;
  };
  const eps = c.rms_norm_eps ?? 1e-6;
  if (typeof eps !== 'number' || !(eps > 0)) throw new InvalidArgumentError(`${context.layerType}: ${where}.rms_norm_eps must be a positive number, got ${JSON.stringify(eps)}`);
  const hidden = int('hidden_size');
  const streams = int('altup_num_inputs', 4, 2);
  const layer = (part: string) => scopeWeights(weights, `layers.${layerIndex}.${part}.`);
  const altup = { hidden, streams, active: int('altup_active_idx', 0, 0), eps, precision };
  switch (context.layerType) {
    case 'altup-predict':
      return new AltUpPredictLayer(gpu, layer('altup'), limits, altup);
    case 'altup-correct':
      return new AltUpCorrectLayer(gpu, layer('altup'), limits, altup);
    case 'laurel':
      return new LaurelLayer(gpu, layer('laurel'), limits, { hidden, rank: int('laurel_rank'), eps, precision });
    case 'altup-streams-in':
      return new AltUpStreamsIn(gpu, weights, limits, { hidden, streams, precision });
    case 'altup-streams-out':
      return new AltUpStreamsOut(gpu, weights, limits, { hidden, streams, precision });
    default:
      throw new InvalidArgumentError(`@metrale/layer-ple has no layer type '${context.layerType}' (it has ple, ${GEMMA3N_LAYER_TYPES.join(', ')})`);
  }
}
