#!/usr/bin/env node
// Decode kernels of layer-std on CUDA, timed as a served step runs them: each case is 10 runs
// captured back to back in one CUDA graph, the graph replayed (timeOnDevice: warm-up, the median
// of 10 replays), the time per run. Eager timings of kernels this short measure the host's
// launches, not the device (std.bench.mjs's µs-scale figures do). Qwen3-Next-80B shapes, bf16:
//   attention decode   std.attn_decode (tensor cores, what the layer launches for 16-bit rows) and
//                      std.attn_core (CUDA cores), each + std.attn_combine (chunks from a 262 144-token
//                      limit), one row per sequence at position ctx − 1, contexts 140, 4 K, 32 K and
//                      128 K; floor: the K and V rows read once at the copy rate.
//   router + route     the three forms (routeForm) at 1 and 8 rows: softmax top-10 of 512 and 64
//                      experts, sigmoid + bias top-8 of 256 (GLM-5): std.moe_router_gemv; the
//                      router GEMM + std.moe_route_few; the GEMM + std.moe_route; floor: the
//                      router weight read once. For softmax routing also the shared expert's
//                      slot and the groups buffer made in the GEMV's last CTA against
//                      std.moe_shared_slots + std.moe_group after it.
//   expert GEMMs       std.moe_gemm_up + _down (the large pair) and _few (what the layer takes up to
//                      FEW_GEMM_ROWS rows) at 1, 8 and 64 rows: Qwen3-Next-80B's 512 experts, top-10
//                      and the shared expert as slot 11; each of the 10 runs its own rows and
//                      experts (so L2 holds none of the next run's); floor: each chosen expert's
//                      weights read once at the copy rate.
//   FP8 experts        the same routing with block-FP8 experts over bf16 rows at 1 and 8 rows: the
//                      row-wise pair the layer takes in decode (and its up pass alone) against the
//                      FP8 tensor-core pair + std.moe_experts; and at 64 rows over 64 experts (the
//                      bench model's), the grouped CUDA-core pair + std.moe_experts the layer takes
//                      there (and its up pass alone); floor: the chosen experts' codes.
// `--only attention,router,experts,fp8,grouped` runs those sections alone (default: all five;
// `grouped` is the FP8 section's 64-row case).
// Results print and go to $METRALE_BENCH_OUT (default bench-results/decode-kernels.json).
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BYTES, deviceBuffers } from './device-buffers.mjs';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = resolve(pkgDir, process.env.METRALE_BENCH_OUT ?? 'bench-results/decode-kernels.json');
const ROWS = 'bf16';
const log = (...a) => console.log(...a);
const SECTIONS = ['attention', 'router', 'experts', 'fp8', 'grouped'];
const onlyAt = process.argv.indexOf('--only');
const only = onlyAt < 0 ? SECTIONS : (process.argv[onlyAt + 1] ?? '').split(',');
for (const s of only) {
  if (!SECTIONS.includes(s)) {
    console.error(`decode-kernels bench: --only ${JSON.stringify(s)} is not a section; use a comma-separated list of ${SECTIONS.join(', ')}`);
    process.exit(2);
  }
}
/** Whether the run takes section `s` (`--only`). */
const wants = (s) => only.includes(s);
/** Milliseconds as microseconds, for the log. */
const us = (ms) => `${(ms * 1e3).toFixed(1)} µs`;

