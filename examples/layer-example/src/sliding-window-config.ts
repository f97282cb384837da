import { InvalidArgumentError } from '@metrale/core';

export interface SlidingWindowConfig {
  readonly hidden: number;
  readonly window: number;
}

/** A positive integer field of a model config, or an error naming it. */
export function positiveIntField(config: Readonly<Record<string, unknown>>, name: string): number {
  const v = config[name];
  if (!Number.isInteger(v) || (v as number) < 1) throw new InvalidArgumentError(`config.${name} must be a positive integer, got ${JSON.stringify(v)}`);
  return v as number;
}

/** Reads `hidden_size` and `sliding_window` from a model config, naming the field on error. */
export function readSlidingWindowConfig(config: Readonly<Record<string, unknown>>): SlidingWindowConfig {
  return { hidden: positiveIntField(config, 'hidden_size'), window: positiveIntField(config, 'sliding_window') };
}
