// A Qwen3-Next-80B-A3B-shaped model with random weights in the layout of a real checkpoint, for
// the benches: 48 layers (36 Gated DeltaNet, 12 gated attention) at full width; experts can be
// reduced from 512 so a bf16 model fits one GPU. dtype 'bf16' is the Instruct release, 'fp8' the
// -FP8 one (block-FP8 Linear weights with 128 × 128 f32 scales; router, in_proj_ba, the shared
// expert's gate, norms, conv, embeddings and lm head in bf16), 'f32' the reference path.
import { resolvePrecision } from '@metrale/core';
import { qwen3NextTensorPlan } from '../../dist/index.js';
import { qwenHybridFloor, randomWeights } from './shared.mjs';

export { BLOCK, benchPrompt } from './shared.mjs';

// Qwen3-Next-80B-A3B's config.json (experts set by the caller).
const FULL = {
  model_type: 'qwen3_next', vocab_size: 151936, hidden_size: 2048, intermediate_size: 5120, num_hidden_layers: 48,
  full_attention_interval: 4, num_attention_heads: 16, num_key_value_heads: 2, head_dim: 256,
  rope_theta: 10000000, partial_rotary_factor: 0.25, linear_num_key_heads: 16, linear_num_value_heads: 32,
  linear_key_head_dim: 128, linear_value_head_dim: 128, linear_conv_kernel_dim: 4, num_experts: 512,
  num_experts_per_tok: 10, moe_intermediate_size: 512, shared_expert_intermediate_size: 512, norm_topk_prob: true,
  decoder_sparse_step: 1, mlp_only_layers: [], rms_norm_eps: 1e-6, hidden_act: 'silu', tie_word_embeddings: false,
  attention_bias: false, max_position_embeddings: 262144, eos_token_id: 151645, torch_dtype: 'bfloat16',
};
// A 4-layer, narrow model of the same structure, to check a bench on the CPU.
const TINY = {
  ...FULL, vocab_size: 2048, hidden_size: 64, num_hidden_layers: 4, num_attention_heads: 4, head_dim: 16,
  linear_num_key_heads: 2, linear_num_value_heads: 4, linear_key_head_dim: 16, linear_value_head_dim: 16,
  num_experts: 8, num_experts_per_tok: 2, moe_intermediate_size: 32, shared_expert_intermediate_size: 32,
};

/** The experts the decode bench keeps by default: 64 of 512, so the bf16 weights fit one H200. */
export const DEFAULT_EXPERTS = 64;

/**
 * The model's config, precision and weight source (`randomWeights`: layers write back with gain 0.3,
 * the lm head cycles greedy text through blocks), its tensor plan and bytes, and the floor of a
 * decode step (`qwenHybridFloor`).
 */
export function random80bModel({ dtype = 'bf16', experts, layers, tiny = false } = {}) {
  if (!['bf16', 'fp8', 'f32'].includes(dtype)) throw new Error(`--dtype must be bf16, fp8 or f32, got ${dtype}`);
  const config = structuredClone(tiny ? TINY : FULL);
  if (experts !== undefined && !tiny) config.num_experts = experts;
  if (layers !== undefined) config.num_hidden_layers = layers;
  const fp8 = dtype === 'fp8';
  if (fp8) config.quantization_config = { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [128, 128] };
  const precision = resolvePrecision(fp8 ? 'auto' : dtype, config);
  config.layer_types = Array.from({ length: config.num_hidden_layers }, (_, i) => ((i + 1) % config.full_attention_interval === 0 ? 'full_attention' : 'linear_attention'));

  const plan = [...qwen3NextTensorPlan(config, 0.3), { name: 'lm_head.weight', shape: [config.vocab_size, config.hidden_size], std: 4 / Math.sqrt(config.hidden_size), offset: 0 }];
  // The Linear weights the published FP8 checkpoint quantizes.
  const FP8_KEEP = /(in_proj_ba|mlp\.gate|shared_expert_gate|embed_tokens|lm_head)\.weight$/;
  const quantized = (t) => fp8 && t.shape.length === 2 && t.name.endsWith('.weight') && !FP8_KEEP.test(t.name) && !t.name.includes('norm');
  const embed = 'model.embed_tokens.weight';
  const random = randomWeights({ origin: 'random Qwen3-Next-80B-shaped weights', plan, head: 'lm_head.weight', embed, quantized });
  // Device bytes of a tensor: 4 (f32), 2 (bf16) or 1 + its block scales (FP8).
  const rowBytes = precision.rows === 'f32' ? 4 : 2;
  const bytesOf = (t) => random.bytesOf(t, rowBytes);
  const floor = qwenHybridFloor({ text: config, plan, bytesOf, rowBytes, embed, isExpert: (t) => /\.experts\.\d+\./.test(t.name) });
  return {
    name: 'qwen3-next-80b', bench: 'qwen3-next-80b-shaped decode', modelType: config.model_type,
    config, text: config, precision, weights: random.weights, plan, bytesOf, rowBytes,
    layers: floor.layers, floor,
    notes: { experts: `${config.num_experts} of 512 (top-${config.num_experts_per_tok}); everything else at full width` },
    release: random.release,
  };
}
