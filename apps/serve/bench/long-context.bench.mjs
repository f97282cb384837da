// Serving at real context lengths (#27): the Qwen3-Next-80B-shaped model of
// random-models/qwen3-next-80b.mjs (random weights, --experts 64 of 512 so bf16 fits one GPU),
// built by the adapter `metrale serve` picks for its config.json and served by the engine `metrale
// serve` runs (`startEngine`: the step driver with its KV page pool sized from
// --gpu-memory-utilization after the weights, GDN state snapshots, prefix caching, the device
// sampler and the engine loop), with --max-model-len the config's max_position_embeddings
// (262 144). It reports:
// - the startup figures `metrale serve` logs: the weights' device bytes, the KV pool (pages, bytes,
//   snapshots) and the tokens that fit, the memory utilization;
// - one --prompt of random tokens (a seeded generator: no repeating n-grams), then --decode greedy
//   tokens: the time to first token, prefill tokens/s, decode ms per token (against its floor at
//   the copy rate measured in the same run);
// - the time to first token of a request that shares that prompt's first --shared tokens (a new
//   tail to the same length) against a fresh request of the same length, with the prefix-cache
//   queries and hits of the engine's step reports (vLLM's prefix_cache_queries / _hits); then the
//   same repeated requests on an engine started as `--no-prefix-caching`, whose greedy tokens must
//   be the cached run's. The cache starts a request at the last GDN snapshot inside the shared
//   part: snapshots are saved where a prefill chunk ends on a block boundary (multiples of
//   --prefill-chunk), so a 32 000-token prefix hits 31 744 tokens at chunks of 1 024;
// - with --long N, one prompt of N tokens and --decode tokens (skipped when the pool cannot hold it).
// Every figure of a request is the median of --repeats (the first prompt's: one run).
//
//   node bench/long-context.bench.mjs [--backend cuda] [--dtype bf16|fp8|f32] [--experts 64]
//        [--prompt 32768] [--shared 32000] [--decode 128] [--long 131072] [--repeats 3]
//        [--max-model-len N] [--gpu-memory-utilization 0.9] [--max-batch 32] [--prefill-chunk 1024]
//        [--block-size 16] [--tiny] [--out FILE]
// --tiny: the 4-layer, narrow model of the same structure with prompt 600, shared 512, decode 8 and
// chunks of 64, to check the script on the CPU (--backend cpu; the pool there takes
// serve's CPU default of 256 MiB unless --gpu-memory-utilization is given).
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { buildModelStack, describePrecision, gib } from '@metrale/core';
import { kvMemory, registerModels, servedModelLen, servingLimits, startEngine } from '../dist/index.js';
import { benchDevice } from './device.mjs';
import { randomModel } from './random-models/index.mjs';
import { elements, xorshift } from './random-models/shared.mjs';

const { values: o } = parseArgs({
  options: {
    backend: { type: 'string', default: 'cuda' },
    dtype: { type: 'string', default: 'bf16' },
    experts: { type: 'string', default: '64' },
    prompt: { type: 'string' },
    shared: { type: 'string' },
    decode: { type: 'string' },
    long: { type: 'string' },
    repeats: { type: 'string' },
    'max-model-len': { type: 'string' },
    'gpu-memory-utilization': { type: 'string' },
    'max-batch': { type: 'string', default: '32' },
    'prefill-chunk': { type: 'string' },
    'block-size': { type: 'string', default: '16' },
    tiny: { type: 'boolean', default: false },
    out: { type: 'string' },
  },
});
// The full run's defaults, and the tiny check's.
const defaults = o.tiny ? { prompt: 600, shared: 512, decode: 8, repeats: 1, chunk: 64 } : { prompt: 32768, shared: 32000, decode: 128, repeats: 3, chunk: 1024 };
const promptLen = Number(o.prompt ?? defaults.prompt);
const sharedLen = Number(o.shared ?? defaults.shared);
const decodeTokens = Number(o.decode ?? defaults.decode);
const repeats = Number(o.repeats ?? defaults.repeats);
const longLen = o.long === undefined ? 0 : Number(o.long);
if (!(sharedLen > 0 && sharedLen < promptLen)) throw new Error(`--shared must be between 1 and --prompt − 1, got ${sharedLen} of ${promptLen}`);
// Tokens the repeated and fresh requests generate: enough to compare the answers with and without the cache.
const checkTokens = Math.min(decodeTokens, 16);

