import { WeightsError } from '@metrale/core';

export type Config = Readonly<Record<string, unknown>>;

/** The text model's config: the config itself, or its `text_config` (multimodal checkpoints). */
export function textConfig(config: Config): Config {
  if (config.hidden_size === undefined && typeof config.text_config === 'object' && config.text_config !== null) return config.text_config as Config;
  return config;
}

/** Typed field readers that name the field (and who needs it) on error. */
export function fields(config: Config, who: string) {
  const fail = (name: string, why: string): never => {
    throw new WeightsError(`config.${name} ${why} (needed by the ${who})`);
  };
  return {
    int(name: string, fallback?: number): number {
      const v = config[name] ?? fallback;
      if (v === undefined) return fail(name, 'is missing');
      if (!Number.isSafeInteger(v) || (v as number) < 1) return fail(name, `must be a positive integer, got ${JSON.stringify(v)}`);
      return v as number;
    },
    num(name: string, fallback?: number): number {
      const v = config[name] ?? fallback;
      if (v === undefined) return fail(name, 'is missing');
      if (typeof v !== 'number' || !Number.isFinite(v)) return fail(name, `must be a finite number, got ${JSON.stringify(v)}`);
      return v;
    },
    bool(name: string, fallback: boolean): boolean {
      const v = config[name] ?? fallback;
      if (typeof v !== 'boolean') return fail(name, `must be true or false, got ${JSON.stringify(v)}`);
      return v;
    },
    /** `hidden_act` must be SiLU: the only gate the kernels compute. */
    silu(name = 'hidden_act'): void {
      const v = config[name] ?? 'silu';
      if (v !== 'silu' && v !== 'swish') fail(name, `is ${JSON.stringify(v)}; the SwiGLU kernels compute 'silu' only`);
    },
  };
}

/**
 * metrale's own options for a std layer created through the plugin (the conformance kit,
 * check-layer): `config.metrale_std`, e.g. `{ "norm_offset": 1, "prefix": "…" }`. Adapters pass
 * typed options to the layer classes instead.
 */
export function stdOptions(config: Config): Record<string, unknown> {
  const o = config.metrale_std;
  return typeof o === 'object' && o !== null ? (o as Record<string, unknown>) : {};
}
