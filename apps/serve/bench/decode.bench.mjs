// Decode throughput of a model with random weights in the layout of a real checkpoint, at its full
// widths, through the served model registry (`registerModels().forConfig`: the adapter `metrale
// serve` builds) and the engine loop that serves, against the floor of the bytes a decode step must
// move (each model's module says what it counts) at the copy bandwidth measured in the same run.
// --model (random-models/index.mjs):
// - qwen3-next-80b (default): 48 layers (36 Gated DeltaNet, 12 gated attention). --dtype bf16
//   (Qwen3-Next-80B-A3B-Instruct) or fp8 (the -FP8 release: block-FP8 Linear weights with 128 × 128
//   f32 scales, router, in_proj_ba, norms, conv, embeddings and lm head in bf16), or f32 (the
//   reference path). Experts reduced from 512 to --experts (default 64, top-10 kept) so a bf16
//   model fits one GPU; the report says so.
// - qwen3.5-moe: Qwen3.5-35B-A3B's text model in the published `qwen3_5_moe` layout, 40 layers
//   (30 Gated DeltaNet, 10 gated attention), all 256 experts (top-8) by default; --dtype bf16 or f32.
// - gemma3n-e4b: Gemma 3n E4B's text model (`gemma3n_text`), 35 layers with AltUp, Laurel, the
//   per-layer inputs (table on the host), sliding and full attention with KV sharing; --dtype bf16
//   or f32. --layer-times splits its step into attention, mlp, altup, laurel, ple, rms-norm (with
//   the residual sums after the norms), embedding and lm-head.
//
//   node bench/decode.bench.mjs [--model qwen3-next-80b|qwen3.5-moe|gemma3n-e4b] [--backend cuda]
//        [--dtype bf16|fp8|f32] [--experts N] [--batches 1,8,64] [--steps 64] [--prompt 128]
//        [--spec 4] [--eager] [--sync] [--repeats 1] [--layer-times] [--graph-times] [--tiny] [--layers N]
//        [--sampling T,P,K[,N]] [--out FILE]
// --spec K: the drafts of the speculating rows (n-gram), run after the plain ones; 0: plain decode
// only (a device call then spends no time on them).
// --sampling T,P,K: also run the plain rows with every sequence sampled at temperature T, top-p P,
// top-k K (seeded), once with the tokens picked on the device (`sampled: 'device'`: the picker's
// sample, as `metrale serve` does) and once with the picker's argmax only, so the host reads and
// samples the logits (`sampled: 'host'`); each row's `tokens_hash` says whether both drew the same.
// With --spec K > 0, the speculating rows sampled too, verified on the device (rejection sampling
// by the picker's `sample`) and on the host. N: the plain sampled rows again with every sequence asking for its tokens' logprobs and its N most
// likely (0–20); the host one gives `logprobs_max_diff`, the largest difference from the device
// one's logprobs.
// --tiny: a few-layer, narrow model of the same structure, to check the script on the CPU. Decode
// picks its tokens on the device (layer-std's DeviceSampler), as `metrale serve` does.
// --sync: also run each plain-decode row with the loop's async scheduling off (`async_scheduling`
// false: every step waits for its token ids before the next is prepared), the same call's base.
// --repeats N: run the plain rows (and the --sync and --eager ones) N times, the kinds taking turns,
// so a comparison within the call does not favour the kind that ran later (rows carry `repeat`).
// Each row's `host_ms`: the host's time in a decode or verify step, outside its waits on the device
// (on CUDA the loop's bookkeeping, step tables and launches; on the CPU backend the kernels too).
// With async scheduling (plain greedy decode) it runs while the device computes the step launched
// ahead; without it (speculating rows, --sync rows) the part before a graph's launch leaves the
// device idle.
// bench/qwen3-next-80b.bench.mjs is this bench (its default model), by the name the records cite.
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { EngineLoop, LayerTimer, NgramProposer, StepDriver, buildModelStack, generateAll, describePrecision, gib } from '@metrale/core';
import { DeviceSampler } from '@metrale/layer-std';
import { PrefillLastRowsHead, registerModels } from '../dist/index.js';
import { benchDevice } from './device.mjs';
import { benchPrompt, randomModel } from './random-models/index.mjs';

