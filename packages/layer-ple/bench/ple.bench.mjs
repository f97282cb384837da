#!/usr/bin/env node
// Host time of decodePrestage per token (slot hits and misses) and bytes uploaded per step, at the
// Gemma 3n E4B shape: 35 layers × 256 per-layer values (8 960 bf16 per table row), vocabulary
// 262 144, hidden 2 048, with a table of that size on disk (4.7 GB, sparse: only the rows the
// benchmark reads hold data, random bf16). All 35 layers are created and share one slot cache, as
// in the model; each step prestages every sequence through every layer, in the driver's order,
// then consumes the staged rows as a graph replay does (syncReplayedStep), so only host work is
// timed. CPU reference backend always; CUDA when a device is present.
//
//   node bench/ple.bench.mjs            (after `npm run build`; only node is needed)
//   METRALE_BENCH_OUT=out.json METRALE_PLE_BENCH_DIR=/big/disk node bench/ple.bench.mjs
//
// Writes a table to stdout and the same figures as JSON to $METRALE_BENCH_OUT (default
// <repo>/bench-results/ple.json). Bars (docs/performance.md): ≤ 2 µs per token on a slot hit; bytes
// uploaded = misses × L·P·2.
import { closeSync, ftruncateSync, mkdirSync, mkdtempSync, openSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const pkgDir = resolve(here, '..');

async function load(name, hint) {
  try {
    return await import(name);
  } catch (error) {
    console.error(`ple.bench: cannot import ${name} (${error.message}); ${hint}`);
    process.exit(2);
  }
}
const core = await load('@metrale/core', 'build the workspace first (npm run build at the root)');
const { CpuBackend } = await load('@metrale/cpu-backend', 'build the workspace first');
const ple = await load('@metrale/layer-ple', 'build this package first (npm run build in packages/layer-ple)');

// ---- the E4B shape ------------------------------------------------------------------------------
const E4B = { hidden: 2048, perLayer: 256, layers: 35, vocab: 262_400, tableVocab: 262_144 };
const ROW_ELEMS = E4B.layers * E4B.perLayer; // 8 960
const ROW_BYTES = ROW_ELEMS * 2; // bf16 as shipped: 17 920
const LIMITS = { maxSeqs: 64, maxSeqLen: 4096, maxBatch: 64, maxK: 4, maxRows: 256 };
const BATCH = 64;
const HIT_TOKENS = 1024; // distinct tokens of the hit runs (all in the cache)
const MISS_STEPS = 20; // decode steps of all-new tokens per round
const ROUNDS = Number(process.env.METRALE_PLE_BENCH_ROUNDS ?? 9);
const HIT_STEPS = 200;

const config = {
  model_type: 'gemma3n_text', hidden_size: E4B.hidden, hidden_size_per_layer_input: E4B.perLayer, num_hidden_layers: E4B.layers,
  vocab_size: E4B.vocab, vocab_size_per_layer_input: E4B.tableVocab, rms_norm_eps: 1e-6, hidden_activation: 'gelu_pytorch_tanh',
};

// ---- a random but fixed token plan ----------------------------------------------------------------
let seed = 0x9e3779b9;
function rand() {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 2 ** 32;
}
const ZIPF_IDS = 8192;
/** Distinct table rows in a random order: the hit set, then the miss tokens (each used once), then the Zipf stream's ids. */
const shuffled = (() => {
  const n = HIT_TOKENS + (ROUNDS + 1) * MISS_STEPS * BATCH + ZIPF_IDS;
  const chosen = new Set();
  const out = [];
  while (out.length < n) {
    const t = Math.floor(rand() * E4B.tableVocab);
    if (!chosen.has(t)) {
      chosen.add(t);
      out.push(t);
    }
  }
  return out;
})();
const hitSet = shuffled.slice(0, HIT_TOKENS);
const zipfSet = shuffled.slice(shuffled.length - ZIPF_IDS);
let missCursor = HIT_TOKENS;
const nextMiss = () => shuffled[missCursor++];
/** A text-like stream: ids of the Zipf set drawn with probability ∝ 1 / rank^1.1. */
const zipf = (() => {
  const cdf = new Float64Array(ZIPF_IDS);
  let s = 0;
  for (let i = 0; i < ZIPF_IDS; i++) cdf[i] = s += 1 / (i + 1) ** 1.1;
  return () => {
    const u = rand() * s;
    let lo = 0;
    let hi = ZIPF_IDS - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid] < u) lo = mid + 1;
      else hi = mid;
    }
    return zipfSet[lo];
  };
})();

