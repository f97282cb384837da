import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SeededRandom, encodeSafetensors, toBf16, type HostTensor } from '@metrale/core';
import { qwen3NextTensorPlan, type Qwen3NextShape } from '../../src/embedded/qwen3-next-tensor-plan.js';

/**
 * A tiny random `qwen3_next` checkpoint written the way `save_pretrained` writes one (config.json,
 * bf16 safetensors with HF names, per-expert MoE tensors), so the CLI tests have a model before
 * the Hugging Face fixtures of tools/fixtures/models.py exist. Weights are scaled so the logits
 * are far from uniform (greedy picks are not near-ties) and every part of the layers matters.
 */
export interface TinyQwen3NextOptions {
  readonly seed?: number;
  /** Split the tensors over two shards with a model.safetensors.index.json. */
  readonly sharded?: boolean;
  /** Also write a WordLevel tokenizer.json ("w0" … "w63") and a chat template. */
  readonly tokenizer?: boolean;
  readonly dtype?: 'bf16' | 'f32';
  /**
   * Make the lm head a strong bigram map (token t → 4·⌊t/4⌋ + (t + 1) mod 4, through the embedding)
   * on top of the random layers, so greedy text cycles (4 5 6 7 4 …) and n-gram drafts get accepted.
   */
  readonly bigram?: boolean;
  /** Other sizes (head counts, intermediates) in place of TINY_CONFIG's. */
  readonly config?: Partial<Qwen3NextShape>;
}

export const TINY_CONFIG = {
  architectures: ['Qwen3NextForCausalLM'],
  model_type: 'qwen3_next',
  vocab_size: 64,
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 4,
  layer_types: ['linear_attention', 'full_attention', 'linear_attention', 'full_attention'],
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 8,
  rope_parameters: { rope_type: 'default', rope_theta: 10000, partial_rotary_factor: 0.5 },
  linear_num_key_heads: 2,
  linear_num_value_heads: 4,
  linear_key_head_dim: 8,
  linear_value_head_dim: 8,
  linear_conv_kernel_dim: 4,
  num_experts: 4,
  num_experts_per_tok: 2,
  moe_intermediate_size: 16,
  shared_expert_intermediate_size: 24,
  norm_topk_prob: true,
  decoder_sparse_step: 1,
  mlp_only_layers: [2],
  rms_norm_eps: 1e-6,
  hidden_act: 'silu',
  tie_word_embeddings: false,
  attention_bias: false,
  eos_token_id: 1,
  torch_dtype: 'bfloat16',
} as const;

export function writeTinyQwen3Next(dir: string, options: TinyQwen3NextOptions = {}): Record<string, unknown> {
  const c = { ...TINY_CONFIG, ...options.config };
  const rnd = new SeededRandom(options.seed ?? 1234);
  const tensors: HostTensor[] = [];
  const dtype = options.dtype ?? 'bf16';
  const add = (name: string, shape: number[], scale: number, offset = 0) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const v = Float32Array.from({ length: n }, () => offset + scale * rnd.normal());
    const data = dtype === 'bf16' ? toBf16(v) : v;
    tensors.push({ name, dtype, shape, data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) });
  };
  const D = c.hidden_size;
  const lin = (name: string, out: number, inp: number, gain = 1) => add(name, [out, inp], gain / Math.sqrt(inp));
  for (const t of qwen3NextTensorPlan(c)) add(t.name, t.shape, t.std, t.offset);
  // Logits with a spread of several units: greedy choices are clear, not near-ties.
  if (options.bigram) {
    const embed = tensors[0]!;
    const e = dtype === 'bf16' ? new Uint16Array(embed.data.slice().buffer) : new Float32Array(embed.data.slice().buffer);
    const head = dtype === 'bf16' ? new Uint16Array(e.length) : new Float32Array(e.length);
    for (let t = 0; t < c.vocab_size; t++) {
      const next = 4 * Math.floor(t / 4) + ((t + 1) % 4);
      head.set(e.subarray(t * D, (t + 1) * D), next * D);
    }
    tensors.push({ name: 'lm_head.weight', dtype, shape: [c.vocab_size, D], data: new Uint8Array(head.buffer) });
  } else {
    lin('lm_head.weight', c.vocab_size, D, 4);
  }

  mkdirSync(dir, { recursive: true });
  const config: Record<string, unknown> = { ...c, ...(dtype === 'f32' ? { torch_dtype: 'float32' } : {}) };
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2));
  if (options.sharded) {
    const half = Math.ceil(tensors.length / 2);
    const shards = [tensors.slice(0, half), tensors.slice(half)];
    const names = ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'];
    const weightMap: Record<string, string> = {};
    shards.forEach((s, i) => {
      writeFileSync(join(dir, names[i]!), encodeSafetensors(s, { format: 'pt' }));
      for (const t of s) weightMap[t.name] = names[i]!;
    });
    writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }, null, 2));
  } else {
    writeFileSync(join(dir, 'model.safetensors'), encodeSafetensors(tensors, { format: 'pt' }));
  }
  if (options.tokenizer) writeTokenizer(dir, c.vocab_size);
  return config;
}

/** A WordLevel tokenizer over "w2" … "w63" with <unk> = 0 and <eos> = 1, and a tiny chat template. */
function writeTokenizer(dir: string, vocabSize: number): void {
  const vocab: Record<string, number> = { '<unk>': 0, '<eos>': 1 };
  for (let i = 2; i < vocabSize; i++) vocab[`w${i}`] = i;
  const tokenizer = {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [{ id: 1, content: '<eos>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
    normalizer: null, pre_tokenizer: { type: 'Whitespace' }, post_processor: null,
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordLevel', vocab, unk_token: '<unk>' },
  };
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tokenizer));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({
    eos_token: '<eos>',
    chat_template: "{% for m in messages %}w2 {{ m['content'] }} w3 {% endfor %}{% if add_generation_prompt %}w4{% endif %}",
  }));
}