const { values: o } = parseArgs({
  options: {
    model: { type: 'string', default: 'qwen3-next-80b' },
    backend: { type: 'string', default: 'cuda' },
    dtype: { type: 'string', default: 'bf16' },
    // Routed experts kept (MoE shapes; default: the model's, see random-models/index.mjs).
    experts: { type: 'string' },
    batches: { type: 'string', default: '1,8,64' },
    steps: { type: 'string', default: '64' },
    prompt: { type: 'string', default: '128' },
    spec: { type: 'string', default: '4' },
    tiny: { type: 'boolean', default: false },
    // Fewer layers at full width (timing the load on a small machine).
    layers: { type: 'string' },
    // Also time each plain-decode row without CUDA graphs (replay must never be slower).
    eager: { type: 'boolean', default: false },
    sync: { type: 'boolean', default: false },
    repeats: { type: 'string', default: '1' },
    // Also split an eager decode step's device time by layer kind (attention, GDN, MoE, MLP, norms, lm head, …;
    // on CUDA its launches queued ahead of the device, see QUEUE_AHEAD_MS).
    'layer-times': { type: 'boolean', default: false },
    // Also the device time of each replayed graph (graph_ms; the events around each launch may
    // lengthen a step a little, so the headline rows run without them).
    'graph-times': { type: 'boolean', default: false },
    sampling: { type: 'string' },
    out: { type: 'string' },
  },
});

const model = randomModel(o.model, { dtype: o.dtype, tiny: o.tiny, ...(o.experts ? { experts: Number(o.experts) } : {}), ...(o.layers ? { layers: Number(o.layers) } : {}) });
const { config, text, precision, weights, plan, bytesOf, floor } = model;

const { gpu, ceilings } = await benchDevice(o.backend);
const copyBps = ceilings?.copy?.bytesPerS;

const batches = o.batches.split(',').map(Number);
const maxBatch = Math.max(...batches);
const steps = Number(o.steps);
const promptLen = Number(o.prompt);
const repeats = Number(o.repeats);
if (!Number.isInteger(repeats) || repeats < 1) {
  console.error(`--repeats: how many times the plain rows run, a positive whole number; got ${o.repeats}`);
  process.exit(2);
}
const k = Number(o.spec);
if (!Number.isInteger(k) || k < 0) {
  console.error(`--spec: the drafts of the speculating rows, a whole number (0: no speculating rows); got ${o.spec}`);
  process.exit(2);
}
const sampling = o.sampling === undefined ? undefined : (() => {
  const [temperature, topP, topK, logprobs] = o.sampling.split(',').map(Number);
  if (!(temperature > 0) || !(topP > 0 && topP <= 1) || !(Number.isInteger(topK) && topK >= 0) || !(logprobs === undefined || (Number.isInteger(logprobs) && logprobs >= 0 && logprobs <= 20))) {
    console.error(`--sampling: temperature > 0, top-p in (0, 1], top-k a whole number (0: off) and optionally the logprobs (0 to 20), as T,P,K[,N]; got ${o.sampling}`);
    process.exit(2);
  }
  return { params: { temperature, topP, topK }, logprobs };
})();
const limits = { maxSeqs: maxBatch, maxBatch, maxK: k + 1, maxSeqLen: promptLen + steps + k + 8, maxRows: Math.max(maxBatch * (k + 1), promptLen * Math.min(maxBatch, 8)) };
const t0 = performance.now();
// The adapter `metrale serve` picks for this config.json (its model_type).
const adapter = registerModels().forConfig(config, 'bench config');
// Out of memory while building: a ModelFitError naming the limits to lower.
const stack = buildModelStack(adapter, { gpu, config, weights, limits, precision }, { dir: 'bench config' });
// The served head: a prefill step computes logits only for each prompt's last row, as metrale serve does.
const servedLayers = PrefillLastRowsHead.wrapLast(stack.layers);
const buildS = (performance.now() - t0) / 1000;
console.error(`built ${model.layers.total} layers of ${adapter.modelType} in ${buildS.toFixed(1)} s (${describePrecision(precision)})`);
model.release();

// Bytes a decode step must move at batch B (context C): the model's floor (its `counts` say what).
// A weight takes its device bytes: 4 (f32), 2 (bf16) or 1 + its block scales (FP8); rows and the
// KV cache are in the rows type (f32 or bf16).
const deviceWeightBytes = plan.reduce((a, t) => a + bytesOf(t), 0);
const context = promptLen + steps / 2;