// ---- the checkpoint on disk -------------------------------------------------------------------------
/** Random finite bf16 values from random bits: sign and mantissa random, exponent ~2^-7..2^-6. */
function randomBf16Bytes(count) {
  const u = new Uint16Array(count);
  for (let i = 0; i < count; i++) u[i] = ((rand() * 0x10000) & 0x807f) | 0x3c00;
  return new Uint8Array(u.buffer);
}

function writeCheckpoint(dir) {
  const tensors = [
    ['embed_tokens.weight', [E4B.vocab, E4B.hidden]],
    ['embed_tokens_per_layer.weight', [E4B.tableVocab, ROW_ELEMS]],
    ['per_layer_model_projection.weight', [ROW_ELEMS, E4B.hidden]],
    ['per_layer_projection_norm.weight', [E4B.perLayer]],
  ];
  for (let l = 0; l < E4B.layers; l++) {
    tensors.push([`layers.${l}.per_layer_input_gate.weight`, [E4B.perLayer, E4B.hidden]]);
    tensors.push([`layers.${l}.per_layer_projection.weight`, [E4B.hidden, E4B.perLayer]]);
    tensors.push([`layers.${l}.post_per_layer_input_norm.weight`, [E4B.hidden]]);
  }
  const header = {};
  let offset = 0;
  const at = {};
  for (const [name, shape] of tensors) {
    const bytes = shape.reduce((a, b) => a * b, 1) * 2;
    header[name] = { dtype: 'BF16', shape, data_offsets: [offset, offset + bytes] };
    at[name] = offset;
    offset += bytes;
  }
  let json = JSON.stringify(header);
  while ((8 + Buffer.byteLength(json)) % 8 !== 0) json += ' ';
  const head = Buffer.alloc(8 + Buffer.byteLength(json));
  head.writeBigUInt64LE(BigInt(Buffer.byteLength(json)), 0);
  head.write(json, 8, 'utf8');
  const dataStart = head.length;
  const path = join(dir, 'model.safetensors');
  const fd = openSync(path, 'w');
  const started = performance.now();
  try {
    writeSync(fd, head, 0, head.length, 0);
    ftruncateSync(fd, dataStart + offset); // sparse: unread regions stay holes
    // Every tensor but the two big tables: random.
    for (const [name, shape] of tensors) {
      if (name === 'embed_tokens.weight' || name === 'embed_tokens_per_layer.weight') continue;
      const bytes = randomBf16Bytes(shape.reduce((a, b) => a * b, 1));
      writeSync(fd, bytes, 0, bytes.length, dataStart + at[name]);
    }
    // The table rows the benchmark reads: random.
    const rows = new Set(shuffled);
    const row = randomBf16Bytes(ROW_ELEMS);
    for (const id of rows) {
      row[0] = id & 0xff; // rows differ
      writeSync(fd, row, 0, ROW_BYTES, dataStart + at['embed_tokens_per_layer.weight'] + id * ROW_BYTES);
    }
  } finally {
    closeSync(fd);
  }
  const size = statSync(path).size;
  return { path, size, tableBytes: E4B.tableVocab * ROW_BYTES, rowsWritten: shuffled.length, writeMs: performance.now() - started };
}

// ---- one backend ----------------------------------------------------------------------------------
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

