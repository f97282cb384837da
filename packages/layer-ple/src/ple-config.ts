import { InvalidArgumentError } from '@metrale/core';

/** The activations Hugging Face names for GELU with the tanh approximation (`gelu_pytorch_tanh` in Gemma 3n). */
const TANH_GELUS = new Set(['gelu_pytorch_tanh', 'gelu_python_tanh', 'gelu_new']);

/** What the per-layer input path of one Gemma 3n decoder layer needs from the model config. */
export interface PleConfig {
  /** `model_type` of the text config (`gemma3n_text`), or of the config given when it has none. */
  readonly modelType: string;
  /** D: `hidden_size`. */
  readonly hidden: number;
  /** P: `hidden_size_per_layer_input`. */
  readonly perLayer: number;
  /** L: `num_hidden_layers`. */
  readonly layers: number;
  /** Rows of `embed_tokens` (`vocab_size`): token ids must lie in [0, vocab). */
  readonly vocab: number;
  /** Rows of the per-layer table (`vocab_size_per_layer_input`); ids at or past it read row 0. */
  readonly tableVocab: number;
  /** `rms_norm_eps` of both RMSNorms. */
  readonly eps: number;
  /** The decoder layer this layer is (`layer_idx`), 0 ≤ l < L. */
  readonly layerIndex: number;
  /** L·P: elements of one table row. */
  readonly rowElems: number;
}

/**
 * The text config of a Gemma 3n config: its `text_config` for a whole `gemma3n` config (one without
 * `hidden_size_per_layer_input` of its own), else the config itself; `where` names it in errors.
 */
export function gemma3nTextConfig(config: Readonly<Record<string, unknown>>): { readonly c: Readonly<Record<string, unknown>>; readonly where: string } {
  const text = config.text_config;
  if (typeof text === 'object' && text !== null && !Array.isArray(text) && config.hidden_size_per_layer_input === undefined) {
    return { c: text as Record<string, unknown>, where: 'config.text_config' };
  }
  return { c: config, where: 'config' };
}

/**
 * Reads a Gemma 3n text config (or a whole `gemma3n` config, whose `text_config` it descends
 * into), naming the field on every error.
 */
export function readPleConfig(config: Readonly<Record<string, unknown>>, layerIndex: number): PleConfig {
  const { c, where } = gemma3nTextConfig(config);
  const int = (name: string): number => {
    const v = c[name];
    if (!Number.isSafeInteger(v) || (v as number) < 1) throw new InvalidArgumentError(`ple: ${where}.${name} must be a positive integer, got ${JSON.stringify(v)}`);
    return v as number;
  };
  const hidden = int('hidden_size');
  const perLayer = int('hidden_size_per_layer_input');
  const layers = int('num_hidden_layers');
  const vocab = int('vocab_size');
  const tableVocab = int('vocab_size_per_layer_input');
  const eps = c.rms_norm_eps ?? 1e-6;
  if (typeof eps !== 'number' || !(eps > 0) || !Number.isFinite(eps)) {
    throw new InvalidArgumentError(`ple: ${where}.rms_norm_eps must be a positive number, got ${JSON.stringify(eps)}`);
  }
  const act = c.hidden_activation ?? 'gelu_pytorch_tanh';
  if (typeof act !== 'string' || !TANH_GELUS.has(act)) {
    throw new InvalidArgumentError(
      `ple: ${where}.hidden_activation is ${JSON.stringify(act)}; the per-layer gate runs GELU with the tanh approximation (${[...TANH_GELUS].join(', ')})`,
    );
  }
  if (!Number.isSafeInteger(layerIndex) || layerIndex < 0 || layerIndex >= layers) {
    throw new InvalidArgumentError(`ple: layer index ${layerIndex} is outside the model's ${layers} layers (${where}.num_hidden_layers)`);
  }
  const modelType = typeof c.model_type === 'string' ? c.model_type : typeof config.model_type === 'string' ? config.model_type : 'gemma3n_text';
  return { modelType, hidden, perLayer, layers, vocab, tableVocab, eps, layerIndex, rowElems: layers * perLayer };
}
