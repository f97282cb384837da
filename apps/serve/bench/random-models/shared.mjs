// What the random-weight models of the benches share: the random tensors (a few random buffers per
// shape and spread, so tens of GB are never written), the cyclic lm head, the prompts, and the
// pieces of a decode step's floor. One module per model shape builds on it (qwen3-next-80b.mjs,
// qwen3-5-moe.mjs, gemma3n-e4b.mjs; index.mjs lists them).
import { blocksOf, f32ToE4m3 } from '@metrale/core';

/** Tokens of one block of the cyclic lm head: greedy text walks a block of this many tokens. */
export const BLOCK = 8;

/** The text model's fields of a config: its `text_config` (a published multimodal layout) or itself. */
export const textOf = (config) => config.text_config ?? config;

/** Prompt of `length` tokens for sequence `b`: its own block of tokens (so routing differs across a batch), repetitive so n-gram drafts match. */
export function benchPrompt(config, b, length) {
  const vocab = textOf(config).vocab_size;
  return Array.from({ length }, (_, i) => (8 + BLOCK * b + ((i * 3) % BLOCK)) % vocab);
}

export const elements = (t) => t.shape.reduce((a, b) => a * b, 1);

/** Distinct experts a batch of B tokens routes to, of E with top-k each, under uniform routing: E·(1 − (1 − k/E)^B). */
export const expertsTouched = (E, k, B) => E * (1 - (1 - k / E) ** B);

/**
 * The weight source of a random checkpoint: `plan` (name, shape, spread of each tensor) in bf16,
 * Linear weights `quantized(t)` picks as block-FP8 with their `_scale_inv` scales, and the lm head
 * `head` (its name) derived from the embedding `embed` (its name) so that the head row of next(t)
 * is the embedding of t: greedy text cycles through a block of BLOCK tokens and n-gram drafts are
 * accepted as on repetitive real text. Each (shape, spread) has four random buffers (one above 64 Mi
 * values) and a tensor takes one by a hash of its name, so experts, heads and layers differ.
 * `release` frees the buffers once the stack holds the weights.
 */
export function randomWeights({ origin, plan, head, embed, quantized = () => false }) {
  const byName = new Map(plan.map((t) => [t.name, t]));
  const pools = new Map();
  const random = xorshift(0x9e3779b9);
  const fp8Pool = (t) => {
    const key = `fp8/${t.shape.join('x')}/${t.std}/${hash(t.name) % 4}`;
    if (!pools.has(key)) pools.set(key, randomFp8(t, random));
    return pools.get(key);
  };
  const cyclicHead = () => {
    const [V, D] = byName.get(head).shape;
    const rows = new Uint16Array(weights.get(embed).data.buffer);
    const out = new Uint16Array(V * D);
    for (let t = 0; t < V; t++) {
      const next = BLOCK * Math.floor(t / BLOCK) + ((t + 1) % BLOCK);
      if (next < V) out.set(rows.subarray(t * D, (t + 1) * D), next * D);
    }
    return new Uint8Array(out.buffer);
  };
  const SCALE = '_scale_inv';
  const weights = {
    origin,
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
      if (name === head) return { name, dtype: 'bf16', shape: t.shape, data: cyclicHead() };
      const n = elements(t);
      const variants = n > 64 * 1024 * 1024 ? 1 : 4;
      const key = `${t.shape.join('x')}/${t.std}/${t.offset}/${hash(name) % variants}`;
      if (!pools.has(key)) pools.set(key, randomBf16(n, t.std, t.offset, random));
      return { name, dtype: 'bf16', shape: t.shape, data: pools.get(key) };
    },
  };
  // Device bytes of a tensor in rows of `rowBytes` (4 for f32, 2 for bf16), or 1 + its block scales (FP8).
  const bytesOf = (t, rowBytes) => (quantized(t) ? elements(t) + 4 * blocksOf(t.shape[0]) * blocksOf(t.shape[1]) : rowBytes * elements(t));
  return { weights, bytesOf, release: () => pools.clear() };
}

/**
 * The floor of a Qwen-hybrid decode step (Qwen3-Next, Qwen3.5 MoE) at batch B and context C: every
 * weight but the embedding table and the routed experts once; the experts the batch routes to
 * (`expertsTouched` per MoE layer); one embedding row per sequence; the GDN state (f32) read and
 * written; the KV cache read. `embed` names the embedding table; `isExpert` picks the routed
 * experts' tensors (per expert or fused).
 */
export function qwenHybridFloor({ text, plan, bytesOf, rowBytes, embed, isExpert }) {
  const dense = plan.filter((t) => !isExpert(t) && t.name !== embed).reduce((a, t) => a + bytesOf(t), 0);
  // One expert's bytes: the first MoE layer's expert tensors over its experts.
  const firstMoe = plan.find(isExpert).name.replace(/experts\..*$/, 'experts.');
  const expertBytes = plan.filter((t) => isExpert(t) && t.name.startsWith(firstMoe)).reduce((a, t) => a + bytesOf(t), 0) / text.num_experts;
  const gdn = text.layer_types.filter((t) => t === 'linear_attention').length;
  const attention = text.num_hidden_layers - gdn;
  const stateBytes = text.linear_num_value_heads * text.linear_key_head_dim * text.linear_value_head_dim * 4;
  return {
    layers: { total: text.num_hidden_layers, gdn, attention },
    counts: 'every weight but the embedding table and the routed experts once; the experts the batch routes to (uniform routing: E·(1 − (1 − top-k/E)^B) per layer); one embedding row per sequence; the GDN state (f32) read and written; the KV cache read',
    stepBytes: (B, context) => dense + text.num_hidden_layers * expertsTouched(text.num_experts, text.num_experts_per_tok, B) * expertBytes + B * text.hidden_size * rowBytes
      + gdn * B * 2 * stateBytes + attention * B * context * 2 * text.num_key_value_heads * text.head_dim * rowBytes,
    report: { dense_weight_bytes: dense, expert_bytes: expertBytes, gdn_state_bytes_per_seq_layer: stateBytes },
  };
}

export function xorshift(seed) {
  let s = seed;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

export const hash = (s) => [...s].reduce((h, c) => Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0, 2166136261);

/** n bf16 values, uniform with spread `std` around `offset`. */
export function randomBf16(n, std, offset, random) {
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
