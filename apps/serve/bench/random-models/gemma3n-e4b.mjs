// A Gemma-3n-E4B-shaped model with random weights in the layout of a text-only checkpoint
// (`Gemma3nForCausalLM`, model_type `gemma3n_text`, tensors under `model.*`): 35 layers (28 sliding,
// 7 full attention; the last 15 read the KV of layers 18 / 19), AltUp over 4 streams, Laurel, the
// per-layer inputs (PLE) with their 262 144 × 8 960 table, GELU-tanh MLPs of 16 384 (the first 10
// at activation sparsity 0.95), a soft-capped head. The per-layer table (4.7 GB in bf16, more than
// one Node buffer holds) stays on the host as in a real checkpoint: the source serves it a row
// range at a time (`info` / `readRange`, as core's SafetensorsFile does) and refuses to read it
// whole, so the PLE layers must take their rows through the ranged path.
import { resolvePrecision } from '@metrale/core';
import { elements, hash, randomBf16, randomWeights, xorshift } from './shared.mjs';

// transformers' `Gemma3nTextConfig` defaults (5.x, models/gemma3n/configuration_gemma3n.py), which
// that class documents as the E4B configuration (checkpoint google/gemma-3n-E4B), written out:
// vocab_size 262 400 (the per-layer table's vocab_size_per_layer_input is 262 144), layer_types
// every 5th layer full, activation_sparsity_pattern 0.95 on the first 10 layers, RoPE θ 1e6 (full)
// and 1e4 (sliding). Tensor names as docs/models/gemma3n-text.md lists them; layer-ple's bench
// uses the same sizes.
const FULL = {
  model_type: 'gemma3n_text', architectures: ['Gemma3nForCausalLM'], vocab_size: 262400, vocab_size_per_layer_input: 262144,
  hidden_size: 2048, hidden_size_per_layer_input: 256, intermediate_size: 16384, num_hidden_layers: 35, num_attention_heads: 8,
  num_key_value_heads: 2, head_dim: 256, hidden_activation: 'gelu_pytorch_tanh', max_position_embeddings: 32768, rms_norm_eps: 1e-6,
  sliding_window: 512, final_logit_softcapping: 30, altup_active_idx: 0, altup_coef_clip: 120, altup_correct_scale: true,
  altup_num_inputs: 4, num_kv_shared_layers: 15, laurel_rank: 64, attention_bias: false,
  rope_parameters: { full_attention: { rope_type: 'default', rope_theta: 1000000 }, sliding_attention: { rope_type: 'default', rope_theta: 10000 } },
  tie_word_embeddings: true, pad_token_id: 0, eos_token_id: 1, bos_token_id: 2, dtype: 'bfloat16',
};
// A 10-layer, narrow model of the same structure (8 sliding with a window below the prompt, 2 full,
// the last 5 KV-shared, the first 2 sparse), to check a bench on the CPU.
const TINY = {
  ...FULL, vocab_size: 2048, vocab_size_per_layer_input: 2048, hidden_size: 64, hidden_size_per_layer_input: 16, intermediate_size: 128,
  num_hidden_layers: 10, num_attention_heads: 4, head_dim: 16, sliding_window: 8, num_kv_shared_layers: 5, laurel_rank: 8,
};

/**
 * The per-layer fields for n layers: every 5th full attention, sparsity on the first 10 (2 when
 * tiny), the last min(num_kv_shared_layers, n − 5) layers KV-shared (layers of both types own a
 * cache before them).
 */
function perLayer(config, tiny) {
  const n = config.num_hidden_layers;
  const sparse = tiny ? 2 : 10;
  config.layer_types = Array.from({ length: n }, (_, i) => ((i + 1) % 5 === 0 ? 'full_attention' : 'sliding_attention'));
  config.activation_sparsity_pattern = Array.from({ length: n }, (_, i) => (i < sparse ? 0.95 : 0));
  config.num_kv_shared_layers = Math.min(config.num_kv_shared_layers, Math.max(0, n - 5));
}

const TABLE = 'model.embed_tokens_per_layer.weight';

/**
 * Every tensor of a `gemma3n_text` checkpoint, with spreads that keep a random model's activations
 * of order one: projections 1/√fan-in (×2 for q and k), norm weights near 1 (plain w), but near
 * `outGain` for the norms after a part (`post_*`), which set what it adds to the streams; the
 * embedding, scaled by √H on lookup, 1/√H. `lm_head.weight` is the cyclic head (see randomWeights)
 * where the published model ties its head to `embed_tokens`: the same V × H bytes a step reads, and
 * the adapter reads `lm_head.weight` when a checkpoint has one.
 */
