import { WeightsError, type WeightSource } from '@metrale/core';

/** Where the published multimodal checkpoints keep the text model's tensors. */
export const LANGUAGE_MODEL_PREFIX = 'model.language_model.';

/**
 * A multimodal checkpoint's text-model tensors under a text-only checkpoint's names
 * (`model.embed_tokens.weight`, `model.layers.{i}.…`, `model.norm.weight`, `lm_head.weight`),
 * whichever layout it has: the published one (`model.language_model.*` beside the towers) or the
 * text-only one (`model.*`). Tensors `unread` names (the towers, MTP layers) are not in the view:
 * nothing built from it can read them. Messages name the tensors as the checkpoint
 * does (`qualifiedName`), and part-reads (`readRange`, for tensor parallelism) pass through.
 */
export function languageModelWeights(source: WeightSource, multimodal: boolean, unread: (name: string) => boolean): WeightSource {
  const nested = source.has(`${LANGUAGE_MODEL_PREFIX}embed_tokens.weight`) || (multimodal && !source.has('model.embed_tokens.weight'));
  const prefix = nested ? LANGUAGE_MODEL_PREFIX : 'model.';
  // The checkpoint's name of a view name, or undefined for a tensor outside the text model.
  const inner = (name: string): string | undefined => {
    const full = name.startsWith('model.') ? prefix + name.slice('model.'.length) : name.startsWith('lm_head.') ? name : undefined;
    return full === undefined || unread(full) ? undefined : full;
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
        if (unread(n)) return [];
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