const results = [];
// The serving loop picks greedy and sampled tokens on the device, as `metrale serve` does.
const picker = new DeviceSampler(gpu, maxBatch * (k + 1), { vocab: text.vocab_size });
/** FNV-1a over every output's tokens in order: equal hashes, the same tokens (as far as a hash says). */
const tokensHash = (outputs) => {
  let h = 0x811c9dc5;
  for (const o of outputs) for (const t of [...o.tokens, -1]) h = Math.imul(h ^ (t & 0xffff), 0x01000193) >>> 0, h = Math.imul(h ^ (t >>> 16), 0x01000193) >>> 0;
  return h.toString(16).padStart(8, '0');
};
/** The device rows' logprobs of each batch, for the host rows to compare with. */
const deviceLogprobs = new Map();
/**
 * A sampled row's logprobs figures: the device row keeps its outputs' logprobs; the host row (same
 * seeds, so the same tokens where the hashes agree) reports the largest difference from them, top
 * ones included, and whether every token, rank and top token agreed.
 */
const logprobsRow = (sampled, logprobs, B, outputs) => {
  if (logprobs === undefined) return {};
  const flat = (outs) => outs.flatMap((out) => out.logprobs ?? []);
  if (sampled === 'device') {
    deviceLogprobs.set(B, flat(outputs));
    return { logprobs };
  }
  const device = deviceLogprobs.get(B) ?? [];
  const host = flat(outputs);
  let diff = 0, same = device.length === host.length;
  host.forEach((h, i) => {
    const d = device[i];
    if (!d || d.token !== h.token || d.rank !== h.rank || d.top.length !== h.top.length) return void (same = false);
    diff = Math.max(diff, Math.abs(d.logprob - h.logprob));
    h.top.forEach((t, j) => {
      if (t.token !== d.top[j].token) same = false;
      else diff = Math.max(diff, Math.abs(t.logprob - d.top[j].logprob));
    });
  });
  return { logprobs, logprobs_same_tokens: same, logprobs_max_diff: diff };
};
/** Replaces target[name] with wrap(the method as it was, bound to target). */
const wrapMethod = (target, name, wrap) => {
  target[name] = wrap(target[name].bind(target));
};
/** A step that only decodes (or verifies): no prompt rows, some sequences. */
const decodesOnly = (report) => report.prefillRows === 0 && report.decodeSeqs > 0;
// Host time of a step: its wall time less the time the host waits on the device (a replayed step
// waits for its token ids, and for a staging buffer still in use).
let waitedMs = 0;
for (const name of ['synchronize', 'synchronizeEvent']) {
  wrapMethod(gpu, name, (wait) => (...a) => {
    const t = performance.now();
    try {
      return wait(...a);
    } finally {
      waitedMs += performance.now() - t;
    }
  });
}
// Device time of each replayed graph (an event on its stream before and after the launch): what a
// replayed step's kernels take, beside the step's wall time (step tables, the token pick and any
// wait of the device on the host are outside it). Only the graphs of steps that prefilled nothing
// count (a prefill step also replays the decode of the sequences already running), as for
// step_ms. Read after the run (--graph-times).
const graphTimes = { pairs: [], used: 0, counted: [] };
if (o['graph-times']) {
  wrapMethod(gpu, 'launchGraph', (launch) => (exec, stream) => {
    if (graphTimes.used === graphTimes.pairs.length) graphTimes.pairs.push([gpu.createEvent(), gpu.createEvent()]);
    const [start, end] = graphTimes.pairs[graphTimes.used++];
    gpu.recordEvent(start, stream);
    launch(exec, stream);
    gpu.recordEvent(end, stream);
  });
}
/** Mean device ms of the counted graphs launched since the last call (none: undefined); waits for the device. */
const graphMs = () => {
  graphTimes.used = 0;
  const counted = graphTimes.counted.splice(0);
  if (counted.length === 0) return undefined;
  gpu.synchronize();
  let ms = 0;
  for (const i of counted) ms += gpu.elapsedMs(graphTimes.pairs[i][0], graphTimes.pairs[i][1]);
  return ms / counted.length;
};
const plainModes = [
  { spec: false, graphs: true, asyncScheduling: true },
  ...(o.sync ? [{ spec: false, graphs: true, asyncScheduling: false }] : []),
  ...(o.eager ? [{ spec: false, graphs: false, asyncScheduling: true }] : []),
];
const modes = [
  ...Array.from({ length: repeats }, (_, repeat) => plainModes.map((m) => ({ ...m, repeat }))).flat(),
  ...(sampling ? [undefined, sampling.logprobs].filter((n, i) => i === 0 || n !== undefined).flatMap((logprobs) => ['device', 'host'].map((sampled) => ({ spec: false, graphs: true, asyncScheduling: true, repeat: 0, sampled, logprobs }))) : []),
  ...(k > 0 ? [{ spec: true, graphs: true, asyncScheduling: true, repeat: 0 }] : []),
  ...(k > 0 && sampling ? ['device', 'host'].map((sampled) => ({ spec: true, graphs: true, asyncScheduling: true, repeat: 0, sampled })) : []),
];
// The picker without `sample`: sampled sequences' logits are read and sampled on the host.
const argmaxOnly = { maxRows: picker.maxRows, argmax: (...a) => picker.argmax(...a), argmaxAsync: (...a) => picker.argmaxAsync(...a) };
for (const { spec, graphs, asyncScheduling, repeat, sampled, logprobs } of modes) {
  for (const B of batches) {
    const driver = new StepDriver({ gpu, layers: servedLayers, limits, graphs });
    // The engine loop that serves: every prompt in one chunk, several prompts per prefill step.
    const loop = new EngineLoop({
      driver, vocabSize: text.vocab_size, prefillChunk: promptLen, picker: sampled === 'host' ? argmaxOnly : picker, asyncScheduling,
      ...(spec ? { speculation: { proposer: new NgramProposer({ k, minN: 1, maxN: 3 }), k } } : {}),
    });
    const runner = { generate: (reqs) => generateAll(loop, reqs, spec ? k : undefined) };
    // A repetitive prompt, so n-gram drafts have something to match.
    // Each sequence has its own prompt (its own block of tokens, so routing differs across the batch).
    const requests = Array.from({ length: B }, (_, b) => ({
      prompt: benchPrompt(config, b, promptLen), maxTokens: steps, stopTokenIds: [],
      ...(sampled ? { sampling: { ...sampling.params, seed: 1000 + b }, ...(logprobs !== undefined ? { logprobs } : {}) } : {}),
    }));
    // Warm-up: every bucket's decode graph (and verify graph, speculating) is captured before the
    // timed run, as metrale serve captures them at startup: a speculating loop verifies first and
    // its batch shrinks as sequences finish apart, so it would otherwise capture while timed.
    loop.captureGraphs();
    runner.generate(requests.map((r) => ({ ...r, maxTokens: 4 })));
    // The host time of the steps that only decode or verify.
    let host = 0, hostSteps = 0;
    wrapMethod(loop, 'step', (step) => () => {
      const t = performance.now(), waited = waitedMs, launched = graphTimes.used;
      const report = step();
      if (decodesOnly(report)) {
        host += performance.now() - t - (waitedMs - waited);
        hostSteps++;
        for (let i = launched; i < graphTimes.used; i++) graphTimes.counted.push(i);
      }
      return report;
    });
    graphTimes.used = 0; // the warm-up's events are free for reuse (none of its graphs counts)
    const { stats, outputs } = runner.generate(requests);
    const replayedMs = graphMs();
    const hostMs = host / Math.max(1, hostSteps);
    driver.dispose();
    // The tokens of the steps that prefilled nothing over those steps' time (a token decoded in a
    // step that also prefilled counts in neither), and that time per step that generated tokens.
    const tokPerS = stats.tokensPerSecond;
    const stepMs = stats.decodeMs / Math.max(1, stats.decodeMsSteps);
    const floorMs = copyBps ? (floor.stepBytes(B, context) / copyBps) * 1000 : undefined;
    const row = {
      batch: B, spec: spec ? `ngram:k=${k}` : null, graphs, async_scheduling: asyncScheduling && !spec && !sampled,
      ...(sampled ? { sampled, sampling: sampling.params, tokens_hash: tokensHash(outputs), ...logprobsRow(sampled, logprobs, B, outputs) } : {}), ...(repeats > 1 ? { repeat } : {}), tokens_per_s: Number(tokPerS.toFixed(1)), step_ms: Number(stepMs.toFixed(3)), host_ms: Number(hostMs.toFixed(3)),
      ...(replayedMs !== undefined ? { graph_ms: Number(replayedMs.toFixed(3)) } : {}),
      steps: stats.steps, acceptance: stats.speculation ? Number(stats.speculation.acceptanceRate.toFixed(3)) : null,
      roofline_step_ms: floorMs === undefined ? null : Number(floorMs.toFixed(3)),
      of_roofline: floorMs === undefined || spec || !graphs ? null : Number((floorMs / stepMs).toFixed(3)),
    };
    results.push(row);
    console.error(JSON.stringify(row));
  }
}
// Device time of an eager decode step by layer kind (the timer waits after every step, so these are
// eager figures beside the replayed steps above), and the launches the host makes in one (kernels
// and GEMMs; a GEMM counts once whatever cuBLASLt launches for it, and once where the backend
// launches its own kernel for it (the block-FP8 GEMMs call launch inside gemm); the argmax kernel of
// the device sampler counts too): what a kernel count costs in a graph is the cuda-backend bench's
// kernel chain. `sampling`: the device sampler's argmax and the copy of the ids to the host, as the
// served loop enqueues them after each step (timed apart, see timeSampling; on the CPU backend not
// timed).
// On CUDA each timed step's launches are queued ahead of the device: before the step's first layer
// the stream gets QUEUE_AHEAD_MS of device-to-device copies, so the host has enqueued the step by
// the time the device reaches it and the intervals hold the kernels' time, not the host's launch
// gaps (an eager one-row step is otherwise paced by the host). Each row says how long the copies
// held the device (`queued_ahead_ms`) and how long the host took to enqueue the step after them
// (`host_enqueue_ms`): while the second is the shorter, the device never waited on the host.
const QUEUE_AHEAD_MS = 20;
const QUEUE_COPY_BYTES = 512 * 2 ** 20;
const layerTimes = [];
let counting = false, launches = 0, depth = 0;
for (const name of ['launch', 'gemm']) {
  wrapMethod(gpu, name, (call) => (...a) => {
    if (counting && depth === 0) launches++;
    depth++;
    try {
      return call(...a);
    } finally {
      depth--;
    }
  });
}
if (o['layer-times']) {
  for (const B of batches) {
    const timer = new LayerTimer(gpu);
    // The device-to-device copies that put the host ahead of the device, for the steps and the picks.
    const ahead = gpu.kind === 'cuda' ? { src: gpu.alloc(QUEUE_COPY_BYTES), dst: gpu.alloc(QUEUE_COPY_BYTES) } : undefined;
    const queue = ahead ? queueAhead(timer, ahead) : undefined;
    const driver = new StepDriver({ gpu, layers: servedLayers, limits, graphs: false, layerTimer: timer });
    const pickTimer = ahead ? timeSampling(picker, ahead) : undefined;
    const loop = new EngineLoop({ driver, vocabSize: text.vocab_size, prefillChunk: promptLen, picker });
    const requests = Array.from({ length: B }, (_, b) => ({ prompt: benchPrompt(config, b, promptLen), stopTokenIds: [] }));
    generateAll(loop, requests.map((r) => ({ ...r, maxTokens: 2 }))); // warm-up
    timer.reset();
    queue?.reset();
    pickTimer?.reset();
    // Launches of the steps that only decode (counted around each step, kept for those).
    let decodeLaunches = 0, decodeSteps = 0;
    wrapMethod(loop, 'step', (step) => () => {
      counting = true, launches = 0;
      const report = step();
      counting = false;
      if (decodesOnly(report)) (decodeLaunches += launches), decodeSteps++;
      return report;
    });
    generateAll(loop, requests.map((r) => ({ ...r, maxTokens: steps })));
    const timedSteps = timer.steps('decode');
    const perStep = (totals) => Object.fromEntries(Object.entries(totals).map(([kind, ms]) => [kind, Number((ms / timedSteps).toFixed(4))]));
    // The timer's labels, grouped into the model's layer kinds (most are their own).
    const byKind = {};
    for (const [label, ms] of Object.entries(timer.totals('decode'))) {
      const kind = model.kinds?.[label] ?? label;
      byKind[kind] = (byKind[kind] ?? 0) + ms;
    }
    const kinds = perStep(byKind);
    if (pickTimer) kinds.sampling = Number(pickTimer.meanMs().toFixed(4));
    const row = {
      batch: B, eager_step_ms: Number(Object.values(kinds).reduce((a, b) => a + b, 0).toFixed(3)), launches_per_step: Number((decodeLaunches / Math.max(1, decodeSteps)).toFixed(1)),
      ms_per_step_by_kind: kinds,
      ...(model.kinds ? { ms_per_step_by_label: perStep(timer.totals('decode')) } : {}),
      ...(queue ? queue.report() : {}),
    };
    layerTimes.push(row);
    console.error(JSON.stringify(row));
    driver.dispose();
    timer.dispose();
    queue?.dispose();
    pickTimer?.dispose();
    if (ahead) gpu.free(ahead.src), gpu.free(ahead.dst);
  }
}

