// Prefill (time to first token) of the Qwen3-Next-80B-shaped model of
// random-models/qwen3-next-80b.mjs: one prompt of each --lengths, and --batch prompts of
// --batch-length together, through the engine loop that serves (prompts cut in --chunk rows per
// step; a list runs every case at each). Each case reports ms, tokens/s and the
// share of the bf16 GEMM rate measured in the same run that the model's FLOPs take, with the
// device time by layer kind (an eager, timed pass). The peer (../shared/peers/hf_peer.py) runs in
// the same device call; its JSON is read with --peer FILE and the ratio printed beside ours.
//
//   node bench/qwen3-next-80b-prefill.bench.mjs [--backend cuda] [--dtype bf16|fp8|f32]
//        [--experts 64] [--lengths 512,4096,32768] [--batch 8] [--batch-length 2048]
//        [--chunk 4096|256,1024,4096] [--repeats 3] [--peer FILE] [--tiny] [--out FILE]
//
// Model FLOPs counted: 2 × the weights of every projection, router and expert a token uses, the lm
// head for the last row of each prompt, attention's QKᵀ and PV over the causal triangle, and Gated
// DeltaNet's three state products (6 · d_k · d_v per token and value head). Norms, gates, the conv
// and softmax are left out (they are not GEMM work).
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { EngineLoop, LayerTimer, StepDriver, describePrecision, generateAll, gib } from '@metrale/core';
import { PrefillLastRowsHead, registerModels } from '../dist/index.js';
import { benchDevice } from './device.mjs';
import { benchPrompt, random80bModel } from './random-models/qwen3-next-80b.mjs';

const { values: o } = parseArgs({
  options: {
    backend: { type: 'string', default: 'cuda' },
    dtype: { type: 'string', default: 'bf16' },
    experts: { type: 'string', default: '64' },
    lengths: { type: 'string', default: '512,4096,32768' },
    batch: { type: 'string', default: '8' },
    'batch-length': { type: 'string', default: '2048' },
    chunk: { type: 'string', default: '4096' },
    repeats: { type: 'string', default: '3' },
    peer: { type: 'string' },
    tiny: { type: 'boolean', default: false },
    layers: { type: 'string' },
    out: { type: 'string' },
  },
});

const model = random80bModel({ dtype: o.dtype, experts: Number(o.experts), tiny: o.tiny, ...(o.layers ? { layers: Number(o.layers) } : {}) });
const { config, precision, weights, plan } = model;
const lengths = o.lengths.split(',').map(Number);
const batch = Number(o.batch);
const batchLength = Number(o['batch-length']);
const chunks = o.chunk.split(',').map(Number);
const chunk = Math.max(...chunks);
const repeats = Number(o.repeats);
const shapes = [...lengths.map((len) => ({ prompts: 1, length: len })), ...(batch > 0 ? [{ prompts: batch, length: batchLength }] : [])];
const cases = chunks.flatMap((chunk) => shapes.map((s) => ({ ...s, chunk })));

// The peer's JSON (its last line), read before the model is built: a peer run that failed or timed
// out leaves the bench without ratios, never without its own figures.
function readPeer(file) {
  if (!file) return undefined;
  try {
    const last = readFileSync(file, 'utf8').trim().split('\n').at(-1);
    const peer = JSON.parse(last ?? '');
    if (!Array.isArray(peer.prefill)) throw new Error('it has no "prefill" list');
    return peer;
  } catch (error) {
    console.error(`peer not measured: ${file} is not hf_peer.py's JSON (${error.message}); no ratios`);
    return undefined;
  }
}
const peer = readPeer(o.peer);

const { gpu, ceilings } = await benchDevice(o.backend);
const gemmFlopPerS = ceilings?.gemm?.flopPerS;

const maxSeqs = Math.max(...cases.map((c) => c.prompts));
const limits = { maxSeqs, maxBatch: maxSeqs, maxK: 1, maxSeqLen: Math.max(...cases.map((c) => c.length)) + 8, maxRows: Math.max(chunk, maxSeqs) };
const t0 = performance.now();
const stack = registerModels().forConfig(config, 'bench config').build({ gpu, config, weights, limits, precision });
// The served head: a prefill step computes logits only for each prompt's last row, as metrale serve does.
const servedLayers = PrefillLastRowsHead.wrapLast(stack.layers);
const buildS = (performance.now() - t0) / 1000;
console.error(`built ${config.num_hidden_layers} layers in ${buildS.toFixed(1)} s (${describePrecision(precision)})`);
model.release();

