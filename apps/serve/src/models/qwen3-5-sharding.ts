import type { ShardRule } from '@metrale/core';
import { qwen35TextConfig, type Qwen35Family } from './qwen3-5-config.js';
import { qwen3NextShardRule } from './qwen3-next-sharding.js';

/**
 * How a Qwen3.5 checkpoint's tensors split among tensor-parallel ranks: as Qwen3-Next's
 * (`qwen3NextShardRule`: the split GDN projections `in_proj_qkv` as the runs q | k | v, `in_proj_z`
 * / `in_proj_b` / `in_proj_a` by value heads; attention by heads; the dense MLP, the fused or
 * per-expert experts and the shared expert by intermediates), with the GDN head counts read from
 * the text config (`text_config` of the published layout). The names are matched by their ends,
 * so the published `model.language_model.layers.…` and the text-only `model.layers.…` split alike.
 */
export function qwen35ShardRule(config: Readonly<Record<string, unknown>>, family: Qwen35Family): ShardRule {
  return qwen3NextShardRule(qwen35TextConfig(config, family));
}