/**
 * Times `p`'s enqueued picks (`argmaxAsync`: the argmax and the ids' copy to the host) between two
 * events on the step's stream, until dispose. A device-to-device copy (a quarter of `src`) goes
 * first, so the host has enqueued the pick by the time the device reaches the first event and the
 * interval holds the device's work, not the launch's latency (the step before has just been waited
 * for). `meanMs`: per pick since the last reset.
 */
function timeSampling(p, { src, dst }) {
  const original = p.argmaxAsync;
  const pairs = [];
  let used = 0;
  p.argmaxAsync = (logits, rows, vocab, stream) => {
    if (used === pairs.length) pairs.push([gpu.createEvent(), gpu.createEvent()]);
    const [start, end] = pairs[used++];
    gpu.copyDeviceAsync(dst, src, QUEUE_COPY_BYTES / 4, stream);
    gpu.recordEvent(start, stream);
    const picked = original.call(p, logits, rows, vocab, stream);
    gpu.recordEvent(end, stream);
    return picked;
  };
  return {
    reset: () => void (used = 0),
    meanMs: () => {
      if (used === 0) return 0;
      gpu.synchronizeEvent(pairs[used - 1][1]);
      let ms = 0;
      for (let i = 0; i < used; i++) ms += gpu.elapsedMs(pairs[i][0], pairs[i][1]);
      return ms / used;
    },
    dispose: () => {
      delete p.argmaxAsync; // the class's own again
      for (const [a, b] of pairs) gpu.destroyEvent(a), gpu.destroyEvent(b);
    },
  };
}