const model = randomModel('qwen3-next-80b', { dtype: o.dtype, tiny: o.tiny, experts: Number(o.experts) });
const { config, text, precision, weights, plan, bytesOf, rowBytes, floor } = model;

const { gpu, ceilings } = await benchDevice(o.backend);
const copyBps = ceilings?.copy?.bytesPerS;

// `metrale serve`'s options (EngineSetup): its defaults but for the lengths asked for.
const setup = {
  backend: o.backend, maxBatch: Number(o['max-batch']), prefillChunk: Number(o['prefill-chunk'] ?? defaults.chunk), graphs: true,
  blockSize: Number(o['block-size']), prefixCaching: true,
  ...(o['max-model-len'] !== undefined ? { maxModelLen: Number(o['max-model-len']) } : {}),
  ...(o['gpu-memory-utilization'] !== undefined ? { gpuMemoryUtilization: Number(o['gpu-memory-utilization']) } : {}),
};
const maxModelLen = servedModelLen(setup, text, 'bench config');
for (const [what, len] of [['--prompt', promptLen], ['--long', longLen]]) {
  if (len + decodeTokens > maxModelLen) throw new Error(`${what} ${len} + --decode ${decodeTokens} exceed the max model length ${maxModelLen}`);
}
const limits = servingLimits(setup, maxModelLen);
const t0 = performance.now();
// The adapter `metrale serve` picks for this config.json, with the limits it serves under.
const adapter = registerModels().forConfig(config, 'bench config');
// Out of memory while building: a ModelFitError naming the limits to lower.
const stack = buildModelStack(adapter, { gpu, config, weights, limits, precision }, { dir: 'bench config' });
const buildS = (performance.now() - t0) / 1000;
model.release();
// The weights' device bytes as `metrale serve` counts them (`WeightBytes`): FP8 codes and scales apart.
const deviceWeightBytes = plan.reduce((a, t) => {
  const bytes = bytesOf(t);
  const fp8 = bytes !== rowBytes * elements(t);
  return { float: a.float + (fp8 ? 0 : bytes), fp8: a.fp8 + (fp8 ? bytes : 0), total: a.total + bytes };
}, { float: 0, fp8: 0, total: 0 });
const afterWeights = gpu.memoryInfo?.();
console.error(`built ${config.num_hidden_layers} layers of ${adapter.modelType} in ${buildS.toFixed(1)} s (${describePrecision(precision)}): weights ${gib(deviceWeightBytes.total)} on the device`);

// Each engine below serves over the one built stack: an engine frees its driver, pool and sampler, the stack is freed last.
const kept = { layers: stack.layers, vocabSize: stack.vocabSize, eosTokenIds: stack.eosTokenIds, dispose() {} };
const memoryAsked = kvMemory(setup, gpu);

/** The startup figures of an engine, as `metrale serve` logs them ("KV cache: N tokens fit"). */
function startup(engine) {
  const { kv } = engine;
  const memory = gpu.memoryInfo?.();
  const figures = {
    prefix_caching: kv.prefixCaching, max_model_len: maxModelLen, max_batch: engine.limits.maxBatch,
    // What the pool was sized from: a utilization (CUDA), or serve's 256 MiB on the CPU.
    gpu_memory_utilization: memoryAsked.utilization ?? null, kv_cache_memory: memoryAsked.bytes ?? null,
    kv_cache_tokens: kv.tokens, kv_cache_pages: kv.pages, block_size: kv.pageSize, kv_cache_bytes: kv.bytes, kv_cache_gib: gib(kv.bytes),
    kv_page_bytes: kv.pageBytes, state_snapshots: kv.snapshots, state_snapshot_bytes: kv.snapshotBytes,
    max_concurrency_at_max_model_len: Number((kv.tokens / maxModelLen).toFixed(2)),
    ...(memory ? { device_total_bytes: memory.total, device_free_bytes_after_model: afterWeights.free, device_free_bytes_after_pool: memory.free, device_used_share: Number((1 - memory.free / memory.total).toFixed(3)) } : {}),
  };
  console.error(`KV cache: ${kv.tokens} tokens fit (${kv.pages} pages of ${kv.pageSize}, ${gib(kv.bytes)}; ${kv.snapshots} GDN state snapshots), prefix caching ${kv.prefixCaching ? 'on' : 'off'}`);
  return figures;
}

