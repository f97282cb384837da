import { F32_PRECISION, type ModelBuildContext, type ModelStack, type ShardRule, type WeightSource } from '@metrale/core';
import { plugin as gdnPlugin } from '@metrale/layer-gdn';
import {
  AttentionLayer, MlpLayer, MoeLayer, buildPreNormDecoder, expertParallelMoe, expertParallelShardRule, qwen3NextAttentionOptions, qwen3NextMoeOptions,
  type AttentionOptions, type MoeOptions,
} from '@metrale/layer-std';
import { intField } from './config-fields.js';
import { qwen3NextRankConfig } from './qwen3-next-sharding.js';

/** What layer i of a Qwen3-Next-family model feeds forward through: a MoE, or a dense SwiGLU of `inter`. */
type QwenFeedForward = { readonly moe: MoeOptions } | { readonly inter: number };

/**
 * The layers of the Qwen3-Next family (Qwen3-Next, Qwen3.5), for buildPreNormDecoder: the mixer is
 * Gated DeltaNet (`linear_attn.*`, from @metrale/layer-gdn or whichever plugin provides 'gdn') for
 * 'linear_attention' layers, else gated full attention (`self_attn.*`); the feed-forward (`mlp.*`)
 * as `feedForward(i)` says. `config` is the (rank's) text config the layers read.
 */
function qwenHybridLayer(
  ctx: ModelBuildContext, config: Readonly<Record<string, unknown>>, types: readonly string[], attention: AttentionOptions,
  hidden: number, feedForward: (i: number) => QwenFeedForward, label: string,
) {
  const { gpu, limits } = ctx;
  const precision = ctx.precision ?? F32_PRECISION;
  const gdn = ctx.plugins?.find('gdn') ?? gdnPlugin;
  return (i: number, scope: (prefix: string) => WeightSource) => ({
    type: `${label} layer ${i} (${types[i]})`,
    mixer: () =>
      types[i] === 'linear_attention'
        ? gdn.create({ gpu, layerType: 'gdn', config, layerIndex: i, weights: scope('linear_attn.'), limits, precision })
        : new AttentionLayer(gpu, scope('self_attn.'), limits, { ...attention, precision }),
    mlp: () => {
      const ff = feedForward(i);
      return 'moe' in ff
        ? new MoeLayer(gpu, scope('mlp.'), limits, { ...ff.moe, precision })
        : new MlpLayer(gpu, scope('mlp.'), limits, { hidden, inter: ff.inter, precision });
    },
  });
}

/** What distinguishes one Qwen3-Next-family architecture in `buildQwenHybridDecoder`. */
export interface QwenHybridModel {
  /** The text model's config (the whole model's, before tensor parallelism). */
  readonly text: Readonly<Record<string, unknown>>;
  /** Where the text fields sit, for messages (`config` or `config.text_config`). */
  readonly where?: string;
  /** How its tensors split among tensor-parallel ranks. */
  readonly shardRule: ShardRule;
  /** Its layer types, from the rank's config. */
  readonly types: (config: Readonly<Record<string, unknown>>) => readonly string[];
  /** Whether layer i's feed-forward is the MoE (else a dense SwiGLU of `intermediate_size`). */
  readonly isMoe: (config: Readonly<Record<string, unknown>>, i: number) => boolean;
  readonly label: string;
}

/**
 * A Qwen3-Next-family decoder (`ctx.weights` already the text model's tensors): per layer
 * `x += mixer(input_layernorm(x))`, `x += mlp(post_attention_layernorm(x))`, (1 + w) RMSNorms.
 * Under tensor parallelism each rank builds its share (`qwen3NextRankConfig`) from its parts of
 * the tensors (`shardRule`); with expert parallelism its MoE holds whole experts instead. The
 * attention and MoE options are read once, before any layer allocates.
 */
export function buildQwenHybridDecoder(ctx: ModelBuildContext, m: QwenHybridModel): ModelStack {
  const parallel = ctx.parallel && ctx.parallel.size > 1 ? ctx.parallel : undefined;
  const ep = parallel?.expertParallel === true;
  const config = qwen3NextRankConfig(m.text, parallel?.size ?? 1, ep, m.where);
  const types = m.types(config);
  const hidden = intField(config, 'hidden_size');
  const anyMoe = types.some((_, i) => m.isMoe(config, i));
  const moe = anyMoe ? (ep ? expertParallelMoe(qwen3NextMoeOptions(config), parallel!.rank, parallel!.size, 'num_experts') : qwen3NextMoeOptions(config)) : undefined;
  const inter = types.every((_, i) => m.isMoe(config, i)) ? 0 : intField(config, 'intermediate_size');
  const shard = parallel ? (ep ? expertParallelShardRule(m.shardRule) : m.shardRule) : undefined;
  return buildPreNormDecoder(ctx, {
    ...(shard ? { shard } : {}),
    hidden,
    vocab: intField(config, 'vocab_size'),
    layerCount: types.length,
    eps: (config.rms_norm_eps as number | undefined) ?? 1e-6,
    normOffset: 1,
    layer: qwenHybridLayer(ctx, config, types, qwen3NextAttentionOptions(config), hidden, (i) => (moe && m.isMoe(config, i) ? { moe } : { inter }), m.label),
  });
}
