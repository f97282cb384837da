/** The config fields that decide a `qwen3_next` checkpoint's tensors. */
export interface Qwen3NextShape {
  readonly vocab_size: number;
  readonly hidden_size: number;
  readonly intermediate_size: number;
  readonly layer_types: readonly string[];
  readonly num_attention_heads: number;
  readonly num_key_value_heads: number;
  readonly head_dim: number;
  readonly linear_num_key_heads: number;
  readonly linear_num_value_heads: number;
  readonly linear_key_head_dim: number;
  readonly linear_value_head_dim: number;
  readonly linear_conv_kernel_dim: number;
  readonly num_experts: number;
  readonly moe_intermediate_size: number;
  readonly shared_expert_intermediate_size: number;
  readonly mlp_only_layers: readonly number[];
}

/** One tensor of a random checkpoint: its Hugging Face name, shape, and the spread of its values. */
export interface PlannedTensor {
  readonly name: string;
  readonly shape: number[];
  readonly std: number;
  readonly offset: number;
}

/**
 * Every tensor of a `qwen3_next` checkpoint except the lm head, in `save_pretrained`'s names and
 * in a fixed order, with the spreads that keep a random model's activations of order one:
 * projections 1/√fan-in (×2 for q and k so attention is not uniform, ×3 for the router so
 * routing is decisive, ×`outGain` for every projection back into the residual stream), norm
 * weights near 0 (the 1 + w convention) and the GDN decay parameters in their usual range.
 */
export function qwen3NextTensorPlan(c: Qwen3NextShape, outGain = 1): PlannedTensor[] {
  const plan: PlannedTensor[] = [];
  const add = (name: string, shape: number[], std: number, offset = 0) => plan.push({ name, shape, std, offset });
  const lin = (name: string, out: number, inp: number, gain = 1) => add(name, [out, inp], gain / Math.sqrt(inp));
  const D = c.hidden_size;
  add('model.embed_tokens.weight', [c.vocab_size, D], 1);
  const hk = c.linear_num_key_heads, hv = c.linear_num_value_heads, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const keyDim = hk * dk, valueDim = hv * dv, convDim = 2 * keyDim + valueDim;
  c.layer_types.forEach((type, i) => {
    const p = `model.layers.${i}.`;
    add(`${p}input_layernorm.weight`, [D], 0.1);
    add(`${p}post_attention_layernorm.weight`, [D], 0.1);
    if (type === 'linear_attention') {
      lin(`${p}linear_attn.in_proj_qkvz.weight`, 2 * keyDim + 2 * valueDim, D);
      lin(`${p}linear_attn.in_proj_ba.weight`, 2 * hv, D);
      add(`${p}linear_attn.conv1d.weight`, [convDim, 1, c.linear_conv_kernel_dim], 0.5);
      add(`${p}linear_attn.dt_bias`, [hv], 0.5);
      add(`${p}linear_attn.A_log`, [hv], 0.5, -1);
      add(`${p}linear_attn.norm.weight`, [dv], 0.1, 1);
      lin(`${p}linear_attn.out_proj.weight`, D, valueDim, outGain);
    } else {
      const H = c.num_attention_heads, Hkv = c.num_key_value_heads, d = c.head_dim;
      lin(`${p}self_attn.q_proj.weight`, 2 * H * d, D, 2);
      lin(`${p}self_attn.k_proj.weight`, Hkv * d, D, 2);
      lin(`${p}self_attn.v_proj.weight`, Hkv * d, D);
      lin(`${p}self_attn.o_proj.weight`, D, H * d, outGain);
      add(`${p}self_attn.q_norm.weight`, [d], 0.1);
      add(`${p}self_attn.k_norm.weight`, [d], 0.1);
    }
    if (c.mlp_only_layers.includes(i)) {
      lin(`${p}mlp.gate_proj.weight`, c.intermediate_size, D);
      lin(`${p}mlp.up_proj.weight`, c.intermediate_size, D);
      lin(`${p}mlp.down_proj.weight`, D, c.intermediate_size, outGain);
    } else {
      lin(`${p}mlp.gate.weight`, c.num_experts, D, 3);
      for (let e = 0; e < c.num_experts; e++) {
        lin(`${p}mlp.experts.${e}.gate_proj.weight`, c.moe_intermediate_size, D);
        lin(`${p}mlp.experts.${e}.up_proj.weight`, c.moe_intermediate_size, D);
        lin(`${p}mlp.experts.${e}.down_proj.weight`, D, c.moe_intermediate_size, outGain);
      }
      lin(`${p}mlp.shared_expert.gate_proj.weight`, c.shared_expert_intermediate_size, D);
      lin(`${p}mlp.shared_expert.up_proj.weight`, c.shared_expert_intermediate_size, D);
      lin(`${p}mlp.shared_expert.down_proj.weight`, D, c.shared_expert_intermediate_size, outGain);
      lin(`${p}mlp.shared_expert_gate.weight`, 1, D);
    }
  });
  add('model.norm.weight', [D], 0.1);
  return plan;
}
