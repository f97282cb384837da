#!/usr/bin/env node
// layer-std's prefill kernels on CUDA at the Qwen3-Next-80B-A3B shape, each against the bf16 GEMM
// rate measured in the same run (cuda-backend's measureCeilings):
//   attention   std.attn_prefill (tensor cores) over one sequence's chunk of 4 096 rows: a whole
//               4 096-token prompt, and the last chunk of a 32 768-token one (positions 28 672 …);
//               16 q / 2 KV heads of 256, pages of 16. FLOPs: 4 · H · d per (row, key ≤ its position).
//               std.attn_core (CUDA cores) on the first case beside it.
//   moe         the pieces of a 4 096-row prefill's experts, timed one by one after one routing:
//               std.moe_group, std.moe_gemm_up, std.moe_gemm_down, std.moe_experts (the weighted
//               sum); 64 experts (the whole-model bench's) and 512, top-10, D 2048, I 512. FLOPs of
//               the GEMMs: 2 · entries · (2I · D) up, 2 · entries · (D · I) down.
// Rows bf16 (METRALE_BENCH_FORMAT=f16 for f16; the FP8 GEMMs run with fp8-bf16 / fp8-f16). Times:
// device events, warm-up first, the median of 10. Run: `node bench/prefill.bench.mjs` in
// packages/layer-std. Without CUDA it says why and exits 0. Results print as a table and go to
// $METRALE_BENCH_OUT (default bench-results/prefill.json).
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BYTES, deviceBuffers } from './device-buffers.mjs';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = resolve(pkgDir, process.env.METRALE_BENCH_OUT ?? 'bench-results/prefill.json');
const FORMAT = process.env.METRALE_BENCH_FORMAT ?? 'bf16';
const ROWS = FORMAT.startsWith('fp8-') ? FORMAT.slice(4) : FORMAT;
const WEIGHTS = FORMAT.startsWith('fp8-') ? 'f8e4m3' : FORMAT;
const REPS = 10;
const log = (...a) => console.log(...a);

