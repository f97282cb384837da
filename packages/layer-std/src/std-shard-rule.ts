import type { ShardRule, ShardSpec } from '@metrale/core';

const ROW_PARALLEL: readonly RegExp[] = [
  /\.self_attn\.[qkv]_proj\.weight$/,
  /\.mlp\.(gate|up)_proj\.weight$/,
  /\.experts\.\d+\.(gate|up)_proj\.weight$/,
  /\.shared_experts?\.(gate|up)_proj\.weight$/,
];
const COLUMN_PARALLEL: readonly RegExp[] = [
  /\.self_attn\.o_proj\.weight$/,
  /\.mlp\.down_proj\.weight$/,
  /\.experts\.\d+\.down_proj\.weight$/,
  /\.shared_experts?\.down_proj\.weight$/,
];

/**
 * How tensor parallelism splits the std layers' tensors (full checkpoint names): attention's
 * q/k/v by heads and o_proj by its input columns; the MLP's, each expert's and the shared
 * expert's gate/up by intermediate rows and down_proj by intermediate columns (the fused
 * `experts.gate_up_proj` [E, 2I, D] as two runs, `experts.down_proj` [E, D, I] along I). The
 * router, the norms and the embedding are whole on every rank. Undefined for every other tensor.
 */
export function stdShardRule(name: string): ShardSpec | undefined {
  if (ROW_PARALLEL.some((r) => r.test(name))) return { axis: 0 };
  if (COLUMN_PARALLEL.some((r) => r.test(name))) return { axis: 1 };
  if (/\.experts\.gate_up_proj$/.test(name)) return { axis: 1, runs: 2 };
  if (/\.experts\.down_proj$/.test(name)) return { axis: 2 };
  return undefined;
}

/**
 * `rule` under expert parallelism: each rank reads its whole experts (`MoeOptions.localExperts`
 * picks which of the per-expert tensors; the fused `experts.gate_up_proj` / `experts.down_proj`
 * split along the expert axis), everything else as `rule` splits it.
 */
export function expertParallelShardRule(rule: ShardRule): ShardRule {
  return (name) => {
    if (/\.experts\.\d+\./.test(name)) return undefined;
    if (/\.experts\.(gate_up_proj|down_proj)$/.test(name)) return { axis: 0 };
    return rule(name);
  };
}
