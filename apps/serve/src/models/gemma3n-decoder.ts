import {
  F32_PRECISION, InvalidArgumentError, eosTokenIds, readF32, roundTo, scopeWeights,
  type GpuBackend, type LayerLimits, type MetralePlugin, type ModelBuildContext, type ModelStack, type Precision, type TransformerLayer, type WeightSource,
} from '@metrale/core';
import {
  AltUpCorrectLayer, AltUpPredictLayer, AltUpStreamsIn, AltUpStreamsOut, Gemma3nDecoderLayer, Gemma3nScratch, LaurelLayer, asRowValues, isRanged, plugin as plePlugin,
  rangedPrefix, type Gemma3nDecoderParts,
} from '@metrale/layer-ple';
import { AttentionLayer, EmbeddingLayer, LmHeadLayer, MlpLayer, RmsNormLayer, sparsityCutoff, type AttentionOptions } from '@metrale/layer-std';
import { gemma3nText, kvSourceOf, type Gemma3nText } from './gemma3n-config.js';
import { gemma3nTextWeights } from './gemma3n-weights.js';
import { isMultimodalConfig } from './text-config.js';

/**
 * A Gemma 3n text model (`Gemma3nForCausalLM`, or the text path of `Gemma3nForConditionalGeneration`),
 * docs/models/gemma3n-text.md: the embedding × sqrt(H); the AltUp streams (layer-ple's
 * `AltUpStreamsIn`); per layer a `Gemma3nDecoderLayer` of AltUp predict/correct, Laurel, attention
 * (q/k norms with plain w, v_norm without weight, scale 1, a sliding window on sliding layers, each
 * type its own RoPE θ, KV sharing for the last `num_kv_shared_layers`), the GELU-tanh MLP of the
 * layer's width with its activation sparsity, and the per-layer input path (layer-ple's PLE, or
 * whichever plugin provides 'ple'); the streams' mean (`AltUpStreamsOut`), the final norm, and the
 * tied head with final logit soft-capping. One device: no tensor parallelism.
 */
export function buildGemma3n(ctx: ModelBuildContext): ModelStack {
  const t = gemma3nText(ctx.config);
  if (ctx.parallel && ctx.parallel.size > 1) {
    throw new InvalidArgumentError(`${String(ctx.config.model_type)}: tensor parallelism is not supported for Gemma 3n yet; serve it on one device (--tensor-parallel-size 1)`);
  }
  const { gpu, limits } = ctx;
  const precision = ctx.precision ?? F32_PRECISION;
  const rows = precision.rows;
  const weights = gemma3nTextWeights(ctx.weights, isMultimodalConfig(ctx.config));
  const model = scopeWeights(weights, 'model.');
  // The per-layer input path reads the per-layer table a row at a time where the checkpoint can
  // (`rangedPrefix` keeps `info` / `readRange`, which `scopeWeights` drops): at E4B the table is
  // 262 144 × 8 960 bf16 = 4.7 GB, more than one buffer holds, and it stays on the host.
  const pleWeights = isRanged(weights) ? rangedPrefix(weights, 'model.') : model;
  const H = t.hidden;
  const layers: TransformerLayer<any>[] = [];
  const scratch = new Gemma3nScratch(gpu, H, t.streams, limits.maxRows, rows);
  const norm = (w: WeightSource) => gemma3nNorm(gpu, w, limits, H, t.eps, precision);
  const ple = ctx.plugins?.find('ple') ?? plePlugin;
  try {
    // HF holds sqrt(H) as f32 and casts it to the weights' type.
    const embedScale = roundTo(rows, Math.sqrt(H));
    layers.push(new EmbeddingLayer(gpu, scopeWeights(model, 'embed_tokens.'), limits, { vocab: t.vocab, hidden: H, scale: embedScale, precision }));
    layers.push(new AltUpStreamsIn(gpu, model, limits, { hidden: H, streams: t.streams, precision }));
    const attention: AttentionLayer[] = [];
    const parts = { gpu, model, pleWeights, t, limits, precision, scratch, ple, modelType: String(ctx.config.model_type) };
    for (let l = 0; l < t.layers; l++) layers.push(buildGemma3nDecoderLayer(parts, l, attention));
    layers.push(new AltUpStreamsOut(gpu, model, limits, { hidden: H, streams: t.streams, precision }));
    layers.push(norm(scopeWeights(model, 'norm.')));
    const head = weights.has('lm_head.weight') ? scopeWeights(weights, 'lm_head.') : scopeWeights(model, 'embed_tokens.');
    layers.push(new LmHeadLayer(gpu, head, limits, { hidden: H, vocab: t.vocab, precision, ...(t.softcap !== undefined ? { softcap: t.softcap } : {}) }));
  } catch (error) {
    for (const l of layers) l.dispose();
    scratch.dispose();
    throw error;
  }
  return {
    layers,
    vocabSize: t.vocab,
    eosTokenIds: eosTokenIds(t.config),
    dispose() {
      for (const l of layers) l.dispose();
      scratch.dispose();
    },
  };
}