/**
 * Queues each timed step's launches ahead of the device (see QUEUE_AHEAD_MS): wraps `timer` so that
 * a step's first mark is preceded by device-to-device copies (`src` to `dst`) on its stream, and
 * measures what the copies held and how long the host then took to reach the step's end.
 */
function queueAhead(timer, { src, dst }) {
  // A copy reads and writes its bytes; the copy ceiling counts both.
  const copyMs = copyBps ? ((2 * QUEUE_COPY_BYTES) / copyBps) * 1000 : 0.5;
  const copies = Math.max(1, Math.ceil(QUEUE_AHEAD_MS / copyMs));
  const start = gpu.createEvent(), end = gpu.createEvent();
  let armed = true, enqueuedAt = 0, queuedMs = 0, hostMs = 0, steps = 0;
  wrapMethod(timer, 'layer', (mark) => (type, stream) => {
    if (armed) {
      armed = false;
      gpu.recordEvent(start, stream);
      for (let i = 0; i < copies; i++) gpu.copyDeviceAsync(dst, src, QUEUE_COPY_BYTES, stream);
      gpu.recordEvent(end, stream);
      enqueuedAt = performance.now();
    }
    mark(type, stream);
  });
  wrapMethod(timer, 'collect', (collect) => (stream, phase) => {
    const host = performance.now() - enqueuedAt;
    collect(stream, phase);
    if (phase === 'decode') (queuedMs += gpu.elapsedMs(start, end)), (hostMs += host), steps++;
    armed = true;
  });
  return {
    reset: () => void ((queuedMs = 0), (hostMs = 0), (steps = 0)),
    report: () => ({ queued_ahead_ms: Number((queuedMs / Math.max(1, steps)).toFixed(3)), host_enqueue_ms: Number((hostMs / Math.max(1, steps)).toFixed(3)) }),
    dispose: () => {
      gpu.destroyEvent(start), gpu.destroyEvent(end);
    },
  };
}

const report = {
  bench: model.bench, model: model.name, adapter: adapter.modelType, backend: gpu.kind, device: gpu.device.name, tiny: o.tiny, dtype: describePrecision(precision),
  device_weight_bytes: deviceWeightBytes, device_weight_gib: gib(deviceWeightBytes),
  layers: model.layers, ...model.notes,
  build_s: Number(buildS.toFixed(1)), prompt_tokens: promptLen, decode_tokens: steps,
  ceilings: ceilings ? { copy: ceilings.copy, gemm: ceilings.gemm, errors: ceilings.errors } : null,
  ...floor.report,
  floor: { counts: floor.counts, context_tokens: context, step_bytes: Object.fromEntries(batches.map((B) => [B, Math.round(floor.stepBytes(B, context))])) },
  config,
  results,
  ...(layerTimes.length ? { layer_times: layerTimes } : {}),
};
console.log(JSON.stringify(report));
if (o.out) writeFileSync(o.out, `${JSON.stringify(report, null, 2)}\n`);
picker.dispose();
stack.dispose();
gpu.dispose();
