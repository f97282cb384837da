import {
  BlockScratch, DecoderBlock, WeightsError, scopeWeights,
  type ModelAdapter, type ModelBuildContext, type ModelStack, type TransformerLayer,
} from '@metrale/core';
import { plugin as gdnPlugin } from '@metrale/layer-gdn';
import {
  AttentionLayer, EmbeddingLayer, LmHeadLayer, MlpLayer, MoeLayer, RmsNormLayer,
  qwen3NextAttentionOptions, qwen3NextMoeOptions, requireResidualAdd, residualAdd,
} from '@metrale/layer-std';
import { eosTokenIds, intField } from './config-fields.js';

export type Qwen3NextLayerType = 'linear_attention' | 'full_attention';

/** `layer_types`, or the pattern `full_attention_interval` (default 4) gives: every 4th layer is full attention. */
export function qwen3NextLayerTypes(config: Readonly<Record<string, unknown>>): Qwen3NextLayerType[] {
  const n = intField(config, 'num_hidden_layers');
  const given = config.layer_types;
  if (Array.isArray(given)) {
    if (given.length < n) throw new WeightsError(`config.layer_types lists ${given.length} layers, but num_hidden_layers is ${n}`);
    return given.slice(0, n).map((t, i) => {
      if (t !== 'linear_attention' && t !== 'full_attention') throw new WeightsError(`config.layer_types[${i}] is ${JSON.stringify(t)}; qwen3_next layers are 'linear_attention' or 'full_attention'`);
      return t;
    });
  }
  const interval = config.full_attention_interval === undefined ? 4 : intField(config, 'full_attention_interval');
  return Array.from({ length: n }, (_, i) => ((i + 1) % interval === 0 ? 'full_attention' : 'linear_attention'));
}

/** Whether layer i's feed-forward is the sparse MoE block (as `Qwen3NextDecoderLayer` decides). */
export function qwen3NextIsMoe(config: Readonly<Record<string, unknown>>, i: number): boolean {
  const only = Array.isArray(config.mlp_only_layers) ? (config.mlp_only_layers as number[]) : [];
  const experts = (config.num_experts as number | undefined) ?? 0;
  const step = (config.decoder_sparse_step as number | undefined) ?? 1;
  return !only.includes(i) && experts > 0 && (i + 1) % step === 0;
}

/**
 * Qwen3-Next (`Qwen3NextForCausalLM`): per layer `x += mixer(input_layernorm(x))`, then
 * `x += mlp(post_attention_layernorm(x))`; the mixer is Gated DeltaNet (`linear_attn.*`, from
 * @metrale/layer-gdn or whichever plugin provides 'gdn') or gated full attention (`self_attn.*`),
 * the MLP a MoE with a gated shared expert or a dense SwiGLU. All norms are (1 + w) RMSNorms.
 */
function build(ctx: ModelBuildContext): ModelStack {
  const { gpu, config, weights: w, limits } = ctx;
  const hidden = intField(config, 'hidden_size');
  const vocab = intField(config, 'vocab_size');
  const eps = (config.rms_norm_eps as number | undefined) ?? 1e-6;
  const types = qwen3NextLayerTypes(config);
  const gdn = ctx.plugins?.find('gdn') ?? gdnPlugin;
  requireResidualAdd(gpu);
  const scratch = new BlockScratch(gpu, 4 * hidden, limits.maxRows);
  const layers: TransformerLayer<any>[] = [];
  const scope = (prefix: string) => scopeWeights(w, prefix);
  const norm = (prefix: string) => new RmsNormLayer(gpu, scope(prefix), limits, { hidden, eps, offset: 1 });
  try {
    layers.push(new EmbeddingLayer(gpu, scope('model.embed_tokens.'), limits, { vocab, hidden }));
    types.forEach((type, i) => {
      const at = `model.layers.${i}.`;
      const parts: TransformerLayer<any>[] = [];
      try {
        parts.push(norm(`${at}input_layernorm.`));
        parts.push(
          type === 'linear_attention'
            ? gdn.create({ gpu, layerType: 'gdn', config, layerIndex: i, weights: scope(`${at}linear_attn.`), limits })
            : new AttentionLayer(gpu, scope(`${at}self_attn.`), limits, qwen3NextAttentionOptions(config)),
        );
        parts.push(norm(`${at}post_attention_layernorm.`));
        parts.push(
          qwen3NextIsMoe(config, i)
            ? new MoeLayer(gpu, scope(`${at}mlp.`), limits, qwen3NextMoeOptions(config))
            : new MlpLayer(gpu, scope(`${at}mlp.`), limits, { hidden, inter: intField(config, 'intermediate_size') }),
        );
      } catch (error) {
        for (const p of parts) p.dispose();
        throw error;
      }
      layers.push(new DecoderBlock({ gpu, type: `qwen3_next layer ${i} (${type})`, branches: [parts.slice(0, 2), parts.slice(2)], add: residualAdd, scratch }));
    });
    layers.push(norm('model.norm.'));
    const tied = !w.has('lm_head.weight') && config.tie_word_embeddings === true;
    layers.push(new LmHeadLayer(gpu, scope(tied ? 'model.embed_tokens.' : 'lm_head.'), limits, { hidden, vocab }));
  } catch (error) {
    for (const l of layers) l.dispose();
    scratch.dispose();
    throw error;
  }
  return {
    layers,
    vocabSize: vocab,
    eosTokenIds: eosTokenIds(config),
    dispose() {
      for (const l of layers) l.dispose();
      scratch.dispose();
    },
  };
}

export const qwen3NextAdapter: ModelAdapter = {
  modelType: 'qwen3_next',
  description: 'Qwen3-Next: Gated DeltaNet and gated full attention, MoE with a gated shared expert',
  build,
};
