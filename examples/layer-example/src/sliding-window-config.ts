import { InvalidArgumentError } from '@metrale/core';

export interface SlidingWindowConfig {
  readonly hidden: number;
  readonly window: number;
}

/** Reads `hidden_size` and `sliding_window` from a model config, naming the field on error. */
export function readSlidingWindowConfig(config: Readonly<Record<string, unknown>>): SlidingWindowConfig {
  const field = (name: string): number => {
    const v = config[name];
    if (!Number.isInteger(v) || (v as number) < 1) throw new InvalidArgumentError(`config.${name} must be a positive integer, got ${JSON.stringify(v)}`);
    return v as number;
  };
  return { hidden: field('hidden_size'), window: field('sliding_window') };
}