const cb = await import('@metrale/cuda-backend');
const found = cb.probe();
if (!found.available) {
  log(`decode-kernels bench: skipped: no CUDA (${found.reason})`);
  process.exit(0);
}
const std = await import('@metrale/layer-std');
const core = await import('@metrale/core');
const gpu = cb.CudaBackend.create();
const stream = gpu.defaultStream;
const result = { device: found.reason, rows: ROWS, ceilings: {}, attention: [], router: [], expertGemms: [], fp8Experts: [] };
try {
  const c = cb.measureCeilings(gpu, { log: (l) => log(`  ${l}`), gemmSize: 4096 });
  result.ceilings = { copyBytesPerS: c.copy?.bytesPerS };
  const copyBW = c.copy.bytesPerS;
  const { alloc, upload, encoded, randomBuffer, freeFrom, rand } = deviceBuffers(gpu, core, stream);
  const rowCode = core.FLOAT_DTYPE_CODE[ROWS];
  /** Device ms of one call of `run(i)`: 10 calls (i = 0 … 9) captured in one graph, replayed. */
  const graphMs = (run) => {
    run(0);
    gpu.synchronize(stream);
    gpu.beginCapture(stream);
    for (let i = 0; i < 10; i++) run(i);
    const graph = gpu.endCapture(stream);
    const exec = gpu.instantiate(graph);
    try {
      return cb.timeOnDevice(gpu, () => gpu.launchGraph(exec, stream), { reps: 10, inner: 10 }).ms;
    } finally {
      gpu.destroyGraphExec(exec);
      gpu.destroyGraph(graph);
    }
  };

  // ---- attention decode ------------------------------------------------------------------------------
  const H = 16, Hkv = 2, d = 256, page = 16;
  const W = H * d * 2 + 2 * Hkv * d;
  const chunks = std.keyChunks('decode', 262144);
  for (const [ctx, batch] of wants('attention') ? [[140, 1], [140, 64], [4096, 1], [4096, 8], [4096, 32], [4096, 64], [32768, 1], [32768, 8], [32768, 32], [131072, 1]] : []) {
    const pagesPer = Math.ceil(ctx / page);
    const pool = batch * pagesPer;
    const cacheElements = pool * page * Hkv * d;
    const args = {
      qkv: upload(encoded(batch * W, 1, ROWS)), kCache: randomBuffer(cacheElements, 1, ROWS), vCache: randomBuffer(cacheElements, 1, ROWS),
      blockTable: upload(Int32Array.from({ length: pool }, (_, i) => i)), slots: upload(Int32Array.from({ length: batch }, (_, i) => i)),
      rowStarts: upload(Int32Array.from({ length: batch + 1 }, (_, i) => i)), positions: upload(new Int32Array(batch).fill(ctx - 1)), batch, heads: H,
      kvHeads: Hkv, headDim: d, pageSize: page, maxPages: pagesPer, gated: 1, dtype: rowCode, ownKv: 1, q: randomBuffer(batch * H * d, 1, ROWS),
      out: alloc(BYTES[ROWS] * batch * H * d), scale: 1 / Math.sqrt(d), window: 0, chunks, partials: alloc(std.partialsBytes(batch, H, d, chunks)),
    };
    const k = std.ATTENTION_KERNELS[ROWS];
    const sms = gpu.device.multiprocessors;
    const coreMs = graphMs(() => {
      gpu.launch(k.core, std.coreLaunch(batch, Hkv, d, BYTES[ROWS], chunks, sms, stream), args);
      gpu.launch(k.combine, std.combineLaunch(batch, H, stream), args);
    });
    const ms = graphMs(() => {
      gpu.launch(k.decode, std.attnDecodeLaunch(batch, Hkv, d, BYTES[ROWS], chunks, sms, stream), args);
      gpu.launch(k.combine, std.combineLaunch(batch, H, stream), args);
    });
    const bytes = batch * ctx * Hkv * d * BYTES[ROWS] * 2;
    const floorMs = (bytes / copyBW) * 1e3;
    result.attention.push({ ctx, batch, kvBytes: bytes, floorMs, ms, coreMs, ofCopy: floorMs / ms });
    log(`attention decode ctx ${ctx} batch ${batch}: std.attn_decode ${us(ms)} (std.attn_core ${us(coreMs)}), floor ${us(floorMs)} (${((100 * floorMs) / ms).toFixed(1)} % of copy)`);
    freeFrom(0);
  }

  // ---- router + route ----------------------------------------------------------------------------------
  const D = 2048;
  // Qwen3-Next (softmax top-10 of 512; of 64 as the bench's smaller model) and GLM-5's routing
  // (sigmoid + correction bias, top-8 of 256, routed scaling).
  const routings = [
    { E: 512, topK: 10, scoring: 0, scaling: 1 },
    { E: 64, topK: 10, scoring: 0, scaling: 1 },
    { E: 256, topK: 8, scoring: 1, scaling: 2.5 },
  ];
  for (const { E, topK, scoring, scaling } of wants('router') ? routings : []) {
    const router = randomBuffer(E * D, 1 / Math.sqrt(D), ROWS);
    const counter = upload(new Uint32Array(1));
    const bias = scoring === 1 ? upload(encoded(E, 0.1, 'f32')) : 0n;
    const label = `${E} experts top-${topK} ${scoring === 0 ? 'softmax' : 'sigmoid + bias'}`;
    for (const batch of [1, 8]) {
      const xs = Array.from({ length: 10 }, () => upload(encoded(batch * D, 1, ROWS)));
      const logits = alloc(4 * batch * E);
      const args = { bias, ids: alloc(4 * batch * topK), weights: alloc(4 * batch * topK), rows: batch, experts: E, topK, scoring, normTopK: 1, nGroup: 1, topkGroup: 1, scaling, padSlots: 0n, padK: 0 };
      const gemm = (i) => gpu.gemm({ m: batch, n: E, k: D, a: xs[i], b: router, c: logits, transB: true, dtype: ROWS, outDtype: 'f32', stream });
      const noTail = { sharedGate: 0n, slotIds: 0n, slotWeights: 0n, sharedId: -1, groups: 0n, groupExperts: E };
      const fusedMs = graphMs((i) => gpu.launch(std.routerGemvKernel, std.routerGemvLaunch(E, stream), { x: xs[i], w: router, logits, counter, ...args, hidden: D, dtype: rowCode, ...noTail }));
      const fewMs = graphMs((i) => (gemm(i), gpu.launch(std.routeFewKernel, std.routeFewLaunch(stream), { logits, ...args })));
      const blockMs = graphMs((i) => (gemm(i), gpu.launch(std.routeKernel, std.rowLaunch(batch, E, stream), { logits, ...args })));
      const gemmMs = graphMs(gemm);
      const floorMs = ((E * D * BYTES[ROWS]) / copyBW) * 1e3;
      // Qwen3-Next's shared expert as the last slot: the GEMV making the slots and the groups buffer
      // (the MoE layer's fused-route step: the gated slot weights by one CTA more, beside the
      // logits) against the last CTA making all of it after the route, and against the two kernels
      // that make them apart. At one row the layer asks for the slots alone (the row-wise expert
      // kernels take no groups).
      let tail;
      if (scoring === 0) {
        const slots = topK + 1;
        const made = { sharedGate: upload(encoded(D, 1 / Math.sqrt(D), 'f32')), slotIds: alloc(4 * batch * slots), slotWeights: alloc(4 * batch * slots) };
        const groups = alloc(4 * std.moeGroupsLength(batch, slots, E + 1));
        /** The GEMV of run i: the route alone, or with the slots (and the groups), their gate weights by one CTA more or in the last CTA. */
        const gemv = (i, { slots: withSlots = false, gateCta = false, groups: withGroups = false } = {}) =>
          gpu.launch(std.routerGemvKernel, std.routerGemvLaunch(E, stream, gateCta), {
            x: xs[i], w: router, logits, counter, ...args, hidden: D, dtype: rowCode, ...noTail,
            ...(withSlots ? { ...made, sharedId: E, groups: withGroups ? groups : 0n, groupExperts: E + 1 } : {}),
          });
        const fusedTailMs = graphMs((i) => gemv(i, { slots: true, gateCta: true, groups: true }));
        const lastCtaMs = graphMs((i) => gemv(i, { slots: true, groups: true }));
        const slotsOnlyMs = graphMs((i) => gemv(i, { slots: true, gateCta: true }));
        const apartMs = graphMs((i) => {
          gemv(i);
          gpu.launch(std.sharedSlotsKernel, std.sharedSlotsLaunch(batch, stream), {
            x: xs[i], gate: made.sharedGate, ids: args.ids, weights: args.weights, slotIds: made.slotIds, slotWeights: made.slotWeights, rows: batch, hidden: D, topK, sharedId: E, dtype: rowCode,
            padSlots: 0n, padK: 0,
          });
          gpu.launch(std.groupKernel, std.groupLaunch(batch, slots, stream), { ids: made.slotIds, groups, rows: batch, experts: E + 1, topK: slots });
        });
        tail = { fusedTailMs, lastCtaMs, slotsOnlyMs, apartMs };
      }
      result.router.push({ experts: E, topK, scoring, batch, form: std.routeForm(batch, topK, E, ROWS), floorMs, fusedMs, gemmRouteFewMs: fewMs, gemmRouteMs: blockMs, gemmMs, ...(tail ?? {}) });
      log(`router + route ${label} batch ${batch}: std.moe_router_gemv ${us(fusedMs)}; GEMM + std.moe_route_few ${us(fewMs)}; GEMM + std.moe_route ${us(blockMs)} (GEMM alone ${us(gemmMs)}); floor ${us(floorMs)}`);
      if (tail) {
        log(`  with the shared slot and the groups: in the GEMV (gate CTA) ${us(tail.fusedTailMs)}, all in its last CTA ${us(tail.lastCtaMs)}; GEMV + std.moe_shared_slots + std.moe_group ${us(tail.apartMs)}; the slot alone (gate CTA) ${us(tail.slotsOnlyMs)}`);
      }
    }
    freeFrom(0);
  }

  // Qwen3-Next-80B's experts: 512 of 512 × 2048, top-10, and the shared expert as slot 11 (expert 512).
  const I = 512, routed = 512, topK = 10, E = routed + 1, slots = topK + 1;
  /**
   * 10 runs of `batch` rows, each its own rows, top-10 distinct routed experts a row (drawn at
   * random from the first `of`) then the shared one (expert `of`), and its groups buffer;
   * `experts`: the distinct experts it reads.
   */
  const routedRuns = (batch, of = routed) => {
    const runs = Array.from({ length: 10 }, () => {
      const ids = new Int32Array(batch * slots);
      const distinct = new Set();
      for (let r = 0; r < batch; r++) {
        const mine = new Set();
        while (mine.size < topK) mine.add(Math.floor(rand() * of));
        [...mine, of].forEach((e, j) => { ids[r * slots + j] = e; distinct.add(e); });
      }
      const groups = alloc(4 * std.moeGroupsLength(batch, slots, of + 1));
      const idsBuf = upload(ids);
      gpu.launch(std.groupKernel, std.groupLaunch(batch, slots, stream), { ids: idsBuf, groups, rows: batch, experts: of + 1, topK: slots });
      return {
        ids: idsBuf, groups, experts: distinct.size, x: randomBuffer(batch * D, 1, ROWS), weights: randomBuffer(batch * slots, 0.1),
        h: alloc(BYTES[ROWS] * batch * slots * I), y: alloc(BYTES[ROWS] * batch * slots * D), out: alloc(BYTES[ROWS] * batch * D),
      };
    });
    gpu.synchronize(stream);
    return { runs, meanExperts: runs.reduce((a, r) => a + r.experts, 0) / runs.length };
  };

  // ---- expert GEMMs ------------------------------------------------------------------------------------
  if (wants('experts')) {
    const gateUp = randomBuffer(E * 2 * I * D, 1 / Math.sqrt(D), ROWS), down = randomBuffer(E * D * I, 1 / Math.sqrt(I), ROWS);
    const k = std.EXPERT_KERNELS[ROWS];
    const codes = { wDtype: std.WEIGHT_DTYPE_CODE[ROWS], rowDtype: rowCode };
    for (const batch of [1, 8, 64]) {
      const { runs, meanExperts } = routedRuns(batch);
      const timePair = (gemm) => graphMs((i) => {
        const r = runs[i];
        const args = { ids: r.ids, groups: r.groups, rows: batch, hidden: D, inter: I, experts: E, topK: slots, ...codes };
        gpu.launch(gemm.up, std.expertsGemmLaunch(gemm, 'up', batch, slots, I, E, gpu.device.computeCapability, stream), { input: r.x, gateUp, gateUpScales: 0n, h: r.h, ...args });
        gpu.launch(gemm.down, std.expertsGemmLaunch(gemm, 'down', batch, slots, D, E, gpu.device.computeCapability, stream), { h: r.h, down, downScales: 0n, y: r.y, ...args });
      });
      const largeMs = timePair(k.gemm);
      const fewMs = timePair(k.gemm.few);
      const floorMs = ((meanExperts * 3 * I * D * BYTES[ROWS]) / copyBW) * 1e3;
      result.expertGemms.push({ experts: routed, topK, shared: 1, batch, meanExpertsRead: meanExperts, floorMs, largeMs, fewMs, layerTakes: std.expertsGemm(k, batch) === k.gemm.few ? 'few' : 'large' });
      log(`expert GEMMs ${routed} experts top-${topK} + shared, batch ${batch} (${meanExperts.toFixed(1)} experts read): large ${us(largeMs)}, few ${us(fewMs)}; floor ${us(floorMs)} (few ${((100 * floorMs) / fewMs).toFixed(1)} % of copy)`);
      freeFrom(2);
    }
    freeFrom(0);
  }

  // ---- FP8 experts at decode ---------------------------------------------------------------------------
  if (wants('fp8') || wants('grouped')) {
    const blocks = (n) => Math.ceil(n / 128);
    // The 64-row case (64 routed experts, the bench model's, and the shared one) reads experts 0 … 64
    // only: the 512 are made where the 1- and 8-row cases run.
    const groupedOf = 64;
    const made = wants('fp8') ? E : groupedOf + 1;
    const gateUp = randomBuffer(made * 2 * I * D, 1, 'f8e4m3'), down = randomBuffer(made * D * I, 1, 'f8e4m3');
    const gateUpScales = randomBuffer(made * 2 * blocks(I) * blocks(D), 1 / 64), downScales = randomBuffer(made * blocks(D) * blocks(I), 1 / 64);
    const k = std.EXPERT_KERNELS['fp8-bf16'];
    const codes = { wDtype: std.WEIGHT_DTYPE_CODE.f8e4m3, rowDtype: rowCode };
    const kept = 4; // the weights and scales above
    for (const batch of wants('fp8') ? [1, 8] : []) {
      const { runs, meanExperts } = routedRuns(batch);
      const pass = { rows: batch, hidden: D, inter: I, experts: E, topK: slots, ...codes };
      const upMs = graphMs((i) => {
        const r = runs[i];
        gpu.launch(k.upRowwise, std.expertsUpRowwiseLaunch(batch, slots, I, stream), { input: r.x, ids: r.ids, gateUp, gateUpScales, h: r.h, ...pass });
      });
      const rowwiseMs = graphMs((i) => {
        const r = runs[i];
        gpu.launch(k.upRowwise, std.expertsUpRowwiseLaunch(batch, slots, I, stream), { input: r.x, ids: r.ids, gateUp, gateUpScales, h: r.h, ...pass });
        gpu.launch(k.rowwise, std.expertsRowwiseLaunch(batch, D, stream), { h: r.h, ids: r.ids, weights: r.weights, down, downScales, output: r.out, ...pass });
      });
      const tensorCoresMs = graphMs((i) => {
        const r = runs[i];
        const args = { ids: r.ids, groups: r.groups, ...pass };
        gpu.launch(k.gemm.up, std.expertsGemmLaunch(k.gemm, 'up', batch, slots, I, E, gpu.device.computeCapability, stream), { input: r.x, gateUp, gateUpScales, h: r.h, ...args });
        gpu.launch(k.gemm.down, std.expertsGemmLaunch(k.gemm, 'down', batch, slots, D, E, gpu.device.computeCapability, stream), { h: r.h, down, downScales, y: r.y, ...args });
        gpu.launch(std.expertsKernel, std.expertsLaunch(batch, D, stream), { y: r.y, ids: r.ids, weights: r.weights, output: r.out, rows: batch, hidden: D, experts: E, topK: slots, dtype: rowCode });
      });
      const floorMs = ((meanExperts * 3 * I * D) / copyBW) * 1e3;
      result.fp8Experts.push({ experts: routed, topK, shared: 1, batch, meanExpertsRead: meanExperts, floorMs, upRowwiseMs: upMs, rowwiseMs, tensorCoresMs });
      log(`FP8 experts ${routed} top-${topK} + shared, batch ${batch} (${meanExperts.toFixed(1)} experts read): row-wise up + down ${us(rowwiseMs)} (up alone ${us(upMs)}), tensor-core pair + sum ${us(tensorCoresMs)}; floor ${us(floorMs)} (row-wise ${((100 * floorMs) / rowwiseMs).toFixed(1)} % of copy)`);
      freeFrom(kept);
    }
    // The grouped CUDA-core pair where the layer takes it in decode: 64 routed experts (the bench
    // model's) and the shared one at 64 rows, 10 entries an expert (moeGrouped).
    if (wants('grouped')) {
      const batch = 64, of = groupedOf;
      const { runs, meanExperts } = routedRuns(batch, of);
      const pass = { rows: batch, hidden: D, inter: I, experts: of + 1, topK: slots, ...codes };
      const up = (r) => gpu.launch(k.up, std.expertsUpLaunch(k.format, batch, slots, D, I, of + 1, stream), { input: r.x, ids: r.ids, groups: r.groups, gateUp, gateUpScales, h: r.h, ...pass });
      const groupedMs = graphMs((i) => {
        const r = runs[i];
        up(r);
        gpu.launch(k.down, std.expertsDownLaunch(k.format, batch, slots, D, I, of + 1, stream), { h: r.h, ids: r.ids, groups: r.groups, down, downScales, y: r.y, ...pass });
        gpu.launch(std.expertsKernel, std.expertsLaunch(batch, D, stream), { y: r.y, ids: r.ids, weights: r.weights, output: r.out, rows: batch, hidden: D, experts: of + 1, topK: slots, dtype: rowCode });
      });
      const upMs = graphMs((i) => up(runs[i]));
      const floorMs = ((meanExperts * 3 * I * D) / copyBW) * 1e3;
      // Each entry's products: 3 · I · D multiply-adds (gate, up, down), on CUDA cores in f32.
      const macs = batch * slots * 3 * I * D;
      result.fp8Experts.push({ experts: of, topK, shared: 1, batch, meanExpertsRead: meanExperts, floorMs, groupedMs, upGroupedMs: upMs, macs });
      log(`FP8 experts ${of} top-${topK} + shared, batch ${batch} (${meanExperts.toFixed(1)} experts read): grouped up + down + sum ${us(groupedMs)} (up alone ${us(upMs)}), ${(macs / (groupedMs * 1e-3) / 1e12).toFixed(2)} T multiply-adds/s; floor ${us(floorMs)} (${((100 * floorMs) / groupedMs).toFixed(1)} % of copy)`);
      freeFrom(kept);
    }
    freeFrom(0);
  }
} finally {
  gpu.dispose();
}
mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, `${JSON.stringify(result, null, 2)}\n`);
log(`wrote ${outPath}`);