// FLOPs of a prefill of `prompts` prompts of `length` tokens (see the header).
const elements = (t) => t.shape.reduce((a, b) => a * b, 1);
const isExpert = (t) => /\.experts\.\d+\./.test(t.name);
const projection = (t) => t.shape.length === 2 && t.name.endsWith('.weight') && !/embed_tokens|lm_head|norm/.test(t.name) && !isExpert(t);
const denseParams = plan.filter(projection).reduce((a, t) => a + elements(t), 0);
const expertParams = plan.filter((t) => /\.layers\.0\.mlp\.experts\.0\./.test(t.name)).reduce((a, t) => a + elements(t), 0);
const moeLayers = new Set(plan.filter(isExpert).map((t) => t.name.split('.')[2])).size;
function modelFlops(prompts, length) {
  const tokens = prompts * length;
  const linear = 2 * tokens * (denseParams + config.num_experts_per_tok * expertParams * moeLayers) + 2 * prompts * config.vocab_size * config.hidden_size;
  const attention = model.layers.attention * 4 * config.num_attention_heads * config.head_dim * prompts * (length * (length + 1)) / 2;
  const gdn = model.layers.gdn * 6 * config.linear_num_value_heads * config.linear_key_head_dim * config.linear_value_head_dim * tokens;
  return linear + attention + gdn;
}

const peerMs = (c) => {
  if (!peer || c.prompts !== 1) return undefined;
  const p = peer.prefill?.find((r) => r.tokens === c.length);
  return p ? Math.min(...p.ms) : undefined;
};

const results = [];
for (const c of cases) {
  const requests = Array.from({ length: c.prompts }, (_, b) => ({ prompt: benchPrompt(config, b, c.length), maxTokens: 1, stopTokenIds: [] }));
  const driver = new StepDriver({ gpu, layers: servedLayers, limits, graphs: false });
  // No prefix cache: a repeat of the same prompt would otherwise reuse its blocks (and GDN states at
  // chunk boundaries) and time only the tail.
  const loop = new EngineLoop({ driver, vocabSize: config.vocab_size, prefillChunk: c.chunk, prefixCaching: false });
  generateAll(loop, requests); // warm-up
  const ms = [];
  for (let r = 0; r < repeats; r++) ms.push(generateAll(loop, requests).stats.prefillMs);
  driver.dispose();
  // One timed pass for the split by layer kind.
  const timer = new LayerTimer(gpu);
  const timed = new StepDriver({ gpu, layers: servedLayers, limits, graphs: false, layerTimer: timer });
  generateAll(new EngineLoop({ driver: timed, vocabSize: config.vocab_size, prefillChunk: c.chunk, prefixCaching: false }), requests);
  const byKind = Object.fromEntries(Object.entries(timer.totals('prefill')).map(([kind, t]) => [kind, Number(t.toFixed(2))]));
  timed.dispose();
  timer.dispose();
  const best = Math.min(...ms);
  const flops = modelFlops(c.prompts, c.length);
  const hf = peerMs(c);
  const row = {
    prompts: c.prompts, length: c.length, chunk: c.chunk, ms: ms.map((m) => Number(m.toFixed(1))), best_ms: Number(best.toFixed(1)),
    tokens_per_s: Math.round((c.prompts * c.length * 1000) / best), model_tflop: Number((flops / 1e12).toFixed(2)),
    of_gemm_rate: gemmFlopPerS ? Number((flops / (best / 1000) / gemmFlopPerS).toFixed(3)) : null,
    ms_by_kind: byKind,
    ...(hf === undefined ? {} : { peer_ms: hf, of_peer_time: Number((best / hf).toFixed(3)) }),
  };
  results.push(row);
  console.error(JSON.stringify(row));
}

const report = {
  bench: 'qwen3-next-80b-shaped prefill', backend: gpu.kind, device: gpu.device.name, tiny: o.tiny, dtype: describePrecision(precision),
  layers: model.layers, experts: `${config.num_experts} of 512 (top-${config.num_experts_per_tok}); everything else at full width`,
  build_s: Number(buildS.toFixed(1)), ceilings: ceilings ? { copy: ceilings.copy, gemm: ceilings.gemm, errors: ceilings.errors } : null,
  ...(peer ? { peer: { name: peer.peer, gdn: peer.gdn, experts: peer.experts } } : {}),
  results,
};
console.log(JSON.stringify(report));
if (o.out) writeFileSync(o.out, `${JSON.stringify(report, null, 2)}\n`);
stack.dispose();
gpu.dispose();
