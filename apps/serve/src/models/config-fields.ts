import { WeightsError } from '@metrale/core';

export interface IntFieldOptions {
  /** Where the field is, for the error (`config`, `config.text_config`); default `config`. */
  readonly where?: string;
  /** The value when the field is absent (or null); without one, an absent field is an error. */
  readonly fallback?: number;
  /** The least value allowed; default 1. */
  readonly min?: number;
  /** Said after "is missing" (what the checkpoint should give). */
  readonly missing?: string;
}

/** An integer field of config.json (positive unless `min` says otherwise), or an error naming it. */
export function intField(config: Readonly<Record<string, unknown>>, name: string, options: IntFieldOptions = {}): number {
  const { where = 'config', fallback, min = 1, missing } = options;
  const v = config[name] ?? fallback;
  if (v === undefined || v === null) throw new WeightsError(`${where}.${name} is missing${missing ? `; ${missing}` : ''}`);
  if (!Number.isSafeInteger(v) || (v as number) < min) {
    throw new WeightsError(`${where}.${name} must be ${min === 1 ? 'a positive integer' : `an integer ≥ ${min}`}, got ${JSON.stringify(v)}`);
  }
  return v as number;
}
