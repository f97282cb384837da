import { InvalidArgumentError, WeightsError, splitEvenly, type Precision } from '@metrale/core';
import { fields, type Config } from './config-fields.js';

/** How a token's experts are chosen and weighted. */
export interface MoeRouting {
  /** 'softmax': top-k of softmax(logits) (Qwen3-Next); 'sigmoid': top-k of sigmoid(logits) + bias within the best groups (GLM-5, DeepSeek-V3). */
  readonly scoring: 'softmax' | 'sigmoid';
  /** Renormalise the k weights to sum to 1 (`norm_topk_prob`). */
  readonly normTopK: boolean;
  /** Expert groups (`n_group`) and groups kept per token (`topk_group`); 1 and 1 for no grouping. */
  readonly nGroup: number;
  readonly topkGroup: number;
  /** Multiplies the routed weights (`routed_scaling_factor`). */
  readonly scaling: number;
  /** The router has `e_score_correction_bias` (added for the choice only, not to the weights). */
  readonly scoreBias: boolean;
}

export interface SharedExpert {
  /** Tensor prefix (`shared_expert.` for Qwen3-Next, `shared_experts.` for GLM-5). */
  readonly prefix: string;
  readonly inter: number;
  /** Qwen3-Next: the shared expert's output is scaled by sigmoid(`shared_expert_gate` · x). */
  readonly gate?: string;
}

export interface MoeOptions {
  readonly hidden: number;
  readonly experts: number;
  readonly topK: number;
  /** `moe_intermediate_size`. */
  readonly inter: number;
  readonly routing: MoeRouting;
  readonly shared?: SharedExpert;
  /**
   * Expert parallelism: this rank holds experts [first, first + count) of `experts` whole (the
   * router still scores all of them); the entries routed elsewhere add nothing here.
   */
  readonly localExperts?: { readonly first: number; readonly count: number };
  /**
   * Rows, h, y and the experts' and shared expert's weights in `precision.rows` (FP8 weights kept
   * when `fp8Weights`); router and gate logits f32 whatever it is. Default F32_PRECISION.
   */
  readonly precision?: Precision;
}

/** Qwen3-Next's `Qwen3NextSparseMoeBlock`: softmax top-k, `norm_topk_prob`, one gated shared expert. */
export function qwen3NextMoeOptions(config: Config): MoeOptions {
  const f = fields(config, 'Qwen3-Next MoE layer');
  f.silu();
  const options: MoeOptions = {
    hidden: f.int('hidden_size'),
    experts: f.int('num_experts'),
    topK: f.int('num_experts_per_tok'),
    inter: f.int('moe_intermediate_size'),
    routing: { scoring: 'softmax', normTopK: f.bool('norm_topk_prob', true), nGroup: 1, topkGroup: 1, scaling: 1, scoreBias: false },
    ...((config.shared_expert_intermediate_size ?? 0) !== 0
      ? { shared: { prefix: 'shared_expert.', inter: f.int('shared_expert_intermediate_size'), gate: 'shared_expert_gate.weight' } }
      : {}),
  };
  return checkMoe(options);
}

/** GLM-5's `GlmMoeDsaMoE` (DeepSeek-V3 routing): sigmoid scores, correction bias, groups, scaling; ungated shared experts. */
export function glmMoeOptions(config: Config): MoeOptions {
  const f = fields(config, 'GLM MoE layer');
  f.silu();
  const inter = f.int('moe_intermediate_size');
  const shared = (config.n_shared_experts ?? 1) as number;
  const options: MoeOptions = {
    hidden: f.int('hidden_size'),
    experts: f.int('n_routed_experts', config.num_local_experts as number | undefined),
    topK: f.int('num_experts_per_tok'),
    inter,
    routing: {
      scoring: 'sigmoid', normTopK: f.bool('norm_topk_prob', true), nGroup: f.int('n_group', 1), topkGroup: f.int('topk_group', 1),
      scaling: f.num('routed_scaling_factor', 1), scoreBias: true,
    },
    ...(shared > 0 ? { shared: { prefix: 'shared_experts.', inter: inter * shared } } : {}),
  };
  return checkMoe(options);
}

/**
 * The MoE options of rank `rank` of an expert-parallel group of `size`: `experts / size` whole
 * experts (a `ParallelConfigError` naming `config.<expertsField>` when that does not divide), and
 * its share of the shared expert's intermediate (its weights split like a tensor-parallel MLP's),
 * so that the ranks' outputs sum to the whole.
 */
export function expertParallelMoe(o: MoeOptions, rank: number, size: number, expertsField: string): MoeOptions {
  const count = splitEvenly(o.experts, size, `config.${expertsField}`, '--enable-expert-parallel over --tensor-parallel-size');
  const shared = o.shared ? { ...o.shared, inter: splitEvenly(o.shared.inter, size, 'the shared expert\'s intermediate size') } : undefined;
  return { ...o, localExperts: { first: rank * count, count }, ...(shared ? { shared } : {}) };
}

export function checkMoe(o: MoeOptions): MoeOptions {
  const { experts, topK, routing } = o;
  const local = o.localExperts;
  if (local && !(Number.isInteger(local.first) && Number.isInteger(local.count) && local.first >= 0 && local.count >= 1 && local.first + local.count <= experts)) {
    throw new InvalidArgumentError(`MoE: localExperts [${local.first}, ${local.first + local.count}) must be a non-empty range of the ${experts} experts`);
  }
  if (topK > experts) throw new WeightsError(`config: num_experts_per_tok (${topK}) exceeds the ${experts} experts`);
  if (experts % routing.nGroup !== 0) throw new WeightsError(`config: ${experts} experts do not split into n_group = ${routing.nGroup} groups`);
  if (routing.topkGroup > routing.nGroup) throw new WeightsError(`config: topk_group (${routing.topkGroup}) exceeds n_group (${routing.nGroup})`);
  if (topK > routing.topkGroup * (experts / routing.nGroup)) throw new WeightsError(`config: num_experts_per_tok (${topK}) exceeds the experts of the topk_group (${routing.topkGroup}) groups kept`);
  return o;
}
