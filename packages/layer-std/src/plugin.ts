import { definePlugin, F32_PRECISION, InvalidArgumentError, type CreateLayerContext, type TransformerLayer } from '@metrale/core';
import { qwen3NextAttentionOptions } from './attention-config.js';
import { AttentionLayer } from './attention-layer.js';
import { fields, stdOptions, textConfig } from './config-fields.js';
import { EmbeddingLayer } from './embedding-layer.js';
import { LayerNormLayer } from './layer-norm-layer.js';
import { LmHeadLayer } from './lm-head-layer.js';
import { MlpLayer } from './mlp-layer.js';
import { glmMoeOptions, qwen3NextMoeOptions } from './moe-config.js';
import { MoeLayer } from './moe-layer.js';
import { RmsNormLayer } from './rms-norm-layer.js';

export const STD_LAYER_TYPES = ['embedding', 'rms-norm', 'layer-norm', 'mlp', 'moe', 'attention', 'lm-head'] as const;

/** Model types whose norms store w centred on 0 (y = (1 + w) · x̂). */
// (Not Gemma 3n: its `Gemma3nRMSNorm` multiplies by w itself.)
const UNIT_OFFSET_NORMS = new Set(['qwen3_next', 'qwen3_5', 'qwen3_5_text', 'qwen3_5_moe', 'qwen3_5_moe_text', 'gemma3_text', 'gemma2']);

/**
 * A std layer from a Hugging Face config, for the plugin path (conformance kit, check-layer):
 * shapes come from the config's fields, the data path from `context.precision` (default
 * F32_PRECISION); metrale's own choices from `config.metrale_std`
 * (`norm_offset`, `embed_scale`, `page_size`, `pages`). Adapters build the classes directly.
 */
function create(context: CreateLayerContext): TransformerLayer<any> {
  const { gpu, weights, limits } = context;
  const precision = context.precision ?? F32_PRECISION;
  const config = textConfig(context.config);
  const std = stdOptions(context.config);
  const f = fields(config, `std ${context.layerType} layer`);
  const modelType = String(config.model_type ?? '');
  switch (context.layerType) {
    case 'embedding':
      return new EmbeddingLayer(gpu, weights, limits, {
        vocab: f.int('vocab_size'), hidden: f.int('hidden_size'), scale: (std.embed_scale as number | undefined) ?? 1, precision,
      });
    case 'rms-norm':
      return new RmsNormLayer(gpu, weights, limits, {
        hidden: (std.width as number | undefined) ?? f.int('hidden_size'), eps: f.num('rms_norm_eps', 1e-6),
        offset: ((std.norm_offset as 0 | 1 | undefined) ?? (UNIT_OFFSET_NORMS.has(modelType) ? 1 : 0)), precision,
      });
    case 'layer-norm':
      return new LayerNormLayer(gpu, weights, limits, { hidden: f.int('hidden_size'), eps: f.num('layer_norm_eps', 1e-5), precision });
    case 'mlp':
      f.silu();
      return new MlpLayer(gpu, weights, limits, { hidden: f.int('hidden_size'), inter: f.int('intermediate_size'), precision });
    case 'moe':
      return new MoeLayer(gpu, weights, limits, { ...(modelType === 'glm_moe_dsa' ? glmMoeOptions(config) : qwen3NextMoeOptions(config)), precision });
    case 'attention':
      return new AttentionLayer(gpu, weights, limits, { ...qwen3NextAttentionOptions(config), precision });
    case 'lm-head':
      return new LmHeadLayer(gpu, weights, limits, { hidden: f.int('hidden_size'), vocab: f.int('vocab_size'), precision });
    default:
      throw new InvalidArgumentError(`@metrale/layer-std has no layer type '${context.layerType}' (it has ${STD_LAYER_TYPES.join(', ')})`);
  }
}

/** The plugin a metrale application loads: the standard blocks every model needs. */
export const plugin = definePlugin({
  name: '@metrale/layer-std',
  specificationVersion: '1.0.0',
  layerTypes: [...STD_LAYER_TYPES],
  modelTypes: ['qwen3_next', 'glm_moe_dsa', 'qwen3_5', 'qwen3_5_text', 'qwen3_5_moe', 'qwen3_5_moe_text'],
  create,
});
