type Config = Readonly<Record<string, unknown>>;

/** The config of a multimodal checkpoint nests its language model's fields in `text_config`. */
function nestedText(config: Config): Config | undefined {
  const t = config.text_config;
  return typeof t === 'object' && t !== null && !Array.isArray(t) ? (t as Config) : undefined;
}

/** Whether config.json is a multimodal model's (a `text_config` beside a vision or audio tower's config). */
export function isMultimodalConfig(config: Config): boolean {
  return nestedText(config) !== undefined;
}

/** Where the text model's fields of `config` sit, for messages: `config` or `config.text_config`. */
export function textConfigWhere(config: Config): string {
  return isMultimodalConfig(config) ? 'config.text_config' : 'config';
}

/**
 * The language model's config of a checkpoint, as one flat object: the config itself, or for a
 * multimodal checkpoint (Qwen3.5's published `Qwen3_5ForConditionalGeneration`: `text_config`
 * beside `vision_config`) its `text_config`, with what the whole model decides at the top level:
 * `tie_word_embeddings` (the vision-language model ties `lm_head.weight` to the text embedding by
 * its own flag, default false, whatever `text_config` says) and the `eos_token_id` and `dtype`
 * the text config lacks.
 */
export function textConfigOf(config: Config): Config {
  const text = nestedText(config);
  if (!text) return config;
  return {
    ...text,
    model_type: text.model_type ?? config.model_type,
    tie_word_embeddings: config.tie_word_embeddings ?? false,
    eos_token_id: text.eos_token_id ?? config.eos_token_id,
    ...(text.dtype ?? config.dtype ? { dtype: text.dtype ?? config.dtype } : {}),
  };
}

/**
 * The line `serve` and `generate` show when they load a multimodal checkpoint: metrale serves its
 * text model only. Undefined for a text-only checkpoint.
 */
export function textOnlyNotice(config: Config): string | undefined {
  if (!isMultimodalConfig(config)) return undefined;
  const towers = ['vision_config', 'audio_config'].filter((k) => config[k] !== undefined).map((k) => k.replace('_config', ''));
  const inputs = towers.includes('audio') ? (towers.includes('vision') ? 'images, video and audio' : 'audio') : 'images and video';
  return `${String(config.model_type)} is a multimodal checkpoint: metrale serves its text model only (prompts are text; ${inputs} are not accepted, and its ${towers.length ? towers.join(' and ') : 'non-text'} tower is not loaded)`;
}
