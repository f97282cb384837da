import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SeededRandom, encodeSafetensors, tensorOf, type HostTensor } from '@metrale/core';
import { CHAT_TEMPLATE, SPECIAL_TOKENS, byteLevelTokenizer } from './byte-level-tokenizer.js';

/** The config.json of the tiny `qwen3_next_sliding` checkpoint. */
export const TINY_CONFIG = {
  architectures: ['Qwen3NextSlidingForCausalLM'],
  model_type: 'qwen3_next_sliding',
  vocab_size: 256 + SPECIAL_TOKENS.length,
  hidden_size: 32,
  intermediate_size: 64,
  num_hidden_layers: 4,
  layer_types: ['sliding_window', 'full_attention', 'sliding_window', 'full_attention'],
  sliding_window: 8,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 8,
  rope_parameters: { rope_type: 'default', rope_theta: 10000, partial_rotary_factor: 0.5 },
  rms_norm_eps: 1e-6,
  hidden_act: 'silu',
  attention_bias: false,
  tie_word_embeddings: false,
  max_position_embeddings: 512,
  bos_token_id: null,
  eos_token_id: 256 + SPECIAL_TOKENS.indexOf('<|im_end|>'),
  torch_dtype: 'float32',
} as const;

/**
 * The tensors, by Hugging Face name, drawn from `seed`: unit-variance embeddings, projections
 * scaled by 1/√fan-in, norm weights near 0 (the norms compute (1 + w) · x̂), gains near 1. The lm
 * head has rows only for printable ASCII and the end of a turn, so answers are readable gibberish
 * that ends now and then.
 */
export function tinyTensors(seed = 0): HostTensor[] {
  const c = TINY_CONFIG;
  const D = c.hidden_size;
  const random = new SeededRandom(seed);
  const tensors: HostTensor[] = [];
  const add = (name: string, shape: number[], std: number, offset = 0) => {
    const values = random.normals(shape.reduce((a, b) => a * b, 1), std).map((v) => v + offset);
    tensors.push(tensorOf(name, values, shape));
  };
  const linear = (name: string, out: number, inp: number) => add(`${name}.weight`, [out, inp], 1 / Math.sqrt(inp));
  add('model.embed_tokens.weight', [c.vocab_size, D], 1);
  c.layer_types.forEach((type, i) => {
    const at = `model.layers.${i}.`;
    add(`${at}input_layernorm.weight`, [D], 0.1);
    if (type === 'sliding_window') add(`${at}sliding_attn.gain`, [D], 0.1, 1);
    else {
      const d = c.head_dim;
      linear(`${at}self_attn.q_proj`, 2 * c.num_attention_heads * d, D);
      linear(`${at}self_attn.k_proj`, c.num_key_value_heads * d, D);
      linear(`${at}self_attn.v_proj`, c.num_key_value_heads * d, D);
      linear(`${at}self_attn.o_proj`, D, c.num_attention_heads * d);
      add(`${at}self_attn.q_norm.weight`, [d], 0.1);
      add(`${at}self_attn.k_norm.weight`, [d], 0.1);
    }
    add(`${at}post_attention_layernorm.weight`, [D], 0.1);
    linear(`${at}mlp.gate_proj`, c.intermediate_size, D);
    linear(`${at}mlp.up_proj`, c.intermediate_size, D);
    linear(`${at}mlp.down_proj`, D, c.intermediate_size);
  });
  add('model.norm.weight', [D], 0.1);
  const head = random.normals(c.vocab_size * D, 4 / Math.sqrt(D));
  for (let t = 0; t < c.vocab_size; t++) if (!((t >= 32 && t <= 126) || t === c.eos_token_id)) head.fill(0, t * D, (t + 1) * D);
  tensors.push(tensorOf('lm_head.weight', head, [c.vocab_size, D]));
  return tensors;
}

/**
 * Writes a tiny random `qwen3_next_sliding` checkpoint into `dir` (created): config.json,
 * generation_config.json, model.safetensors (f32), and a byte-level tokenizer with a ChatML
 * template, so `metrale serve --plugin @metrale/layer-example --model DIR` answers chat requests.
 * The same seed writes the same bytes. Its text is meaningless: the weights are random.
 */
export function writeTinyCheckpoint(dir: string, options: { seed?: number } = {}): void {
  mkdirSync(dir, { recursive: true });
  const json = (file: string, value: unknown) => writeFileSync(join(dir, file), `${JSON.stringify(value, null, 2)}\n`);
  json('config.json', TINY_CONFIG);
  json('generation_config.json', { eos_token_id: TINY_CONFIG.eos_token_id });
  writeFileSync(join(dir, 'model.safetensors'), encodeSafetensors(tinyTensors(options.seed), { format: 'pt' }));
  json('tokenizer.json', byteLevelTokenizer());
  json('tokenizer_config.json', { tokenizer_class: 'PreTrainedTokenizerFast', bos_token: null, eos_token: '<|im_end|>', pad_token: '<|endoftext|>', model_max_length: TINY_CONFIG.max_position_embeddings, chat_template: CHAT_TEMPLATE });
}
