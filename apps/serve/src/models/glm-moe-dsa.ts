import { F32_PRECISION, WeightsError, type ModelAdapter, type ModelBuildContext, type ModelStack } from '@metrale/core';
import { plugin as dsaPlugin, readDsaConfig } from '@metrale/layer-dsa';
import { MlpLayer, MoeLayer, buildPreNormDecoder, expertParallelMoe, expertParallelShardRule, glmMoeOptions } from '@metrale/layer-std';
import { intField } from './config-fields.js';
import { glmMoeDsaRankConfig, glmMoeDsaShardRule } from './glm-moe-dsa-sharding.js';

export type GlmMlpType = 'dense' | 'sparse';

/**
 * Each layer's feed-forward, as `GlmMoeDsaConfig` decides it: `mlp_layer_types` when given
 * ('dense' or 'sparse'), else the first `first_k_dense_replace` layers (default 3) dense and the
 * rest MoE.
 */
export function glmMlpLayerTypes(config: Readonly<Record<string, unknown>>): GlmMlpType[] {
  const n = intField(config, 'num_hidden_layers');
  const given = config.mlp_layer_types;
  if (given !== undefined && given !== null) {
    if (!Array.isArray(given)) throw new WeightsError(`config.mlp_layer_types must be a list of 'dense' / 'sparse', got ${JSON.stringify(given)}`);
    if (given.length < n) throw new WeightsError(`config.mlp_layer_types lists ${given.length} layers, but num_hidden_layers is ${n}`);
    return given.slice(0, n).map((t, i) => {
      if (t !== 'dense' && t !== 'sparse') throw new WeightsError(`config.mlp_layer_types[${i}] is ${JSON.stringify(t)}; glm_moe_dsa feed-forwards are 'dense' or 'sparse'`);
      return t;
    });
  }
  const raw = config.first_k_dense_replace ?? 3;
  if (!Number.isSafeInteger(raw) || (raw as number) < 0) throw new WeightsError(`config.first_k_dense_replace must be a non-negative integer, got ${JSON.stringify(raw)}`);
  const dense = Math.min(raw as number, n);
  return Array.from({ length: n }, (_, i) => (i < dense ? 'dense' : 'sparse'));
}

/**
 * GLM-5 (`GlmMoeDsaForCausalLM`, model_type `glm_moe_dsa`): per layer
 * `x += self_attn(input_layernorm(x))`, then `x += mlp(post_attention_layernorm(x))`. The
 * attention is MLA restricted to the lightning indexer's top-k (`self_attn.*`, layer type 'dsa'
 * from @metrale/layer-dsa or whichever plugin provides it; 'shared' indexer layers reuse the
 * previous full layer's selection); the feed-forward is a dense SwiGLU (`mlp.gate_proj` …) or the
 * DeepSeek-V3-routed MoE (`mlp.gate.weight`, `mlp.gate.e_score_correction_bias`, `mlp.experts.*`,
 * `mlp.shared_experts.*`). All norms are plain w · x̂ RMSNorms (eps `rms_norm_eps`). Under tensor
 * parallelism each rank builds its share of MLA heads and intermediates (`glmMoeDsaRankConfig`).
 */
function build(ctx: ModelBuildContext): ModelStack {
  const precision = ctx.precision ?? F32_PRECISION;
  const { gpu, limits } = ctx;
  const parallel = ctx.parallel && ctx.parallel.size > 1 ? ctx.parallel : undefined;
  const ep = parallel?.expertParallel === true;
  const config = glmMoeDsaRankConfig(ctx.config, parallel?.size ?? 1, ep);
  const hidden = intField(config, 'hidden_size');
  const mlpTypes = glmMlpLayerTypes(config);
  const dsa = ctx.plugins?.find('dsa') ?? dsaPlugin;
  // Read once, before any layer allocates: a config error names its field without device work.
  const moe = !mlpTypes.includes('sparse') ? undefined
    : ep ? expertParallelMoe(glmMoeOptions(config), parallel!.rank, parallel!.size, 'n_routed_experts') : glmMoeOptions(config);
  const denseInter = mlpTypes.includes('dense') ? intField(config, 'intermediate_size') : 0;
  // The DSA layer refuses caches shorter than index_topk (GLM-5: 2048); a short run (maxSeqLen
  // below it) gets caches of index_topk positions instead. Nothing changes but memory: a row never
  // sees more than maxSeqLen keys, so its top-k is all of them either way.
  const topk = readDsaConfig(config, 0).topk;
  const attentionLimits = topk > limits.maxSeqLen ? { ...limits, maxSeqLen: topk } : limits;
  return buildPreNormDecoder(ctx, {
    ...(parallel ? { shard: ep ? expertParallelShardRule(glmMoeDsaShardRule(ctx.config)) : glmMoeDsaShardRule(ctx.config) } : {}),
    hidden,
    vocab: intField(config, 'vocab_size'),
    layerCount: mlpTypes.length,
    eps: (config.rms_norm_eps as number | undefined) ?? 1e-5,
    normOffset: 0,
    layer: (i, scope) => ({
      type: `glm_moe_dsa layer ${i} (${mlpTypes[i] === 'sparse' ? 'moe' : 'dense'})`,
      // The same config object for every layer: a shared indexer layer finds its full layer by it.
      mixer: () => dsa.create({ gpu, layerType: 'dsa', config, layerIndex: i, weights: scope('self_attn.'), limits: attentionLimits, precision }),
      mlp: () =>
        mlpTypes[i] === 'sparse'
          ? new MoeLayer(gpu, scope('mlp.'), limits, { ...moe!, precision })
          : new MlpLayer(gpu, scope('mlp.'), limits, { hidden, inter: denseInter, precision }),
    }),
  });
}

export const glmMoeDsaAdapter: ModelAdapter = {
  modelType: 'glm_moe_dsa',
  description: 'GLM-5: MLA with DeepSeek sparse attention (lightning indexer, top-k), dense first layers, sigmoid-routed MoE with shared experts',
  build,
  shardRule: glmMoeDsaShardRule,
};
