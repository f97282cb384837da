// Decode throughput of a Qwen3-Next-80B-shaped model (48 layers: 36 Gated DeltaNet, 12 gated
// attention, all at full width) with random weights in the layout of a real checkpoint, against
// the roofline of the bytes a decode step must move (weights touched + recurrent state + KV cache)
// at the copy bandwidth measured in the same run. --dtype bf16 (Qwen3-Next-80B-A3B-Instruct) or
// fp8 (the -FP8 release: block-FP8 Linear weights with 128 × 128 f32 scales, router, in_proj_ba,
// norms, conv, embeddings and lm head in bf16), or f32 (the reference path). Experts can be reduced
// from 512 to --experts (top-10 kept) so a bf16 model fits one GPU; the report says so.
//
//   node bench/qwen3-next-80b.bench.mjs [--backend cuda] [--dtype bf16|fp8|f32] [--experts 64]
//        [--batches 1,8,64] [--steps 64] [--prompt 128] [--spec 4] [--tiny] [--out FILE]
// --tiny: a 4-layer, narrow model of the same structure, to check the script on the CPU.
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { EngineLoop, NgramProposer, StepDriver, blocksOf, generateAll, describePrecision, f32ToE4m3, gib, resolvePrecision } from '@metrale/core';
import { qwen3NextTensorPlan, registerModels } from '../dist/index.js';