/**
 * A `Gemma3nRMSNorm` with its weight (plain w): `(x̂ · w).type_as(x)`, the product f32 and rounded
 * once to the row type (not x̂ first, as Llama's norm does).
 */
function gemma3nNorm(gpu: GpuBackend, w: WeightSource, limits: LayerLimits, hidden: number, eps: number, precision: Precision): RmsNormLayer {
  return new RmsNormLayer(gpu, w, limits, { hidden, eps, offset: 0, roundNormalized: false, precision });
}

/** What decoder layer l is built from: the model's tensors (`model.` removed), its config, the shared scratch and the 'ple' provider. */
export interface Gemma3nLayerParts {
  readonly gpu: GpuBackend;
  readonly model: WeightSource;
  /** The same tensors for the 'ple' layer, with ranged reads where the checkpoint has them (default `model`). */
  readonly pleWeights?: WeightSource;
  readonly t: Gemma3nText;
  readonly limits: LayerLimits;
  readonly precision: Precision;
  readonly scratch: Gemma3nScratch;
  readonly ple: MetralePlugin;
  /** Shown in the layer's type (`gemma3n_text layer 3 (sliding_attention)`). */
  readonly modelType: string;
}

/**
 * Decoder layer l (`Gemma3nTextDecoderLayer`) from its parts. `attention` holds layers 0 … l − 1's
 * attention (a KV-shared layer reads its source's cache); layer l's is appended to it.
 */
export function buildGemma3nDecoderLayer(p: Gemma3nLayerParts, l: number, attention: AttentionLayer[]): Gemma3nDecoderLayer {
  const { gpu, model, t, limits, precision } = p;
  const H = t.hidden;
  const lw = scopeWeights(model, `layers.${l}.`);
  const norm = (w: WeightSource) => gemma3nNorm(gpu, w, limits, H, t.eps, precision);
  const altup = { hidden: H, streams: t.streams, active: t.active, eps: t.eps, precision };
  const source = kvSourceOf(t, l);
  const parts: Partial<Record<string, TransformerLayer<any>>> = {};
  try {
    parts.predict = new AltUpPredictLayer(gpu, scopeWeights(lw, 'altup.'), limits, altup);
    parts.inputNorm = norm(scopeWeights(lw, 'input_layernorm.'));
    parts.laurel = new LaurelLayer(gpu, scopeWeights(lw, 'laurel.'), limits, { hidden: H, rank: t.laurelRank, eps: t.eps, precision });
    const a = new AttentionLayer(gpu, scopeWeights(lw, 'self_attn.'), limits, attentionOptions(t, l, source === l ? undefined : attention[source], precision));
    parts.attention = a;
    parts.postAttentionNorm = norm(scopeWeights(lw, 'post_attention_layernorm.'));
    parts.preFeedforwardNorm = norm(scopeWeights(lw, 'pre_feedforward_layernorm.'));
    const cutoff = sparsityCutoff(t.sparsity[l]!, `${t.where}.activation_sparsity_pattern[${l}]`);
    parts.mlp = new MlpLayer(gpu, scopeWeights(lw, 'mlp.'), limits, {
      hidden: H, inter: t.inter[l]!, activation: { kind: 'gelu_tanh', ...(cutoff !== undefined ? { cutoff } : {}) }, precision,
    });
    parts.postFeedforwardNorm = norm(scopeWeights(lw, 'post_feedforward_layernorm.'));
    parts.correct = new AltUpCorrectLayer(gpu, scopeWeights(lw, 'altup.'), limits, altup);
    parts.ple = p.ple.create({ gpu, layerType: 'ple', config: t.config, layerIndex: l, weights: p.pleWeights ?? model, limits, precision });
    const scale = t.correctScale ? asRowValues(readF32(lw, 'altup.correct_output_scale', [H]), precision.rows) : undefined;
    const layer = new Gemma3nDecoderLayer(parts as unknown as Gemma3nDecoderParts, {
      type: `${p.modelType} layer ${l} (${t.types[l]})`, limits, scratch: p.scratch, ...(scale ? { correctOutputScale: scale } : {}),
    });
    attention.push(a);
    return layer;
  } catch (error) {
    for (const part of Object.values(parts)) part?.dispose();
    throw error;
  }
}

/** Layer l's attention: Gemma3nTextAttention's options (q/k norms Gemma3nRMSNorm, rounded once), reading `kvSource`'s cache when shared. */
function attentionOptions(t: Gemma3nText, l: number, kvSource: AttentionLayer | undefined, precision: AttentionOptions['precision']): AttentionOptions {
  const type = t.types[l]!;
  return {
    hidden: t.hidden, heads: t.heads, kvHeads: t.kvHeads, headDim: t.headDim, gated: false, qkNorm: true, normOffset: 0, roundNormalized: false, eps: t.eps,
    rotaryDim: t.headDim, ropeTheta: t.thetas[type], scale: 1, vNorm: true, ...(type === 'sliding_attention' ? { window: t.window } : {}),
    ...(kvSource ? { kvSource } : {}), ...(precision ? { precision } : {}),
  };
}
