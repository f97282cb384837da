import { WeightsError } from '@metrale/core';

/** A positive integer field of config.json, or an error naming it. */
export function intField(config: Readonly<Record<string, unknown>>, name: string): number {
  const v = config[name];
  if (v === undefined) throw new WeightsError(`config.${name} is missing`);
  if (!Number.isSafeInteger(v) || (v as number) < 1) throw new WeightsError(`config.${name} must be a positive integer, got ${JSON.stringify(v)}`);
  return v as number;
}
