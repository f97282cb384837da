import { ParallelConfigError, splitEvenly, type ShardRule } from '@metrale/core';
import { stdShardRule } from '@metrale/layer-std';
import { intField } from './config-fields.js';

type Config = Readonly<Record<string, unknown>>;

/**
 * `config` with each of `fields` that is set divided by `size` (a `ParallelConfigError` naming the
 * one that does not divide, as `${where}.<field>`).
 */
export function splitFields(config: Config, fields: readonly string[], size: number, where = 'config'): Record<string, unknown> {
  const out: Record<string, unknown> = { ...config };
  for (const field of fields) {
    const v = config[field];
    if (v === undefined || v === null || v === 0) continue;
    out[field] = splitEvenly(intField(config, field), size, `${where}.${field}`);
  }
  return out;
}

/**
 * The config one rank of a tensor-parallel group of `size` builds its layers from: its share of
 * the attention query and KV heads (`head_dim` made explicit, so it is not re-derived from the
 * smaller head count), of the Gated DeltaNet key and value heads, and of the dense, expert and
 * shared-expert intermediates (under expert parallelism the MoE is split by whole experts instead:
 * `expertParallelMoe`). A count that `size` does not divide is a `ParallelConfigError` naming the
 * field (`where`: the config it sits in, `config.text_config` for a multimodal checkpoint's text model).
 */
export function qwen3NextRankConfig(config: Config, size: number, expertParallel = false, where = 'config'): Config {
  if (size === 1) return config;
  const hidden = intField(config, 'hidden_size');
  const heads = intField(config, 'num_attention_heads');
  const headDim = config.head_dim === undefined ? Math.floor(hidden / heads) : intField(config, 'head_dim');
  const kvHeads = config.num_key_value_heads === undefined ? heads : intField(config, 'num_key_value_heads');
  const replicated = size > kvHeads;
  if (replicated && size % kvHeads !== 0) {
    throw new ParallelConfigError(
      `--tensor-parallel-size ${size} is more than ${where}.num_key_value_heads (${kvHeads}) but not a multiple of it: each KV head is kept by size / heads ranks; use a size that divides it or a multiple of it`,
    );
  }
  const rank = splitFields({ ...config, head_dim: headDim }, [
    'num_attention_heads', ...(replicated ? [] : ['num_key_value_heads']), 'linear_num_key_heads', 'linear_num_value_heads', 'intermediate_size',
    ...(expertParallel ? [] : ['moe_intermediate_size', 'shared_expert_intermediate_size']),
  ], size, where);
  return replicated ? { ...rank, num_key_value_heads: 1 } : rank;
}

/**
 * Attention's K and V projections when the ranks outnumber the KV heads: one whole KV head per
 * rank, each kept by size / heads consecutive ranks (their query heads are that KV head's group).
 */
export function replicatedKvShardRule(config: Config, rule: ShardRule): ShardRule {
  const heads = intField(config, 'num_attention_heads');
  const kvHeads = config.num_key_value_heads === undefined ? heads : intField(config, 'num_key_value_heads');
  return (name) => (/\.self_attn\.[kv]_proj\.weight$/.test(name) ? { axis: 0, maxParts: kvHeads } : rule(name));
}

/**
 * How qwen3_next's tensors split among the ranks: the std layers' (`stdShardRule`) and the Gated
 * DeltaNet's, by key-head group: `in_proj_qkvz` and `in_proj_ba` hold one run of rows per key head
 * (so a rank's rows are contiguous), the conv channels (and Qwen3.5's `in_proj_qkv`) are the runs
 * q | k | v, each split by heads; `dt_bias` and `A_log` by value head; `out_proj` by its input
 * columns. The gated norm's weight (per head dim) is whole.
 */
export function qwen3NextShardRule(config: Config): ShardRule {
  const hk = intField(config, 'linear_num_key_heads');
  const dk = intField(config, 'linear_key_head_dim');
  const hv = intField(config, 'linear_num_value_heads');
  const dv = intField(config, 'linear_value_head_dim');
  const conv = [hk * dk, hk * dk, hv * dv];
  const attention = replicatedKvShardRule(config, stdShardRule);
  return (name) => {
    const m = /\.linear_attn\.(.+)$/.exec(name);
    if (!m) return attention(name);
    switch (m[1]) {
      case 'in_proj_qkvz.weight':
      case 'in_proj_ba.weight':
      case 'in_proj_z.weight':
      case 'in_proj_b.weight':
      case 'in_proj_a.weight':
      case 'dt_bias':
      case 'A_log':
        return { axis: 0 };
      case 'in_proj_qkv.weight':
      case 'conv1d.weight':
        return { axis: 0, segments: conv };
      case 'out_proj.weight':
        return { axis: 1 };
      default:
        return undefined;
    }
  };
}