let cb;
try {
  cb = await import('@metrale/cuda-backend');
} catch (error) {
  log(`prefill bench: skipped: @metrale/cuda-backend could not be loaded (${error.message}); build the workspace first`);
  process.exit(0);
}
const found = cb.probe();
if (!found.available) {
  log(`prefill bench: skipped: no CUDA (${found.reason})`);
  process.exit(0);
}
const std = await import('@metrale/layer-std');
const core = await import('@metrale/core');
if (ROWS === 'f32' || !std.EXPERT_FORMATS.includes(FORMAT)) {
  log(`prefill bench: METRALE_BENCH_FORMAT must be one of ${std.EXPERT_FORMATS.filter((f) => f !== 'f32').join(', ')} (the tensor-core kernels), got ${FORMAT}`);
  process.exit(2);
}
const gpu = cb.CudaBackend.create();
const stream = gpu.defaultStream;
const { alloc, upload, encoded, randomBuffer, allocs, freeFrom } = deviceBuffers(gpu, core, stream);
const rowCode = core.FLOAT_DTYPE_CODE[ROWS];
const rb = BYTES[ROWS];
const result = { device: found.reason, format: FORMAT, ceilings: {}, attention: [], moe: [] };
const time = (f) => cb.timeOnDevice(gpu, f, { reps: REPS }).ms;
try {
  const c = cb.measureCeilings(gpu, { log: (l) => log(`  ${l}`) });
  result.ceilings = { copy: c.copy, gemm: c.gemm, errors: c.errors };
  const rate = c.gemm?.flopPerS ?? NaN;
  const share = (flop, ms) => flop / (ms * 1e-3) / rate;
  const fmt = (flop, ms) => `${ms.toFixed(3)} ms, ${(flop / (ms * 1e-3) / 1e12).toFixed(1)} TFLOP/s, ${(100 * share(flop, ms)).toFixed(1)} % of the GEMM rate`;

  // ---- attention prefill ------------------------------------------------------------------------
  const H = 16, Hkv = 2, d = 256, page = 16, rows = 4096;
  const W = H * d * 2 + 2 * Hkv * d;
  for (const ctx of [4096, 32768]) {
    const keep = allocs.length;
    const start = ctx - rows;
    const pages = ctx / page;
    const cacheElements = pages * page * Hkv * d;
    const common = {
      qkv: upload(encoded(rows * W, 1, ROWS)), kCache: randomBuffer(cacheElements, 1, ROWS), vCache: randomBuffer(cacheElements, 1, ROWS),
      blockTable: upload(Int32Array.from({ length: pages }, (_, i) => i)), slots: upload(Int32Array.of(0)), rowStarts: upload(Int32Array.of(0, rows)),
      positions: upload(Int32Array.from({ length: rows }, (_, i) => start + i)), batch: 1, heads: H, kvHeads: Hkv, headDim: d, pageSize: page, maxPages: pages,
      gated: 1, dtype: rowCode, ownKv: 1, q: randomBuffer(rows * H * d, 1, ROWS), out: alloc(rb * rows * H * d), scale: 1 / Math.sqrt(d), window: 0,
    };
    const k = std.ATTENTION_KERNELS[ROWS];
    let keys = 0;
    for (let r = 0; r < rows; r++) keys += start + r + 1;
    const flop = 4 * H * d * keys;
    const ms = time(() => gpu.launch(k.prefill, std.attnPrefillLaunch(rows, 1, H, d, rb, gpu.device.computeCapability, stream), common));
    const row = { ctx, rows, flop, prefillMs: ms, ofGemmRate: share(flop, ms) };
    if (ctx === 4096) row.coreMs = time(() => gpu.launch(k.core, std.coreLaunch(rows, Hkv, d, rb, 1, gpu.device.multiprocessors, stream), { ...common, chunks: 1, partials: 0n }));
    result.attention.push(row);
    log(`attention prefill, ${rows} rows at positions ${start}…${ctx - 1}: ${fmt(flop, ms)}${row.coreMs ? `; std.attn_core ${row.coreMs.toFixed(2)} ms` : ''}`);
    freeFrom(keep);
  }

  // ---- MoE prefill pieces -------------------------------------------------------------------------
  const D = 2048, I = 512, topK = 10;
  for (const E of [64, 512]) {
    const keep = allocs.length;
    const kk = std.EXPERT_KERNELS[FORMAT];
    const scaleGrids = (r, cols, grids) => (WEIGHTS === 'f8e4m3' ? upload(Float32Array.from({ length: grids * Math.ceil(r / 128) * Math.ceil(cols / 128) }, () => 1 / 64)) : 0n);
    const gateUp = randomBuffer(E * 2 * I * D, 1 / Math.sqrt(D), WEIGHTS);
    const down = randomBuffer(E * D * I, 1 / Math.sqrt(I), WEIGHTS);
    const gateUpScales = scaleGrids(I, D, 2 * E), downScales = scaleGrids(D, I, E);
    const x = randomBuffer(rows * D, 1, ROWS);
    const logits = randomBuffer(rows * E, 2);
    const ids = alloc(4 * rows * topK), weights = alloc(4 * rows * topK), groups = alloc(4 * std.moeGroupsLength(rows, topK, E));
    const h = alloc(rb * rows * topK * I), y = alloc(rb * rows * topK * D), out = alloc(rb * rows * D);
    const codes = { wDtype: std.WEIGHT_DTYPE_CODE[WEIGHTS], rowDtype: rowCode };
    gpu.launch(std.routeKernel, std.rowLaunch(rows, E, stream), {
      logits, bias: 0n, ids, weights, rows, experts: E, topK, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1, padSlots: 0n, padK: 0,
    });
    const group = () => gpu.launch(std.groupKernel, std.groupLaunch(rows, topK, stream), { ids, groups, rows, experts: E, topK });
    group();
    const args = { ids, groups, rows, hidden: D, inter: I, experts: E, topK, ...codes };
    const entries = rows * topK;
    const upFlop = 2 * entries * 2 * I * D, downFlop = 2 * entries * D * I;
    const t = {
      group: time(group),
      up: time(() => gpu.launch(kk.gemm.up, std.expertsGemmLaunch(kk.gemm, 'up', rows, topK, I, E, gpu.device.computeCapability, stream), { input: x, gateUp, gateUpScales, h, ...args })),
      down: time(() => gpu.launch(kk.gemm.down, std.expertsGemmLaunch(kk.gemm, 'down', rows, topK, D, E, gpu.device.computeCapability, stream), { h, down, downScales, y, ...args })),
      sum: time(() => gpu.launch(std.expertsKernel, std.expertsLaunch(rows, D, stream), { y, ids, weights, output: out, rows, hidden: D, experts: E, topK, dtype: rowCode })),
    };
    const total = t.group + t.up + t.down + t.sum;
    const row = { experts: E, rows, topK, upFlop, downFlop, ms: t, totalMs: total, upOfGemmRate: share(upFlop, t.up), downOfGemmRate: share(downFlop, t.down), ofGemmRate: share(upFlop + downFlop, total) };
    result.moe.push(row);
    log(`moe prefill ${E} experts, ${rows} rows, top-${topK}: group ${t.group.toFixed(3)} ms; up ${fmt(upFlop, t.up)}; down ${fmt(downFlop, t.down)}; weighted sum ${t.sum.toFixed(3)} ms; all ${fmt(upFlop + downFlop, total)}`);
    freeFrom(keep);
  }
} finally {
  freeFrom(0);
  gpu.dispose();
}
mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, `${JSON.stringify(result, null, 2)}\n`);
log(`\nwrote ${outPath}`);
