import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { WeightsError } from '@metrale/core';

/**
 * The sampling defaults a model's generation_config.json recommends, as vLLM takes them with its
 * default `--generation-config auto`: these six fields, each a default that a request's own value
 * overrides (max_new_tokens caps max_tokens instead). Every other field (do_sample included) is
 * ignored, as vLLM ignores it.
 */
export interface SamplingDefaults {
  readonly temperature?: number;
  readonly top_p?: number;
  readonly top_k?: number;
  readonly min_p?: number;
  readonly repetition_penalty?: number;
  /** generation_config's max_new_tokens. */
  readonly max_tokens?: number;
}

/** `--generation-config`: the checkpoint's file (auto), none (vllm: OpenAI's defaults), or a folder holding one. */
export type GenerationConfigChoice = 'auto' | 'vllm' | (string & {});

/** What each field must be, as a request's own value must. */
const FIELDS: Readonly<Record<string, { readonly ok: (v: number) => boolean; readonly range: string; readonly as?: keyof SamplingDefaults }>> = {
  temperature: { ok: (v) => v >= 0 && v <= 2, range: 'in [0, 2]' },
  top_p: { ok: (v) => v > 0 && v <= 1, range: 'in (0, 1]' },
  top_k: { ok: (v) => Number.isInteger(v) && v >= -1, range: 'an integer ≥ -1' },
  min_p: { ok: (v) => v >= 0 && v <= 1, range: 'in [0, 1]' },
  repetition_penalty: { ok: (v) => Number.isFinite(v) && v > 0, range: 'a finite number > 0' },
  max_new_tokens: { ok: (v) => Number.isInteger(v) && v >= 1, range: 'a positive integer', as: 'max_tokens' },
};

/**
 * The defaults of `choice` for the model in `modelDir`; throws a `WeightsError` naming the file and
 * field when one is unusable. A checkpoint without the file has none; a folder given without one is an error.
 */
export function samplingDefaults(choice: GenerationConfigChoice, modelDir: string): SamplingDefaults {
  if (choice === 'vllm') return {};
  const file = join(choice === 'auto' ? modelDir : choice, 'generation_config.json');
  if (choice === 'auto' && !existsSync(file)) return {};
  let config: Record<string, unknown>;
  try {
    config = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch (cause) {
    throw new WeightsError(`cannot read the sampling defaults (--generation-config ${choice}): ${(cause as Error).message}`, file, { cause });
  }
  const out: Record<string, number> = {};
  for (const [field, rule] of Object.entries(FIELDS)) {
    const v = config[field];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !rule.ok(v)) throw new WeightsError(`${field} must be ${rule.range}, got ${JSON.stringify(v)}`, file);
    out[rule.as ?? field] = v;
  }
  return out;
}
