import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SeededRandom, encodeSafetensors, tensorOf, type HostTensor } from '@metrale/core';
import { qwen3NextTensorPlan } from '../../src/embedded/qwen3-next-tensor-plan.js';

/**
 * A small random `qwen3_next` checkpoint whose head counts, intermediates and vocabulary divide by
 * 4 (the shipped fixtures have 2 KV heads and 2 GDN key heads): f32 weights from a fixed seed, an
 * untied lm head, MoE and dense layers, GDN and gated attention — every part tensor parallelism
 * splits.
 */
export const TP_CONFIG = {
  architectures: ['Qwen3NextForCausalLM'],
  model_type: 'qwen3_next',
  dtype: 'float32',
  vocab_size: 512,
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 4,
  layer_types: ['linear_attention', 'full_attention', 'linear_attention', 'full_attention'],
  num_attention_heads: 8,
  num_key_value_heads: 4,
  head_dim: 16,
  partial_rotary_factor: 0.25,
  rope_theta: 10000,
  linear_num_key_heads: 4,
  linear_num_value_heads: 8,
  linear_key_head_dim: 16,
  linear_value_head_dim: 16,
  linear_conv_kernel_dim: 4,
  num_experts: 8,
  num_experts_per_tok: 2,
  moe_intermediate_size: 32,
  shared_expert_intermediate_size: 64,
  norm_topk_prob: true,
  decoder_sparse_step: 1,
  mlp_only_layers: [2],
  rms_norm_eps: 1e-6,
  hidden_act: 'silu',
  tie_word_embeddings: false,
  attention_bias: false,
  max_position_embeddings: 4096,
  eos_token_id: 1,
};

/** Writes the checkpoint into `dir` (config.json, model.safetensors) and returns `dir`. */
export function writeTpCheckpoint(dir: string, seed = 30): string {
  mkdirSync(dir, { recursive: true });
  const rng = new SeededRandom(seed);
  const tensors: HostTensor[] = qwen3NextTensorPlan(TP_CONFIG, 0.8).map((p) => {
    const n = p.shape.reduce((a, b) => a * b, 1);
    const v = rng.normals(n, p.std).map((x) => x + p.offset);
    return tensorOf(p.name, v, p.shape);
  });
  tensors.push(tensorOf('lm_head.weight', rng.normals(TP_CONFIG.vocab_size * TP_CONFIG.hidden_size, 1 / 8), [TP_CONFIG.vocab_size, TP_CONFIG.hidden_size]));
  writeFileSync(join(dir, 'config.json'), JSON.stringify(TP_CONFIG, null, 2));
  writeFileSync(join(dir, 'model.safetensors'), encodeSafetensors(tensors));
  return dir;
}