function gemma3nPlan(c, outGain) {
  const plan = [];
  const add = (name, shape, std, offset = 0) => plan.push({ name, shape, std, offset });
  const lin = (name, out, inp, gain = 1) => add(name, [out, inp], gain / Math.sqrt(inp));
  const norm = (name, size, at = 1) => add(name, [size], 0.1 * at, at);
  const H = c.hidden_size, P = c.hidden_size_per_layer_input, L = c.num_hidden_layers, n = c.altup_num_inputs;
  const firstShared = L - c.num_kv_shared_layers;
  add('model.embed_tokens.weight', [c.vocab_size, H], 1 / Math.sqrt(H));
  add(TABLE, [c.vocab_size_per_layer_input, L * P], 1 / Math.sqrt(P));
  lin('model.per_layer_model_projection.weight', L * P, H);
  norm('model.per_layer_projection_norm.weight', P);
  for (let i = 0; i < n - 1; i++) lin(`model.altup_projections.${i}.weight`, H, H);
  for (let i = 0; i < n - 1; i++) lin(`model.altup_unembed_projections.${i}.weight`, H, H);
  for (let l = 0; l < L; l++) {
    const p = `model.layers.${l}.`;
    const I = c.intermediate_size, d = c.head_dim;
    norm(`${p}input_layernorm.weight`, H);
    norm(`${p}post_attention_layernorm.weight`, H, outGain);
    norm(`${p}pre_feedforward_layernorm.weight`, H);
    norm(`${p}post_feedforward_layernorm.weight`, H, outGain);
    norm(`${p}post_per_layer_input_norm.weight`, H, outGain);
    lin(`${p}self_attn.q_proj.weight`, c.num_attention_heads * d, H, 2);
    norm(`${p}self_attn.q_norm.weight`, d);
    if (l < firstShared) {
      lin(`${p}self_attn.k_proj.weight`, c.num_key_value_heads * d, H, 2);
      lin(`${p}self_attn.v_proj.weight`, c.num_key_value_heads * d, H);
      norm(`${p}self_attn.k_norm.weight`, d);
    }
    lin(`${p}self_attn.o_proj.weight`, H, c.num_attention_heads * d);
    lin(`${p}mlp.gate_proj.weight`, I, H);
    lin(`${p}mlp.up_proj.weight`, I, H);
    lin(`${p}mlp.down_proj.weight`, H, I);
    norm(`${p}altup.correct_output_scale`, H);
    add(`${p}altup.correction_coefs.weight`, [n, n], 0.1);
    add(`${p}altup.prediction_coefs.weight`, [n * n, n], 0.1);
    lin(`${p}altup.modality_router.weight`, n, H);
    norm(`${p}altup.router_norm.weight`, H);
    lin(`${p}laurel.linear_left.weight`, c.laurel_rank, H);
    lin(`${p}laurel.linear_right.weight`, H, c.laurel_rank);
    norm(`${p}laurel.post_laurel_norm.weight`, H, outGain);
    lin(`${p}per_layer_input_gate.weight`, P, H);
    lin(`${p}per_layer_projection.weight`, H, P);
  }
  norm('model.norm.weight', H);
  add('lm_head.weight', [c.vocab_size, H], 1 / Math.sqrt(H));
  return plan;
}

/**
 * The random source with the per-layer table served in row ranges: a row is one of 64 random rows,
 * picked by a hash of its index. `get` of the table throws, as reading it whole would at E4B.
 */
function withRangedTable(source, table) {
  const [rows, width] = table.shape;
  const rowBytes = 2 * width;
  const pool = randomBf16(64 * width, table.std, table.offset, xorshift(0x85ebca6b));
  const rowOf = (r) => {
    const at = (hash(String(r)) % 64) * rowBytes;
    return pool.subarray(at, at + rowBytes);
  };
  const info = (name) => {
    if (name === table.name) return { name, dtype: 'bf16', shape: table.shape, byteLength: rows * rowBytes };
    const t = source.get(name);
    return { name, dtype: t.dtype, shape: t.shape, byteLength: t.data.byteLength };
  };
  return {
    ...source,
    get(name) {
      if (name === table.name) throw new Error(`${name} (${rows} × ${width} bf16) is served in row ranges only (readRange), as a checkpoint's would be at this size`);
      return source.get(name);
    },
    info,
    readRange(name, byteOffset, byteLength, into) {
      const out = into ?? new Uint8Array(byteLength);
      if (name !== table.name) {
        out.set(source.get(name).data.subarray(byteOffset, byteOffset + byteLength));
        return out.subarray(0, byteLength);
      }
      if (byteOffset % rowBytes !== 0 || byteLength % rowBytes !== 0 || byteOffset + byteLength > rows * rowBytes) {
        throw new Error(`readRange(${name}, ${byteOffset}, ${byteLength}): whole rows of ${rowBytes} bytes only`);
      }
      for (let r = 0; r < byteLength / rowBytes; r++) out.set(rowOf(byteOffset / rowBytes + r), r * rowBytes);
      return out.subarray(0, byteLength);
    },
  };
}

