import { WeightsError, type ModelAdapter, type ModelBuildContext, type ModelStack } from '@metrale/core';
import { intField } from './config-fields.js';
import { buildQwenHybridDecoder } from './qwen-hybrid-decoder.js';
import { qwen3NextShardRule } from './qwen3-next-sharding.js';

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
 * Under tensor parallelism each rank builds its share of heads and intermediates
 * (`qwen3NextRankConfig`) from its parts of the tensors (`qwen3NextShardRule`); with expert
 * parallelism its MoE holds whole experts instead.
 */
function build(ctx: ModelBuildContext): ModelStack {
  return buildQwenHybridDecoder(ctx, { text: ctx.config, shardRule: qwen3NextShardRule(ctx.config), types: qwen3NextLayerTypes, isMoe: qwen3NextIsMoe, label: 'qwen3_next' });
}

export const qwen3NextAdapter: ModelAdapter = {
  modelType: 'qwen3_next',
  description: 'Qwen3-Next: Gated DeltaNet and gated full attention, MoE with a gated shared expert',
  build,
  shardRule: qwen3NextShardRule,
};
