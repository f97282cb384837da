/** `eos_token_id` of a config.json or generation_config.json as a list (it may be one id, a list, or null). */
export function eosTokenIds(config: Readonly<Record<string, unknown>>): number[] {
  const v = config.eos_token_id;
  if (typeof v === 'number') return [v];
  if (Array.isArray(v)) return v.filter((x): x is number => typeof x === 'number');
  return [];
}