/** Config (`gemma3n_text`), precision, weight source, plan, bytes and decode floor; `dtype` bf16 or f32. */
export function randomGemma3nModel({ dtype = 'bf16', layers, tiny = false } = {}) {
  if (!['bf16', 'f32'].includes(dtype)) throw new Error(`--dtype must be bf16 or f32 for gemma3n-e4b, got ${dtype}`);
  const config = structuredClone(tiny ? TINY : FULL);
  if (layers !== undefined) config.num_hidden_layers = layers;
  perLayer(config, tiny);
  const precision = resolvePrecision(dtype, config);
  // The device's tensors, and the per-layer table the host keeps.
  const plan = gemma3nPlan(config, 0.3);
  const table = plan.splice(plan.findIndex((t) => t.name === TABLE), 1)[0];
  const random = randomWeights({ origin: 'random Gemma-3n-E4B-shaped weights', plan, head: 'lm_head.weight', embed: 'model.embed_tokens.weight' });
  const weights = withRangedTable({ ...random.weights, names: () => [...random.weights.names(), TABLE], has: (name) => name === TABLE || random.weights.has(name) }, table);
  const rowBytes = precision.rows === 'f32' ? 4 : 2;
  const bytesOf = (t) => random.bytesOf(t, rowBytes);
  const floor = gemma3nFloor(config, plan, bytesOf, rowBytes);
  return {
    name: 'gemma3n-e4b', bench: 'gemma3n-e4b-shaped decode', modelType: config.model_type,
    config, text: config, precision, weights, plan, bytesOf, rowBytes,
    layers: floor.layers, floor,
    // Layer kinds of --layer-times: the AltUp parts as one, the PLE's residual add with the PLE.
    kinds: { 'altup-streams-in': 'altup', 'altup-predict': 'altup', 'altup-correct': 'altup', 'altup-streams-out': 'altup', 'ple-add': 'ple' },
    notes: {
      host_weight_bytes: 2 * elements(table),
      ple_table: 'on the host (host_weight_bytes), served in row ranges; the rows of the tokens in flight cached on the device',
    },
    release: random.release,
  };
}

/**
 * The floor of a Gemma 3n decode step at batch B and context C: every device weight once but the
 * embedding table (the lm head whole; attention, MLPs whole with activation sparsity not taken off,
 * AltUp, Laurel, the PLE projections), one embedding row per sequence (the PLE's gather of the same
 * rows not counted again), the per-layer table's rows of the batch's tokens (B × L·P values, read
 * from the device slot cache; a miss's upload from the host is not counted), and the KV cache every
 * layer reads (its own or, for a KV-shared layer, its source's; a sliding layer min(C, window) keys).
 */
function gemma3nFloor(c, plan, bytesOf, rowBytes) {
  const embed = 'model.embed_tokens.weight';
  const dense = plan.filter((t) => t.name !== embed).reduce((a, t) => a + bytesOf(t), 0);
  const L = c.num_hidden_layers;
  const pleRowBytes = 2 * L * c.hidden_size_per_layer_input;
  const kvBytes = 2 * c.num_key_value_heads * c.head_dim * rowBytes;
  const full = c.layer_types.filter((t) => t === 'full_attention').length;
  return {
    layers: { total: L, sliding: L - full, full, kv_shared: c.num_kv_shared_layers, sparse_mlp: c.activation_sparsity_pattern.filter((s) => s > 0).length },
    counts: 'every device weight once but the embedding table (lm head whole; MLPs whole, activation sparsity not taken off); one embedding row per sequence; the per-layer table rows of the batch\'s tokens (device slot cache; host uploads on a miss not counted); the KV cache every layer reads (its own or its source\'s; sliding layers min(context, window) keys)',
    stepBytes: (B, context) => dense + B * c.hidden_size * rowBytes + B * pleRowBytes
      + B * kvBytes * c.layer_types.reduce((a, t) => a + (t === 'sliding_attention' ? Math.min(context, c.sliding_window) : context), 0),
    report: { dense_weight_bytes: dense, ple_row_bytes_per_token: pleRowBytes, kv_bytes_per_token_layer: kvBytes },
  };
}
