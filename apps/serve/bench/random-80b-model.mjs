// A Qwen3-Next-80B-A3B-shaped model with random weights in the layout of a real checkpoint, for
// the benches: 48 layers (36 Gated DeltaNet, 12 gated attention) at full width; experts can be
// reduced from 512 so a bf16 model fits one GPU. dtype 'bf16' is the Instruct release, 'fp8' the
// -FP8 one (block-FP8 Linear weights with 128 × 128 f32 scales; router, in_proj_ba, the shared
// expert's gate, norms, conv, embeddings and lm head in bf16), 'f32' the reference path.
import { blocksOf, f32ToE4m3, resolvePrecision } from '@metrale/core';
import { qwen3NextTensorPlan } from '../dist/index.js';

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

/** Tokens of one block of the cyclic lm head: greedy text walks a block of this many tokens. */
export const BLOCK = 8;

/**
 * The model's config, precision and weight source. Layers write back with gain 0.3 and the lm head
 * maps token t to the next one of its block of BLOCK (the embedding of t is the head row of
 * next(t)), so greedy text cycles through a block and n-gram drafts are accepted as they would be
 * on repetitive real text.
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
  const byName = new Map(plan.map((t) => [t.name, t]));
  // Random tensors without writing tens of GB: each (shape, spread) has four random buffers and a
  // tensor takes one of them by a hash of its name, so experts, heads and layers differ.
  const pools = new Map();
  const random = xorshift(0x9e3779b9);
  // The Linear weights the published FP8 checkpoint quantizes.
  const FP8_KEEP = /(in_proj_ba|mlp\.gate|shared_expert_gate|embed_tokens|lm_head)\.weight$/;
  const quantized = (t) => fp8 && t.shape.length === 2 && t.name.endsWith('.weight') && !FP8_KEEP.test(t.name) && !t.name.includes('norm');
  const fp8Pool = (t) => {
    const key = `fp8/${t.shape.join('x')}/${t.std}/${hash(t.name) % 4}`;
    if (!pools.has(key)) pools.set(key, randomFp8(t, random));
    return pools.get(key);
  };
  const cyclicHead = () => {
    const D = config.hidden_size;
    const embed = new Uint16Array(weights.get('model.embed_tokens.weight').data.buffer);
    const head = new Uint16Array(config.vocab_size * D);
    for (let t = 0; t < config.vocab_size; t++) {
      const next = BLOCK * Math.floor(t / BLOCK) + ((t + 1) % BLOCK);
      if (next < config.vocab_size) head.set(embed.subarray(t * D, (t + 1) * D), next * D);
    }
    return new Uint8Array(head.buffer);
  };
  const SCALE = '_scale_inv';
  const weights = {
    origin: 'random Qwen3-Next-80B-shaped weights',
    names: () => plan.flatMap((t) => (quantized(t) ? [t.name, t.name + SCALE] : [t.name])),
    has: (name) => byName.has(name) || (name.endsWith(SCALE) && quantized(byName.get(name.slice(0, -SCALE.length)) ?? { shape: [], name: '' })),
    get(name) {
      if (name.endsWith(SCALE)) {
        const t = byName.get(name.slice(0, -SCALE.length));
        return { name, dtype: 'f32', shape: [blocksOf(t.shape[0]), blocksOf(t.shape[1])], data: new Uint8Array(fp8Pool(t).scales.buffer) };
      }
      const t = byName.get(name);
      if (!t) throw new Error(`no tensor ${name}`);
      if (quantized(t)) return { name, dtype: 'f8e4m3', shape: t.shape, data: fp8Pool(t).codes };
      if (name === 'lm_head.weight') return { name, dtype: 'bf16', shape: t.shape, data: cyclicHead() };
      const n = t.shape.reduce((a, b) => a * b, 1);
      const variants = n > 64 * 1024 * 1024 ? 1 : 4;
      const key = `${t.shape.join('x')}/${t.std}/${t.offset}/${hash(name) % variants}`;
      if (!pools.has(key)) pools.set(key, randomBf16(n, t.std, t.offset, random));
      return { name, dtype: 'bf16', shape: t.shape, data: pools.get(key) };
    },
  };

  // Device bytes of a tensor: 4 (f32), 2 (bf16) or 1 + its block scales (FP8).
  const rowBytes = precision.rows === 'f32' ? 4 : 2;
  const elements = (t) => t.shape.reduce((a, b) => a * b, 1);
  const bytesOf = (t) => (quantized(t) ? elements(t) + 4 * blocksOf(t.shape[0]) * blocksOf(t.shape[1]) : rowBytes * elements(t));
  const gdnLayers = config.layer_types.filter((t) => t === 'linear_attention').length;
  return {
    config, precision, weights, plan, bytesOf, rowBytes,
    layers: { total: config.num_hidden_layers, gdn: gdnLayers, attention: config.num_hidden_layers - gdnLayers },
    /** Frees the random buffers once the stack holds the weights. */
    release: () => pools.clear(),
  };
}

/** Prompt of `length` tokens for sequence `b`: its own block of tokens (so routing differs across a batch), repetitive so n-gram drafts match. */
export function benchPrompt(config, b, length) {
  return Array.from({ length }, (_, i) => (8 + BLOCK * b + ((i * 3) % BLOCK)) % config.vocab_size);
}

function xorshift(seed) {
  let s = seed;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

const hash = (s) => [...s].reduce((h, c) => Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0, 2166136261);

function randomBf16(n, std, offset, random) {
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  const out = new Uint16Array(n);
  const scale = std * Math.sqrt(3);
  for (let i = 0; i < n; i++) {
    f32[0] = offset + scale * (2 * random() - 1);
    out[i] = (u32[0] + 0x7fff + ((u32[0] >>> 16) & 1)) >>> 16;
  }
  return new Uint8Array(out.buffer);
}

/** The codes of 256 evenly spaced values in [−448, 448]: a random byte picks a uniform value. */
const UNIFORM_CODES = Uint8Array.from({ length: 256 }, (_, i) => f32ToE4m3(448 * ((2 * i + 1) / 256 - 1)));

/** Random E4M3 codes of a uniform spread, and their scales: amax of the spread / 448 per block. */
function randomFp8(t, random) {
  const [rows, cols] = t.shape;
  const codes = new Uint8Array(rows * cols);
  const amax = t.std * Math.sqrt(3);
  for (let i = 0; i < codes.length; i += 4) {
    const r = Math.floor(random() * 4294967296);
    codes[i] = UNIFORM_CODES[r & 255];
    codes[i + 1] = UNIFORM_CODES[(r >>> 8) & 255];
    codes[i + 2] = UNIFORM_CODES[(r >>> 16) & 255];
    codes[i + 3] = UNIFORM_CODES[r >>> 24];
  }
  const scales = new Float32Array(blocksOf(rows) * blocksOf(cols)).fill(amax / 448);
  return { codes, scales };
}
