import {
  BlockScratch, DecoderBlock, F32_PRECISION, eosTokenIds, floatBytes, scopeWeights, shardWeights, splitEvenly,
  type ModelBuildContext, type ModelStack, type ShardRule, type TransformerLayer, type WeightSource,
} from '@metrale/core';
import { AllReduceLayer } from './all-reduce-layer.js';
import { EmbeddingLayer } from './embedding-layer.js';
import { LmHeadLayer } from './lm-head-layer.js';
import { requireResidualAdd, residualAdd } from './residual-add.js';
import { RmsNormLayer } from './rms-norm-layer.js';
import { stdShardRule } from './std-shard-rule.js';
import { VocabParallelHead } from './vocab-parallel-head.js';

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
  /**
   * Under tensor parallelism (`ctx.parallel`), how the layers' tensors split among the ranks, by
   * full checkpoint name (default `stdShardRule`: attention, MLP, MoE); the mixer and MLP must be
   * made for the rank's share of heads and intermediates.
   */
  readonly shard?: ShardRule;
}

/**
 * The stack of a pre-norm decoder: `model.embed_tokens`, then per layer
 * `x += mixer(input_layernorm(x))`, `x += mlp(post_attention_layernorm(x))` as one
 * `DecoderBlock`, then `model.norm` and `lm_head` (or the tied embedding). Every residual add but
 * the last runs inside the norm after it (`std.add_rms_norm`): a block passes its MLP's output on
 * to the next block's `input_layernorm` (`pairOut` / `pairIn`). A failure while building frees
 * everything made so far.
 *
 * As rank r of a tensor-parallel group of n > 1 (`ctx.parallel`): the layers read their parts of
 * the tensors (`spec.shard`), an `AllReduceLayer` ends the mixer's and the MLP's chain (their
 * last projection gives each rank a partial sum), and the lm head is a `VocabParallelHead`. The
 * embedding and the norms are whole on every rank. With one rank nothing is added.
 */
export function buildPreNormDecoder(ctx: ModelBuildContext, spec: PreNormDecoderSpec): ModelStack {
  const { gpu, config, limits } = ctx;
  const parallel = ctx.parallel && ctx.parallel.size > 1 ? ctx.parallel : undefined;
  if (parallel) splitEvenly(spec.vocab, parallel.size, 'config.vocab_size');
  const w = parallel ? shardWeights(ctx.weights, spec.shard ?? stdShardRule, parallel.rank, parallel.size) : ctx.weights;
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
      const mixer: TransformerLayer<any>[] = [];
      const mlp: TransformerLayer<any>[] = [];
      // Each rank's mixer and MLP end in a partial sum of the full row: summed over the ranks.
      const reduce = () => new AllReduceLayer(gpu, limits, parallel!.comm, hidden, precision.rows);
      try {
        // One push per layer made, so a failure frees everything made before it.
        mixer.push(norm(`${at}input_layernorm.`));
        mixer.push(layer.mixer());
        if (parallel) mixer.push(reduce());
        mlp.push(norm(`${at}post_attention_layernorm.`));
        mlp.push(layer.mlp());
        if (parallel) mlp.push(reduce());
      } catch (error) {
        for (const p of [...mixer, ...mlp]) p.dispose();
        throw error;
      }
      // Each block leaves its last add to the next one's input norm (rows between blocks are pairs).
      const pairs = { pairIn: i > 0, pairOut: i < spec.layerCount - 1 };
      layers.push(new DecoderBlock({ gpu, type: layer.type, branches: [mixer, mlp], add: residualAdd, scratch, rowDtype: precision.rows, ...pairs }));
    }
    layers.push(norm('model.norm.'));
    const tied = !w.has('lm_head.weight') && config.tie_word_embeddings === true;
    const head = tied ? 'model.embed_tokens.' : 'lm_head.';
    if (parallel) {
      // The head's own view: its weight split by vocabulary rows (the embedding, even when tied, stays whole).
      const headWeights = shardWeights(ctx.weights, (name) => (name === `${head}weight` ? { axis: 0 } : undefined), parallel.rank, parallel.size);
      layers.push(new VocabParallelHead(gpu, scopeWeights(headWeights, head), limits, parallel.comm, { hidden, vocab, precision }));
    } else {
      layers.push(new LmHeadLayer(gpu, scope(head), limits, { hidden, vocab, precision }));
    }
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