/** `length` random token ids of generator `seed`: no n-gram repeats to speak of. */
function randomPrompt(seed, length) {
  const random = xorshift(0x2545f491 + seed * 0x9e3779b1);
  return Array.from({ length }, () => Math.floor(random() * text.vocab_size));
}

let nextId = 0;
/**
 * One greedy request alone through the engine: the time to first token (from `add` to the step
 * that returned it), the decode time per token after it, the prefix-cache figures of its steps.
 */
function serve(engine, prompt, maxTokens) {
  const { loop } = engine;
  const id = nextId++;
  let first, last;
  const tokens = [];
  const counts = { steps: 0, prefillRows: 0, queries: 0, hits: 0, preemptions: 0, kvUsage: 0 };
  const start = performance.now();
  loop.add({ id, prompt, maxTokens, stopTokenIds: [] });
  while (!loop.idle) {
    const r = loop.step();
    const now = performance.now();
    counts.steps++;
    counts.prefillRows += r.prefillRows;
    counts.queries += r.prefixQueries;
    counts.hits += r.prefixHits;
    counts.preemptions += r.preemptions;
    counts.kvUsage = Math.max(counts.kvUsage, r.kvUsage);
    for (const e of r.events) {
      if (e.finish === 'error') throw new Error(`request ${id}: ${e.error}`);
      if (e.tokens.length === 0) continue;
      first ??= now;
      last = now;
      tokens.push(...e.tokens);
    }
  }
  const ttftMs = first - start;
  const decodeMs = tokens.length > 1 ? (last - first) / (tokens.length - 1) : null;
  return { prompt: prompt.length, tokens, ttftMs, decodeMs, ...counts };
}

const round = (x, digits = 2) => (x === null || x === undefined ? null : Number(x.toFixed(digits)));
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** A prompt with decode: time to first token, prefill rate, decode per token against its floor at the mean context. */
function promptAndDecode(engine, prompt) {
  const length = prompt.length;
  const r = serve(engine, prompt, decodeTokens);
  const context = length + decodeTokens / 2;
  const floorMs = copyBps ? (floor.stepBytes(1, context) / copyBps) * 1000 : undefined;
  const row = {
    prompt_tokens: length, decode_tokens: r.tokens.length, ttft_ms: round(r.ttftMs, 1), prefill_tokens_per_s: Math.round(length / (r.ttftMs / 1000)),
    decode_ms_per_token: round(r.decodeMs, 3), decode_tokens_per_s: r.decodeMs ? round(1000 / r.decodeMs, 1) : null,
    decode_floor_ms: floorMs === undefined ? null : round(floorMs, 3), decode_of_floor: floorMs === undefined || !r.decodeMs ? null : round(floorMs / r.decodeMs, 3),
    prefill_steps: Math.ceil(length / setup.prefillChunk), kv_usage: round(r.kvUsage, 4), preemptions: r.preemptions,
  };
  console.error(`${length}-token prompt: time to first token ${row.ttft_ms} ms (${row.prefill_tokens_per_s} tokens/s), then ${row.decode_tokens} tokens at ${row.decode_ms_per_token} ms each${row.decode_of_floor === null ? '' : ` (${Math.round(100 * row.decode_of_floor)} % of the floor, ${row.decode_floor_ms} ms)`}`);
  return row;
}

/** Figures of requests of one kind over the repeats: median TTFT, each run's, the prefix-cache counts summed. */
function summary(what, runs) {
  const queries = runs.reduce((a, r) => a + r.queries, 0);
  const hits = runs.reduce((a, r) => a + r.hits, 0);
  const row = {
    ttft_ms: round(median(runs.map((r) => r.ttftMs)), 1), ttft_ms_each: runs.map((r) => round(r.ttftMs, 1)),
    prompt_tokens: runs[0].prompt, prefilled_rows: runs[0].prefillRows, prefix_cache_queries: queries, prefix_cache_hits: hits,
    prefix_cache_hit_rate: queries ? round(hits / queries, 4) : null, tokens: runs.map((r) => r.tokens),
  };
  console.error(`${what}: time to first token ${row.ttft_ms} ms (median of ${runs.length}), ${row.prefilled_rows} rows prefilled; prefix cache ${hits} of ${queries} tokens`);
  return row;
}