const { values: o } = parseArgs({
  options: {
    backend: { type: 'string', default: 'cuda' },
    dtype: { type: 'string', default: 'bf16' },
    experts: { type: 'string', default: '64' },
    batches: { type: 'string', default: '1,8,64' },
    steps: { type: 'string', default: '64' },
    prompt: { type: 'string', default: '128' },
    spec: { type: 'string', default: '4' },
    tiny: { type: 'boolean', default: false },
    // Fewer layers at full width (timing the load on a small machine).
    layers: { type: 'string' },
    // Also time each plain-decode row without CUDA graphs (replay must never be slower).
    eager: { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});

// Qwen3-Next-80B-A3B's config.json, with the expert count reduced.
const full = {
  model_type: 'qwen3_next', vocab_size: 151936, hidden_size: 2048, intermediate_size: 5120, num_hidden_layers: 48,
  full_attention_interval: 4, num_attention_heads: 16, num_key_value_heads: 2, head_dim: 256,
  rope_theta: 10000000, partial_rotary_factor: 0.25, linear_num_key_heads: 16, linear_num_value_heads: 32,
  linear_key_head_dim: 128, linear_value_head_dim: 128, linear_conv_kernel_dim: 4, num_experts: Number(o.experts),
  num_experts_per_tok: 10, moe_intermediate_size: 512, shared_expert_intermediate_size: 512, norm_topk_prob: true,
  decoder_sparse_step: 1, mlp_only_layers: [], rms_norm_eps: 1e-6, hidden_act: 'silu', tie_word_embeddings: false,
  attention_bias: false, max_position_embeddings: 262144, eos_token_id: 151645, torch_dtype: 'bfloat16',
};
const tiny = {
  ...full, vocab_size: 2048, hidden_size: 64, num_hidden_layers: 4, num_attention_heads: 4, head_dim: 16,
  linear_num_key_heads: 2, linear_num_value_heads: 4, linear_key_head_dim: 16, linear_value_head_dim: 16,
  num_experts: 8, num_experts_per_tok: 2, moe_intermediate_size: 32, shared_expert_intermediate_size: 32,
};
const config = o.tiny ? tiny : full;
if (o.layers) config.num_hidden_layers = Number(o.layers);
if (!['bf16', 'fp8', 'f32'].includes(o.dtype)) throw new Error(`--dtype must be bf16, fp8 or f32, got ${o.dtype}`);
const fp8 = o.dtype === 'fp8';
if (fp8) config.quantization_config = { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [128, 128] };
const precision = resolvePrecision(o.dtype === 'fp8' ? 'auto' : o.dtype, config);
config.layer_types = Array.from({ length: config.num_hidden_layers }, (_, i) => ((i + 1) % config.full_attention_interval === 0 ? 'full_attention' : 'linear_attention'));

// Random bf16 tensors without writing 20 GB: each (shape, spread) has four random buffers and a
// tensor takes one of them by a hash of its name, so experts, heads and layers differ.
// Layers write back with gain 0.3 and the lm head maps token t to the next one of its block of
// eight (the embedding of t is the head row of next(t)), so greedy text cycles through a block and
// n-gram drafts are accepted as they would be on repetitive real text.
const plan = [...qwen3NextTensorPlan(config, 0.3), { name: 'lm_head.weight', shape: [config.vocab_size, config.hidden_size], std: 4 / Math.sqrt(config.hidden_size), offset: 0 }];
const byName = new Map(plan.map((t) => [t.name, t]));
const pools = new Map();
let seed = 0x9e3779b9;
const next = () => {
  seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
};
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function randomBf16(n, std, offset) {
  const out = new Uint16Array(n);
  const scale = std * Math.sqrt(3);
  for (let i = 0; i < n; i++) {
    f32[0] = offset + scale * (2 * next() - 1);
    out[i] = (u32[0] + 0x7fff + ((u32[0] >>> 16) & 1)) >>> 16;
  }
  return new Uint8Array(out.buffer);
}
const hash = (s) => [...s].reduce((h, c) => Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0, 2166136261);
// The Linear weights the published FP8 checkpoint quantizes (not the router, in_proj_ba, the shared
// expert's gate, norms, conv, embeddings or the lm head).
const FP8_KEEP = /(in_proj_ba|mlp\.gate|shared_expert_gate|embed_tokens|lm_head)\.weight$/;
const quantized = (t) => fp8 && t.shape.length === 2 && t.name.endsWith('.weight') && !FP8_KEEP.test(t.name) && !t.name.includes('norm');
/** The codes of 256 evenly spaced values in [−448, 448]: a random byte picks a uniform value. */
const UNIFORM_CODES = Uint8Array.from({ length: 256 }, (_, i) => f32ToE4m3(448 * ((2 * i + 1) / 256 - 1)));
/** Random E4M3 codes of a uniform spread, and their scales: amax of the spread / 448 per block. */
function randomFp8(t) {
  const [rows, cols] = t.shape;
  const codes = new Uint8Array(rows * cols);
  const amax = t.std * Math.sqrt(3);
  for (let i = 0; i < codes.length; i += 4) {
    const r = Math.floor(next() * 4294967296);
    codes[i] = UNIFORM_CODES[r & 255];
    codes[i + 1] = UNIFORM_CODES[(r >>> 8) & 255];
    codes[i + 2] = UNIFORM_CODES[(r >>> 16) & 255];
    codes[i + 3] = UNIFORM_CODES[r >>> 24];
  }
  const scales = new Float32Array(blocksOf(rows) * blocksOf(cols)).fill(amax / 448);
  return { codes, scales };
}
const BLOCK = 8;
function cyclicHead() {
  const D = config.hidden_size;
  const embed = new Uint16Array(weights.get('model.embed_tokens.weight').data.buffer);
  const head = new Uint16Array(config.vocab_size * D);
  for (let t = 0; t < config.vocab_size; t++) {
    const next = BLOCK * Math.floor(t / BLOCK) + ((t + 1) % BLOCK);
    if (next < config.vocab_size) head.set(embed.subarray(t * D, (t + 1) * D), next * D);
  }
  return new Uint8Array(head.buffer);
}
const SCALE = '_scale_inv';
const weights = {
  origin: 'random Qwen3-Next-80B-shaped weights',
  names: () => plan.flatMap((t) => (quantized(t) ? [t.name, t.name + SCALE] : [t.name])),
  has: (name) => byName.has(name) || (name.endsWith(SCALE) && quantized(byName.get(name.slice(0, -SCALE.length)) ?? { shape: [], name: '' })),
  get(name) {
    if (name.endsWith(SCALE)) {
      const t = byName.get(name.slice(0, -SCALE.length));
      const { scales } = fp8Pool(t);
      return { name, dtype: 'f32', shape: [blocksOf(t.shape[0]), blocksOf(t.shape[1])], data: new Uint8Array(scales.buffer) };
    }
    const t = byName.get(name);
    if (!t) throw new Error(`no tensor ${name}`);
    if (quantized(t)) return { name, dtype: 'f8e4m3', shape: t.shape, data: fp8Pool(t).codes };
    if (name === 'lm_head.weight') return { name, dtype: 'bf16', shape: t.shape, data: cyclicHead() };
    const n = t.shape.reduce((a, b) => a * b, 1);
    const variants = n > 64 * 1024 * 1024 ? 1 : 4;
    const key = `${t.shape.join('x')}/${t.std}/${t.offset}/${hash(name) % variants}`;
    if (!pools.has(key)) pools.set(key, randomBf16(n, t.std, t.offset));
    return { name, dtype: 'bf16', shape: t.shape, data: pools.get(key) };
  },
};

function fp8Pool(t) {
  const key = `fp8/${t.shape.join('x')}/${t.std}/${hash(t.name) % 4}`;
  if (!pools.has(key)) pools.set(key, randomFp8(t));
  return pools.get(key);
}

const gpu = o.backend === 'cuda' ? (await import('@metrale/cuda-backend')).CudaBackend.create() : new (await import('@metrale/cpu-backend')).CpuBackend();
let ceilings;
if (o.backend === 'cuda') {
  const { measureCeilings } = await import('@metrale/cuda-backend');
  ceilings = measureCeilings(gpu, { log: (l) => console.error(l) });
}
const copyBps = ceilings?.copy?.bytesPerS;

const batches = o.batches.split(',').map(Number);
const maxBatch = Math.max(...batches);
const steps = Number(o.steps);
const promptLen = Number(o.prompt);
const k = Number(o.spec);
const limits = { maxSeqs: maxBatch, maxBatch, maxK: k + 1, maxSeqLen: promptLen + steps + k + 8, maxRows: Math.max(maxBatch * (k + 1), promptLen * Math.min(maxBatch, 8)) };
const t0 = performance.now();
const stack = registerModels().forConfig(config, 'bench config').build({ gpu, config, weights, limits, precision });
const buildS = (performance.now() - t0) / 1000;
console.error(`built ${config.num_hidden_layers} layers in ${buildS.toFixed(1)} s (${describePrecision(precision)})`);
pools.clear();

// Bytes a decode step must move at batch B (context C): every weight but the embedding table and
// the experts once; the experts the batch routes to (uniform routing: E·(1 − (1 − top/E)^B) per
// layer); one embedding row per sequence; the GDN state read and written, the KV cache read. A
// weight takes its device bytes: 4 (f32), 2 (bf16) or 1 + its block scales (FP8); rows and the KV
// cache are in the rows type (f32 or bf16).
const ROW_BYTES = precision.rows === 'f32' ? 4 : 2;
const elements = (t) => t.shape.reduce((a, b) => a * b, 1);
const bytesOf = (t) => (quantized(t) ? elements(t) + 4 * blocksOf(t.shape[0]) * blocksOf(t.shape[1]) : ROW_BYTES * elements(t));
const isExpert = (t) => /\.experts\.\d+\./.test(t.name);
const dense = plan.filter((t) => !isExpert(t) && t.name !== 'model.embed_tokens.weight').reduce((a, t) => a + bytesOf(t), 0);
const expertPlan = plan.filter((t) => /\.layers\.0\.mlp\.experts\.0\./.test(t.name));
const expertBytes = expertPlan.reduce((a, t) => a + bytesOf(t), 0);
const deviceWeightBytes = plan.reduce((a, t) => a + bytesOf(t), 0);
const gdnLayers = config.layer_types.filter((t) => t === 'linear_attention').length;
const attnLayers = config.num_hidden_layers - gdnLayers;
const stateBytes = config.linear_num_value_heads * config.linear_key_head_dim * config.linear_value_head_dim * 4;
function stepBytes(B, context) {
  const E = config.num_experts;
  const touched = E * (1 - (1 - config.num_experts_per_tok / E) ** B);
  return dense + config.num_hidden_layers * touched * expertBytes + B * config.hidden_size * ROW_BYTES
    + gdnLayers * B * 2 * stateBytes + attnLayers * B * context * 2 * config.num_key_value_heads * config.head_dim * ROW_BYTES;
}

const results = [];
const modes = [{ spec: false, graphs: true }, ...(o.eager ? [{ spec: false, graphs: false }] : []), { spec: true, graphs: true }];
for (const { spec, graphs } of modes) {
  for (const B of batches) {
    const driver = new StepDriver({ gpu, layers: stack.layers, limits, graphs });
    // The engine loop that serves: every prompt in one chunk, several prompts per prefill step.
    const loop = new EngineLoop({ driver, vocabSize: config.vocab_size, prefillChunk: promptLen, ...(spec ? { speculation: { proposer: new NgramProposer({ k, minN: 1, maxN: 3 }), k } } : {}) });
    const runner = { generate: (reqs) => generateAll(loop, reqs, spec ? k : undefined) };
    // A repetitive prompt, so n-gram drafts have something to match.
    // Each sequence has its own prompt (its own block of tokens, so routing differs across the batch).
    const requests = Array.from({ length: B }, (_, b) => ({
      prompt: Array.from({ length: promptLen }, (_, i) => (8 + BLOCK * b + ((i * 3) % BLOCK)) % config.vocab_size), maxTokens: steps, stopTokenIds: [],
    }));
    runner.generate(requests.map((r) => ({ ...r, maxTokens: 4 }))); // warm-up: graphs captured
    const { stats } = runner.generate(requests);
    driver.dispose();
    const decodeTokens = stats.generatedTokens - B;
    const tokPerS = decodeTokens / (stats.decodeMs / 1000);
    const stepMs = stats.decodeMs / Math.max(1, stats.steps.decode + stats.steps.verify);
    const floorMs = copyBps ? (stepBytes(B, promptLen + steps / 2) / copyBps) * 1000 : undefined;
    const row = {
      batch: B, spec: spec ? `ngram:k=${k}` : null, graphs, tokens_per_s: Number(tokPerS.toFixed(1)), step_ms: Number(stepMs.toFixed(3)),
      steps: stats.steps, acceptance: stats.speculation ? Number(stats.speculation.acceptanceRate.toFixed(3)) : null,
      roofline_step_ms: floorMs === undefined ? null : Number(floorMs.toFixed(3)),
      of_roofline: floorMs === undefined || spec || !graphs ? null : Number((floorMs / stepMs).toFixed(3)),
    };
    results.push(row);
    console.error(JSON.stringify(row));
  }
}
const report = {
  bench: 'qwen3-next-80b-shaped decode', backend: gpu.kind, device: gpu.device.name, tiny: o.tiny, dtype: describePrecision(precision),
  device_weight_bytes: deviceWeightBytes, device_weight_gib: gib(deviceWeightBytes),
  layers: { total: config.num_hidden_layers, gdn: gdnLayers, attention: attnLayers }, experts: `${config.num_experts} of 512 (top-${config.num_experts_per_tok}); everything else at full width`,
  build_s: Number(buildS.toFixed(1)), prompt_tokens: promptLen, decode_tokens: steps,
  ceilings: ceilings ? { copy: ceilings.copy, gemm: ceilings.gemm, errors: ceilings.errors } : null,
  dense_weight_bytes: dense, expert_bytes: expertBytes, gdn_state_bytes_per_seq_layer: stateBytes,
  results,
};
console.log(JSON.stringify(report));
if (o.out) writeFileSync(o.out, `${JSON.stringify(report, null, 2)}\n`);
stack.dispose();
gpu.dispose();