function benchBackend(label, gpu, file) {
  // Each backend starts with an empty slot cache, so it gets the same never-seen miss tokens.
  missCursor = HIT_TOKENS;
  const t0 = performance.now();
  const layers = [];
  for (let l = 0; l < E4B.layers; l++) {
    layers.push(new ple.PleLayer({ gpu, layerType: 'ple', config, layerIndex: l, weights: file, limits: LIMITS }));
  }
  const createMs = performance.now() - t0;
  const cache = layers[0].cache;
  if (!layers.every((x) => x.cache === cache)) throw new Error('the 35 layers do not share one cache');
  const stream = gpu.createStream();
  const states = layers.map((layer) => Array.from({ length: BATCH }, (_, s) => layer.openState(s)));
  const tok1 = Array.from({ length: BATCH }, () => new Int32Array(1));
  const tok4 = Array.from({ length: BATCH }, () => new Int32Array(4));

  /** One step: prestage (timed) every sequence through `nLayers` layers, then consume as a replay does. */
  function step(tokens, nLayers) {
    const start = performance.now();
    for (let s = 0; s < BATCH; s++) {
      for (let l = 0; l < nLayers; l++) layers[l].decodePrestage(tokens[s], states[l][s], gpu, stream);
    }
    const ms = performance.now() - start;
    for (let l = 0; l < nLayers; l++) for (let s = 0; s < BATCH; s++) layers[l].syncReplayedStep(states[l][s], 0, tokens[s].length);
    return ms;
  }
  const fill = (tokens, pick) => tokens.forEach((t) => t.forEach((_, i) => (t[i] = pick())));

  // Warm the hit set into the cache.
  for (let i = 0; i < HIT_TOKENS; i += BATCH) {
    fill(tok1, (() => { let j = i; return () => hitSet[j++ % HIT_TOKENS]; })());
    step(tok1, E4B.layers);
  }
  gpu.synchronize();

  const out = { backend: label, device: gpu.device.name, createMs, capacity: cache.capacity, rowBytes: cache.rowBytes };
  const hitRun = (tokens, nLayers) => {
    const perToken = [];
    for (let r = 0; r < ROUNDS; r++) {
      let ms = 0;
      let rows = 0;
      const before = cache.stats();
      for (let i = 0; i < HIT_STEPS; i++) {
        fill(tokens, () => hitSet[Math.floor(rand() * HIT_TOKENS)]);
        ms += step(tokens, nLayers);
        rows += BATCH * tokens[0].length;
      }
      const after = cache.stats();
      if (after.misses !== before.misses) throw new Error('a hit run missed');
      if (after.uploadedRowBytes !== before.uploadedRowBytes) throw new Error('a hit run uploaded');
      perToken.push((ms * 1000) / rows);
    }
    return median(perToken);
  };
  // Warm-up of the timed paths, then the measured rounds.
  hitRun(tok1, E4B.layers);
  out.hitUsPerTokenOneLayer = hitRun(tok1, 1);
  out.hitUsPerTokenModel = hitRun(tok1, E4B.layers);
  out.hitUsPerTokenVerify4Model = hitRun(tok4, E4B.layers);

  // Misses: every token of every step never seen before (decode, k = 1), through all 35 layers.
  const missRounds = [];
  const missBytesPerStep = [];
  for (let r = 0; r < ROUNDS; r++) {
    gpu.synchronize();
    let ms = 0;
    const before = cache.stats();
    for (let i = 0; i < MISS_STEPS; i++) {
      const b = cache.stats();
      fill(tok1, nextMiss);
      ms += step(tok1, E4B.layers);
      const a = cache.stats();
      missBytesPerStep.push(a.uploadedRowBytes - b.uploadedRowBytes);
      if (a.uploadedRowBytes - b.uploadedRowBytes !== (a.misses - b.misses) * ROW_BYTES) throw new Error('bytes uploaded ≠ misses × L·P·2');
    }
    gpu.synchronize();
    const after = cache.stats();
    if (after.misses - before.misses !== MISS_STEPS * BATCH) throw new Error(`a miss run hit (${after.misses - before.misses} misses of ${MISS_STEPS * BATCH})`);
    missRounds.push((ms * 1000) / (MISS_STEPS * BATCH));
  }
  out.missUsPerTokenModel = median(missRounds);
  out.missBytesPerStep = median(missBytesPerStep);

  // A text-like stream: Zipf(1.1) over 8 192 ids, batch 64, decode; bytes uploaded per step.
  const zipfBytes = [];
  let zh = 0;
  let zm = 0;
  const zMs = [];
  for (let i = 0; i < 300; i++) {
    const b = cache.stats();
    fill(tok1, zipf);
    zMs.push(step(tok1, E4B.layers));
    const a = cache.stats();
    zipfBytes.push(a.uploadedRowBytes - b.uploadedRowBytes);
    zh += a.hits - b.hits;
    zm += a.misses - b.misses;
  }
  gpu.synchronize();
  out.zipf = {
    hitRate: zh / (zh + zm), medianBytesPerStep: median(zipfBytes), meanBytesPerStep: zipfBytes.reduce((x, y) => x + y, 0) / zipfBytes.length,
    usPerTokenModel: (median(zMs) * 1000) / BATCH,
  };
  const st = cache.stats();
  out.stats = st;
  out.bytesPerMissCheck = st.uploadedRowBytes === st.misses * ROW_BYTES;
  gpu.destroyStream(stream);
  for (const layer of layers) layer.dispose();
  return out;
}

