import { WeightsError, type WeightSource } from '@metrale/core';

/** Where the published vision-language checkpoints keep the text model's tensors. */
export const LANGUAGE_MODEL_PREFIX = 'model.language_model.';

/** The tensors of a Qwen3.5 checkpoint that its text model never reads. */
const UNREAD_PREFIXES = [
  // The vision tower of the published `Qwen3_5ForConditionalGeneration` checkpoints.
  'model.visual.',
  // The multi-token-prediction layer the published checkpoints carry; Hugging Face ignores it (`^mtp.*`).
  'mtp.',
] as const;

/** Whether a Qwen3.5 checkpoint's tensor (full name) is one the text model never reads: the vision tower or the MTP layer. */
export function qwen35UnreadTensor(name: string): boolean {
  return UNREAD_PREFIXES.some((p) => name.startsWith(p));
}

/**
 * A Qwen3.5 checkpoint's text-model tensors under a text-only checkpoint's names
 * (`model.embed_tokens.weight`, `model.layers.{i}.…`, `model.norm.weight`, `lm_head.weight`),
 * whichever layout it has: the published one (`model.language_model.*` beside `model.visual.*`
 * and `mtp.*`) or the text-only one (`model.*`). The vision tower and the MTP layer are not in
 * the view: nothing built from it can read them. Messages name the tensors as the checkpoint
 * does (`qualifiedName`), and part-reads (`readRange`, for tensor parallelism) pass through.
 */
export function qwen35TextWeights(source: WeightSource, multimodal: boolean): WeightSource {
  const nested = source.has(`${LANGUAGE_MODEL_PREFIX}embed_tokens.weight`) || (multimodal && !source.has('model.embed_tokens.weight'));
  const prefix = nested ? LANGUAGE_MODEL_PREFIX : 'model.';
  // The checkpoint's name of a view name, or undefined for a tensor outside the text model.
  const inner = (name: string): string | undefined => {
    const full = name.startsWith('model.') ? prefix + name.slice('model.'.length) : name.startsWith('lm_head.') ? name : undefined;
    return full === undefined || qwen35UnreadTensor(full) ? undefined : full;
  };
  const qualified = (full: string): string => source.qualifiedName?.(full) ?? full;
  const resolve = (name: string): string => {
    const full = inner(name);
    if (full === undefined || !source.has(full)) {
      const shown = full ?? name;
      throw new WeightsError(`missing tensor '${qualified(shown)}'`, source.fileOf?.(shown) ?? source.origin);
    }
    return full;
  };
  return {
    origin: source.origin,
    names: () =>
      source.names().flatMap((n) => {
        if (qwen35UnreadTensor(n)) return [];
        if (n.startsWith(prefix)) return [`model.${n.slice(prefix.length)}`];
        return n.startsWith('lm_head.') ? [n] : [];
      }),
    has: (name) => {
      const full = inner(name);
      return full !== undefined && source.has(full);
    },
    get: (name) => ({ ...source.get(resolve(name)), name }),
    fileOf: (name) => source.fileOf?.(inner(name) ?? name) ?? source.origin,
    qualifiedName: (name) => qualified(inner(name) ?? name),
    ...(source.info ? { info: (name: string) => source.info!(resolve(name)) } : {}),
    ...(source.readRange ? { readRange: (name: string, offset: number, bytes: number, into?: Uint8Array) => source.readRange!(resolve(name), offset, bytes, into) } : {}),
  };
}
