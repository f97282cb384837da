import type { ShardRule } from '@metrale/core';
import { stdShardRule } from '@metrale/layer-std';
import { splitFields } from './qwen3-next-sharding.js';

type Config = Readonly<Record<string, unknown>>;

/**
 * The config one rank of a tensor-parallel group of `size` builds GLM-5's layers from: its share
 * of the MLA heads (`num_attention_heads`, and `num_key_value_heads`, which MLA keeps equal), of
 * the dense and expert intermediates (the shared experts' follow `moe_intermediate_size`; under
 * expert parallelism the MoE is split by whole experts instead: `expertParallelMoe`). The
 * lightning indexer (`index_n_heads`) is whole on every rank: each computes the same top-k.
 */
export function glmMoeDsaRankConfig(config: Config, size: number, expertParallel = false): Config {
  if (size === 1) return config;
  return splitFields(config, ['num_attention_heads', 'num_key_value_heads', 'intermediate_size', ...(expertParallel ? [] : ['moe_intermediate_size'])], size);
}

const MLA_ROWS = /\.self_attn\.(q_b_proj|kv_b_proj)\.weight$/;

/**
 * How glm_moe_dsa's tensors split: the std layers' (`stdShardRule`: o_proj by its input columns,
 * MLP and experts by intermediate), and MLA's per-head up-projections `q_b_proj` and `kv_b_proj`
 * by head rows. The down-projections into the latents (`q_a_proj`, `kv_a_proj_with_mqa`), their
 * norms and the whole indexer are whole on every rank.
 */
export function glmMoeDsaShardRule(_config: Config): ShardRule {
  return (name) => {
    if (MLA_ROWS.test(name)) return { axis: 0 };
    if (/\.self_attn\.indexer\./.test(name)) return undefined;
    return stdShardRule(name);
  };
}