// The serving engine, as `metrale serve` starts by default (prefix caching on).
const cached = startEngine(setup, gpu, kept, limits, deviceWeightBytes);
const startupOn = startup(cached);
// Warm-up: kernels loaded, the batch-1 decode graph captured, on tokens nothing below shares.
serve(cached, randomPrompt(1000, 2 * setup.prefillChunk + 8), 4);

const basePrompt = randomPrompt(1, promptLen);
const base = promptAndDecode(cached, basePrompt);
// The prompt's first --shared tokens and a new tail each repeat, to the same length.
const tail = promptLen - sharedLen;
const repeatedPrompts = Array.from({ length: repeats }, (_, r) => [...basePrompt.slice(0, sharedLen), ...randomPrompt(100 + r, tail)]);
// The repeated requests first: a fresh prompt's snapshots (one a chunk) would push the shared
// prefix's out of a small store (two per slot), and the hits would depend on --max-batch.
const repeatedOn = repeatedPrompts.map((p) => serve(cached, p, checkTokens));
const fresh = Array.from({ length: repeats }, (_, r) => serve(cached, randomPrompt(200 + r, promptLen), checkTokens));
const prefix = { shared_tokens: sharedLen, tail_tokens: tail, repeated: summary(`repeated prefix (${sharedLen} shared + ${tail})`, repeatedOn), fresh: summary(`fresh ${promptLen}-token prompt`, fresh) };

let long = null;
if (longLen > 0) {
  const need = longLen + decodeTokens + limits.maxK - 1;
  if (need > cached.kv.tokens) {
    long = { prompt_tokens: longLen, skipped: `the pool holds ${cached.kv.tokens} tokens, the prompt and its decode need ${need}` };
    console.error(`--long ${longLen}: skipped (${long.skipped})`);
  } else {
    long = promptAndDecode(cached, randomPrompt(2, longLen));
  }
}
cached.dispose();
// The pool's blocks back to the driver, so the next pool is sized from the same free memory.
gpu.trim?.();

// The same repeated requests on an engine started as `metrale serve --no-prefix-caching`.
const uncached = startEngine({ ...setup, prefixCaching: false }, gpu, kept, limits, deviceWeightBytes);
const startupOff = startup(uncached);
serve(uncached, randomPrompt(1000, 2 * setup.prefillChunk + 8), 4);
const repeatedOff = repeatedPrompts.map((p) => serve(uncached, p, checkTokens));
uncached.dispose();
prefix.repeated_no_prefix_caching = summary('repeated prefix, --no-prefix-caching', repeatedOff);
prefix.same_tokens = JSON.stringify(prefix.repeated.tokens) === JSON.stringify(prefix.repeated_no_prefix_caching.tokens);
prefix.ttft_saving = round(1 - prefix.repeated.ttft_ms / prefix.repeated_no_prefix_caching.ttft_ms, 3);
prefix.repeated_vs_fresh = round(prefix.repeated.ttft_ms / prefix.fresh.ttft_ms, 3);
console.error(`repeated prefix: ${prefix.repeated.ttft_ms} ms with prefix caching, ${prefix.repeated_no_prefix_caching.ttft_ms} ms without (${Math.round(100 * prefix.ttft_saving)} % saved), fresh ${prefix.fresh.ttft_ms} ms; same greedy tokens: ${prefix.same_tokens}`);

const report = {
  bench: 'qwen3-next-80b-shaped serving at long context', model: model.name, adapter: adapter.modelType, backend: gpu.kind, device: gpu.device.name, tiny: o.tiny,
  dtype: describePrecision(precision), ...model.notes, layers: model.layers,
  device_weight_bytes: deviceWeightBytes.total, device_weight_gib: gib(deviceWeightBytes.total), weight_bytes: deviceWeightBytes, build_s: round(buildS, 1),
  ceilings: ceilings ? { copy: ceilings.copy, gemm: ceilings.gemm, errors: ceilings.errors } : null,
  floor: { counts: floor.counts, ...floor.report },
  prefill_chunk: setup.prefillChunk, repeats,
  startup: startupOn, startup_no_prefix_caching: startupOff,
  prompt: base,
  prefix,
  long,
  config,
};
console.log(JSON.stringify(report));
if (o.out) writeFileSync(o.out, `${JSON.stringify(report, null, 2)}\n`);
stack.dispose();
gpu.dispose();
