import {
  BlockScratch, DecoderBlock, F32_PRECISION, eosTokenIds, floatBytes, scopeWeights,
  type ModelBuildContext, type ModelStack, type TransformerLayer, type WeightSource,
} from '@metrale/core';
import { EmbeddingLayer } from './embedding-layer.js';
import { LmHeadLayer } from './lm-head-layer.js';
import { requireResidualAdd, residualAdd } from './residual-add.js';
import { RmsNormLayer } from './rms-norm-layer.js';

/** One decoder layer of a pre-norm model: its block type and how to make its two sublayers. */
export interface PreNormLayer {
  /** The block's type, for messages (`qwen3_next layer 3 (full_attention)`). */
  readonly type: string;
  /** The token mixer (attention, linear attention …), after `input_layernorm`. */
  readonly mixer: () => TransformerLayer<any>;
  /** The feed-forward (MLP, MoE …), after `post_attention_layernorm`. */
  readonly mlp: () => TransformerLayer<any>;
}

/** What differs between the pre-norm decoders of Hugging Face's `*ForCausalLM` checkpoints. */
export interface PreNormDecoderSpec {
  readonly hidden: number;
  readonly vocab: number;
  /** Layers (`model.layers.0.` …). */
  readonly layerCount: number;
  /** RMSNorm eps and convention: 0 for w · x̂, 1 for (1 + w) · x̂. */
  readonly eps: number;
  readonly normOffset: 0 | 1;
  /** Layer i, given its tensors (`model.layers.{i}.` removed). Sublayers are made in order: norm, mixer, norm, mlp. */
  readonly layer: (i: number, weights: (prefix: string) => WeightSource) => PreNormLayer;
}

/**
 * The stack of a pre-norm decoder: `model.embed_tokens`, then per layer
 * `x += mixer(input_layernorm(x))`, `x += mlp(post_attention_layernorm(x))` as one
 * `DecoderBlock`, then `model.norm` and `lm_head` (or the tied embedding). A failure while
 * building frees everything made so far.
 */
export function buildPreNormDecoder(ctx: ModelBuildContext, spec: PreNormDecoderSpec): ModelStack {
  const { gpu, config, weights: w, limits } = ctx;
  const precision = ctx.precision ?? F32_PRECISION;
  const { hidden, vocab } = spec;
  requireResidualAdd(gpu);
  // The block's sub-layers write rows of the residual stream's width and type; an MLP or mixer
  // wider than that keeps its own scratch.
  const scratch = new BlockScratch(gpu, hidden * floatBytes(precision.rows), limits.maxRows);
  const layers: TransformerLayer<any>[] = [];
  const scope = (prefix: string) => scopeWeights(w, prefix);
  const norm = (prefix: string) => new RmsNormLayer(gpu, scope(prefix), limits, { hidden, eps: spec.eps, offset: spec.normOffset, precision });
  try {
    layers.push(new EmbeddingLayer(gpu, scope('model.embed_tokens.'), limits, { vocab, hidden, precision }));
    for (let i = 0; i < spec.layerCount; i++) {
      const at = `model.layers.${i}.`;
      const layer = spec.layer(i, (prefix) => scope(at + prefix));
      const parts: TransformerLayer<any>[] = [];
      try {
        parts.push(norm(`${at}input_layernorm.`));
        parts.push(layer.mixer());
        parts.push(norm(`${at}post_attention_layernorm.`));
        parts.push(layer.mlp());
      } catch (error) {
        for (const p of parts) p.dispose();
        throw error;
      }
      layers.push(new DecoderBlock({ gpu, type: layer.type, branches: [parts.slice(0, 2), parts.slice(2)], add: residualAdd, scratch, rowDtype: precision.rows }));
    }
    layers.push(norm('model.norm.'));
    const tied = !w.has('lm_head.weight') && config.tie_word_embeddings === true;
    layers.push(new LmHeadLayer(gpu, scope(tied ? 'model.embed_tokens.' : 'lm_head.'), limits, { hidden, vocab, precision }));
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
