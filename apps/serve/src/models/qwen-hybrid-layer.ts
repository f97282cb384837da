import { F32_PRECISION, type ModelBuildContext, type WeightSource } from '@metrale/core';
import { plugin as gdnPlugin } from '@metrale/layer-gdn';
import { AttentionLayer, MlpLayer, MoeLayer, type AttentionOptions, type MoeOptions } from '@metrale/layer-std';

/** What layer i of a Qwen3-Next-family model feeds forward through: a MoE, or a dense SwiGLU of `inter`. */
export type QwenFeedForward = { readonly moe: MoeOptions } | { readonly inter: number };

/**
 * The layers of the Qwen3-Next family (Qwen3-Next, Qwen3.5), for buildPreNormDecoder: the mixer is
 * Gated DeltaNet (`linear_attn.*`, from @metrale/layer-gdn or whichever plugin provides 'gdn') for
 * 'linear_attention' layers, else gated full attention (`self_attn.*`); the feed-forward (`mlp.*`)
 * as `feedForward(i)` says. `config` is the (rank's) text config the layers read.
 */
export function qwenHybridLayer(
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
