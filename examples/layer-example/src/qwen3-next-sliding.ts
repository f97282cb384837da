import { InvalidArgumentError, type CreateLayerContext, type ModelAdapter, type ModelBuildContext, type ModelStack } from '@metrale/core';
import { AttentionLayer, MlpLayer, buildPreNormDecoder, qwen3NextAttentionOptions } from '@metrale/layer-std';
import { positiveIntField } from './sliding-window-config.js';
import { SlidingWindowLayer } from './sliding-window-layer.js';

export type Qwen3NextSlidingLayerType = 'sliding_window' | 'full_attention';

/** `layer_types` of the config: one of 'sliding_window' / 'full_attention' per layer. */
export function qwen3NextSlidingLayerTypes(config: Readonly<Record<string, unknown>>): Qwen3NextSlidingLayerType[] {
  const n = positiveIntField(config, 'num_hidden_layers');
  const given = config.layer_types;
  if (!Array.isArray(given) || given.length !== n) throw new InvalidArgumentError(`config.layer_types must list ${n} layer types (num_hidden_layers), got ${JSON.stringify(given)}`);
  return given.map((t, i) => {
    if (t !== 'sliding_window' && t !== 'full_attention') throw new InvalidArgumentError(`config.layer_types[${i}] is ${JSON.stringify(t)}; qwen3_next_sliding layers are 'sliding_window' or 'full_attention'`);
    return t;
  });
}

/**
 * Qwen3-Next with this package's sliding-window layer where Qwen3-Next has Gated DeltaNet:
 * per layer `x += mixer(input_layernorm(x))`, `x += mlp(post_attention_layernorm(x))`, the mixer
 * being the sliding window (`sliding_attn.gain`) or Qwen3-Next's gated full attention
 * (`self_attn.*`, from @metrale/layer-std), the MLP a dense SwiGLU (`mlp.*`). Norms are (1 + w)
 * RMSNorms, as in Qwen3-Next. The stack around the layers is layer-std's `buildPreNormDecoder`.
 */
function build(ctx: ModelBuildContext): ModelStack {
  const { gpu, config, limits } = ctx;
  const hidden = positiveIntField(config, 'hidden_size');
  const inter = positiveIntField(config, 'intermediate_size');
  const types = qwen3NextSlidingLayerTypes(config);
  // Read before any layer allocates: a config error names its field without device work.
  const attention = types.includes('full_attention') ? qwen3NextAttentionOptions(config) : undefined;
  return buildPreNormDecoder(ctx, {
    hidden,
    vocab: positiveIntField(config, 'vocab_size'),
    layerCount: types.length,
    eps: (config.rms_norm_eps as number | undefined) ?? 1e-6,
    normOffset: 1,
    layer: (i, scope) => ({
      type: `qwen3_next_sliding layer ${i} (${types[i]})`,
      mixer: () => {
        if (types[i] === 'full_attention') return new AttentionLayer(gpu, scope('self_attn.'), limits, attention!);
        const context: CreateLayerContext = { gpu, layerType: 'sliding-window', config, layerIndex: i, weights: scope('sliding_attn.'), limits };
        // Whichever plugin the application chose for 'sliding-window' (this one unless another is preferred).
        return ctx.plugins?.find('sliding-window')?.create(context) ?? new SlidingWindowLayer(context);
      },
      mlp: () => new MlpLayer(gpu, scope('mlp.'), limits, { hidden, inter }),
    }),
  });
}

/** The architecture this plugin brings: model_type `qwen3_next_sliding`. */
export const qwen3NextSlidingAdapter: ModelAdapter = {
  modelType: 'qwen3_next_sliding',
  description: 'Qwen3-Next with the sliding-window layer in place of Gated DeltaNet, gated full attention, dense SwiGLU MLPs',
  build,
};