// ---- main -----------------------------------------------------------------------------------------
const baseDir = process.env.METRALE_PLE_BENCH_DIR || tmpdir();
const dir = mkdtempSync(join(baseDir, 'metrale-ple-bench-'));
const results = [];
let ckpt;
try {
  ckpt = writeCheckpoint(dir);
  console.log(`ple.bench: table ${E4B.tableVocab} × ${ROW_ELEMS} bf16 = ${(ckpt.tableBytes / 1e9).toFixed(2)} GB in ${ckpt.path} ` +
    `(file ${(ckpt.size / 1e9).toFixed(2)} GB, sparse, ${ckpt.rowsWritten} rows written in ${(ckpt.writeMs / 1000).toFixed(1)} s)`);
  const file = core.SafetensorsFile.open(ckpt.path);
  const backends = [['cpu', () => new CpuBackend()]];
  try {
    const cb = await import('@metrale/cuda-backend');
    const p = cb.probe();
    if (p.available) backends.push(['cuda', () => cb.CudaBackend.create()]);
    else console.log(`ple.bench: CUDA not measured: ${p.reason}`);
  } catch (error) {
    console.log(`ple.bench: CUDA not measured: @metrale/cuda-backend did not load (${error.message})`);
  }
  for (const [label, make] of backends) {
    const gpu = make();
    try {
      results.push(benchBackend(label, gpu, file));
    } finally {
      gpu.dispose();
    }
  }
  file.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}

const fmt = (x, d = 3) => (typeof x === 'number' ? x.toFixed(d) : String(x));
const rows = [
  ['what', ...results.map((r) => r.backend)],
  ['prestage, slot hit, µs/token, the caching layer alone (decode)', ...results.map((r) => fmt(r.hitUsPerTokenOneLayer))],
  ['prestage, slot hit, µs/token, all 35 layers (decode)', ...results.map((r) => fmt(r.hitUsPerTokenModel))],
  ['prestage, slot hit, µs/token, all 35 layers (verify k = 4)', ...results.map((r) => fmt(r.hitUsPerTokenVerify4Model))],
  ['prestage, miss, µs/token, all 35 layers (decode)', ...results.map((r) => fmt(r.missUsPerTokenModel, 2))],
  ['bytes uploaded per all-miss step (batch 64)', ...results.map((r) => `${r.missBytesPerStep} = 64 × ${ROW_BYTES}`)],
  ['Zipf(1.1) stream over 8 192 ids: hit rate', ...results.map((r) => fmt(r.zipf.hitRate, 3))],
  ['Zipf(1.1) stream: bytes uploaded per step (median / mean)', ...results.map((r) => `${r.zipf.medianBytesPerStep} / ${Math.round(r.zipf.meanBytesPerStep)}`)],
  ['Zipf(1.1) stream: prestage µs/token, all 35 layers', ...results.map((r) => fmt(r.zipf.usPerTokenModel, 2))],
  ['uploaded bytes = misses × L·P·2 over the whole run', ...results.map((r) => String(r.bytesPerMissCheck))],
  ['staging waits for the device', ...results.map((r) => String(r.stats.stagingWaits))],
  ['35 layers created (reads, uploads), ms', ...results.map((r) => fmt(r.createMs, 0))],
];
const width = rows.map((r) => r.map((c) => c.length));
const colW = rows[0].map((_, j) => Math.max(...width.map((w) => w[j])));
console.log('');
for (const r of rows) console.log(`| ${r.map((c, j) => c.padEnd(colW[j])).join(' | ')} |`);
console.log(`\nbars: ≤ 2 µs per token on a slot hit; bytes uploaded = misses × L·P·2 (${ROW_BYTES} bytes per miss). ` +
  'Median of rounds; the miss figure reads table rows from the page cache (the rows were just written).');

const outPath = resolve(process.env.METRALE_BENCH_OUT || join(pkgDir, '..', '..', 'bench-results', 'ple.json'));
mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, JSON.stringify({
  date: new Date().toISOString(), node: process.version, cpu: cpus()[0]?.model, shape: { ...E4B, rowElems: ROW_ELEMS, rowBytes: ROW_BYTES },
  limits: LIMITS, batch: BATCH, rounds: ROUNDS, checkpoint: ckpt && { tableBytes: ckpt.tableBytes, fileBytes: ckpt.size, rowsWritten: ckpt.rowsWritten },
  results,
}, null, 1) + '\n');
console.log(`ple.bench: wrote ${outPath}`);
