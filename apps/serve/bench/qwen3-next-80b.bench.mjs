// Decode throughput of a Qwen3-Next-80B-shaped model (48 layers: 36 Gated DeltaNet, 12 gated
// attention, all at full width) with random weights in the layout of a real checkpoint, against
// the roofline of the bytes a decode step must move (weights touched + recurrent state + KV cache)
// at the copy bandwidth measured in the same run. --dtype bf16 (Qwen3-Next-80B-A3B-Instruct) or
// fp8 (the -FP8 release: block-FP8 Linear weights with 128 × 128 f32 scales, router, in_proj_ba,
// norms, conv, embeddings and lm head in bf16), or f32 (the reference path). Experts can be reduced
// from 512 to --experts (top-10 kept) so a bf16 model fits one GPU; the report says so.
//
//   node bench/qwen3-next-80b.bench.mjs [--backend cuda] [--dtype bf16|fp8|f32] [--experts 64]
//        [--batches 1,8,64] [--steps 64] [--prompt 128] [--spec 4] [--eager] [--layer-times]
//        [--tiny] [--out FILE]
// --tiny: a 4-layer, narrow model of the same structure, to check the script on the CPU. Greedy
// decode picks its tokens on the device (layer-std's DeviceSampler), as `metrale serve` does.
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { EngineLoop, LayerTimer, NgramProposer, StepDriver, generateAll, describePrecision, gib } from '@metrale/core';
import { DeviceSampler } from '@metrale/layer-std';
import { PrefillLastRowsHead, registerModels } from '../dist/index.js';
import { benchPrompt, random80bModel } from './random-80b-model.mjs';

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
    // Also split an eager decode step's device time by layer kind (attention, GDN, MoE, norms, lm head).
    'layer-times': { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});

const model = random80bModel({ dtype: o.dtype, experts: Number(o.experts), tiny: o.tiny, ...(o.layers ? { layers: Number(o.layers) } : {}) });
const { config, precision, weights, plan, bytesOf } = model;

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
// The served head: a prefill step computes logits only for each prompt's last row, as metrale serve does.
const servedLayers = PrefillLastRowsHead.wrapLast(stack.layers);
const buildS = (performance.now() - t0) / 1000;
console.error(`built ${config.num_hidden_layers} layers in ${buildS.toFixed(1)} s (${describePrecision(precision)})`);
model.release();

// Bytes a decode step must move at batch B (context C): every weight but the embedding table and
// the experts once; the experts the batch routes to (uniform routing: E·(1 − (1 − top/E)^B) per
// layer); one embedding row per sequence; the GDN state read and written, the KV cache read. A
// weight takes its device bytes: 4 (f32), 2 (bf16) or 1 + its block scales (FP8); rows and the KV
// cache are in the rows type (f32 or bf16).
const ROW_BYTES = model.rowBytes;
const isExpert = (t) => /\.experts\.\d+\./.test(t.name);
const dense = plan.filter((t) => !isExpert(t) && t.name !== 'model.embed_tokens.weight').reduce((a, t) => a + bytesOf(t), 0);
const expertPlan = plan.filter((t) => /\.layers\.0\.mlp\.experts\.0\./.test(t.name));
const expertBytes = expertPlan.reduce((a, t) => a + bytesOf(t), 0);
const deviceWeightBytes = plan.reduce((a, t) => a + bytesOf(t), 0);
const { gdn: gdnLayers, attention: attnLayers } = model.layers;
const stateBytes = config.linear_num_value_heads * config.linear_key_head_dim * config.linear_value_head_dim * 4;
function stepBytes(B, context) {
  const E = config.num_experts;
  const touched = E * (1 - (1 - config.num_experts_per_tok / E) ** B);
  return dense + config.num_hidden_layers * touched * expertBytes + B * config.hidden_size * ROW_BYTES
    + gdnLayers * B * 2 * stateBytes + attnLayers * B * context * 2 * config.num_key_value_heads * config.head_dim * ROW_BYTES;
}

const results = [];
// The serving loop picks greedy tokens on the device, as `metrale serve` does.
const picker = new DeviceSampler(gpu, maxBatch * (k + 1));
const modes = [{ spec: false, graphs: true }, ...(o.eager ? [{ spec: false, graphs: false }] : []), { spec: true, graphs: true }];
for (const { spec, graphs } of modes) {
  for (const B of batches) {
    const driver = new StepDriver({ gpu, layers: servedLayers, limits, graphs });
    // The engine loop that serves: every prompt in one chunk, several prompts per prefill step.
    const loop = new EngineLoop({ driver, vocabSize: config.vocab_size, prefillChunk: promptLen, picker, ...(spec ? { speculation: { proposer: new NgramProposer({ k, minN: 1, maxN: 3 }), k } } : {}) });
    const runner = { generate: (reqs) => generateAll(loop, reqs, spec ? k : undefined) };
    // A repetitive prompt, so n-gram drafts have something to match.
    // Each sequence has its own prompt (its own block of tokens, so routing differs across the batch).
    const requests = Array.from({ length: B }, (_, b) => ({ prompt: benchPrompt(config, b, promptLen), maxTokens: steps, stopTokenIds: [] }));
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
// Device time of an eager decode step by layer kind (the timer waits after every step, so these are
// eager figures beside the replayed steps above).
const layerTimes = [];
if (o['layer-times']) {
  for (const B of batches) {
    const timer = new LayerTimer(gpu);
    const driver = new StepDriver({ gpu, layers: servedLayers, limits, graphs: false, layerTimer: timer });
    const loop = new EngineLoop({ driver, vocabSize: config.vocab_size, prefillChunk: promptLen });
    const requests = Array.from({ length: B }, (_, b) => ({ prompt: benchPrompt(config, b, promptLen), stopTokenIds: [] }));
    generateAll(loop, requests.map((r) => ({ ...r, maxTokens: 2 }))); // warm-up
    timer.reset();
    generateAll(loop, requests.map((r) => ({ ...r, maxTokens: steps })));
    const decodeSteps = timer.steps('decode');
    const perStep = Object.fromEntries(Object.entries(timer.totals('decode')).map(([kind, ms]) => [kind, Number((ms / decodeSteps).toFixed(4))]));
    const row = { batch: B, eager_step_ms: Number(Object.values(perStep).reduce((a, b) => a + b, 0).toFixed(3)), ms_per_step_by_kind: perStep };
    layerTimes.push(row);
    console.error(JSON.stringify(row));
    driver.dispose();
    timer.dispose();
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
  ...(layerTimes.length ? { layer_times: layerTimes } : {}),
};
console.log(JSON.stringify(report));
if (o.out) writeFileSync(o.out, `${JSON.stringify(report, null, 2)}\n`);
picker.dispose();
stack.dispose();
gpu.dispose();
