#!/usr/bin/env node
// layer-std kernel benchmark on CUDA at the Qwen3-Next-80B-A3B shape: hidden 2048; attention 16 q
// heads / 2 KV heads of 256, rotary 64, gated, paged KV cache (pages of 16); MoE 512 experts,
// top-10, moe_intermediate 512, one gated shared expert of 512. METRALE_BENCH_FORMAT picks the data
// path (an ExpertFormat): f32 (default: weights, rows and cache in f32), bf16, f16, fp8-bf16 or
// fp8-f16 (block-FP8 experts and shared expert over bf16 / f16 rows and cache; the router in the row
// type, as checkpoints keep it unquantized). Run: `node bench/std.bench.mjs` in packages/layer-std
// (only node needed, the workspace built). Without CUDA it says why and exits 0.
//
// In the same run it measures the ceilings (cuda-backend's measureCeilings: device-to-device copy
// bandwidth, bytes read + written, 1 GiB buffers; bf16 GEMM rate, 8192³). Times are device events
// around each repetition (timeOnDevice: warm-up first, the median of 20), random data, inputs
// rotated where a repetition would otherwise hit the L2:
//   attention decode   std.attn_prep + std.attn_core (+ std.attn_combine) for one row per sequence at position ctx − 1,
//                      contexts 4 K and 32 K, batch 1 and 32; floor: the K and V rows read once,
//                      batch · ctx · 2 (K, V) · 2 kv heads · 256 · the row bytes at the copy rate.
//   moe                router GEMM + std.moe_route + experts + shared expert (2 GEMMs, std.silu_mul,
//                      gate GEMM) + std.moe_combine; experts grouped (std.moe_group +
//                      std.moe_experts_up + std.moe_experts_down + std.moe_experts: each chosen
//                      expert read once per step) and, as the baseline, row-wise (the previous
//                      std.moe_experts_up_rowwise + std.moe_experts_rowwise: once per row that chose
//                      it). 512 experts at batch 1 and 32; 64 experts (the 80B-shaped decode bench's
//                      reduction) at batch 1, 8 and 64. Router GEMM and route kernel timed apart.
//                      Floors: the weights of the distinct experts chosen (3 · 512 · 2048 elements of
//                      the weight type each, with FP8's block scales) + router (+ shared expert for
//                      the whole layer), read once at the copy rate.
// Kernels of a few µs are timed here with eager launches, which measure the host: the router forms
// and attention decode as a step replays them are bench/decode-kernels.bench.mjs's.
// METRALE_BENCH_ONLY=moe skips the attention cases.
// Results print as a table and go to $METRALE_BENCH_OUT (default bench-results/std.json) as JSON.
// METRALE_BENCH_QUICK=1 runs small sizes only (a smoke test of the program).
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { BYTES, deviceBuffers } from './device-buffers.mjs';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = resolve(pkgDir, process.env.METRALE_BENCH_OUT ?? 'bench-results/std.json');
const quick = process.env.METRALE_BENCH_QUICK === '1';
const REPS = quick ? 3 : 20;
const MiB = 2 ** 20;
const log = (...a) => console.log(...a);
const S = { hidden: 2048, heads: 16, kvHeads: 2, d: 256, rot: 64, page: 16, experts: 512, topK: 10, inter: 512, sharedInter: 512 };
const FORMAT = process.env.METRALE_BENCH_FORMAT ?? 'f32';
/** The row type of the format, and its weights' type. */
const ROWS = FORMAT.startsWith('fp8-') ? FORMAT.slice(4) : FORMAT;
const WEIGHTS = FORMAT.startsWith('fp8-') ? 'f8e4m3' : FORMAT;

async function main() {
  let cb;
  try {
    cb = await import('@metrale/cuda-backend');
  } catch (error) {
    log(`std bench: skipped: @metrale/cuda-backend could not be loaded (${error.message}); build the workspace first`);
    return;
  }
  const hook = process.env.METRALE_STD_DEVICE_MODULE; // development only: a stand-in device module (e.g. the CPU backend)
  if (hook) {
    const m = await import(pathToFileURL(resolve(hook)).href);
    cb = { ...cb, probe: () => ({ available: true, reason: m.reason ?? hook }), CudaBackend: { create: () => m.createDevice() } };
  }
  const found = cb.probe();
  if (!found.available) {
    log(`std bench: skipped: no CUDA (${found.reason})`);
    return;
  }
  const std = await import('@metrale/layer-std');
  const core = await import('@metrale/core');
  if (!std.EXPERT_FORMATS.includes(FORMAT)) {
    log(`std bench: METRALE_BENCH_FORMAT must be one of ${std.EXPERT_FORMATS.join(', ')}, got ${FORMAT}`);
    process.exitCode = 2;
    return;
  }
  const gpu = cb.CudaBackend.create();
  const stream = gpu.defaultStream;
  log(`std bench: ${found.reason}; format ${FORMAT}`);
  const result = { device: found.reason, shape: S, format: FORMAT, quick, ceilings: {}, attention: [], moe: [] };
  const rowCode = core.FLOAT_DTYPE_CODE[ROWS];
  try {
    const c = cb.measureCeilings(gpu, { log: (l) => log(`  ${l}`), ...(quick ? { copyBytes: 256 * MiB, gemmSize: 2048 } : {}) });
    result.ceilings = { copyBytesPerS: c.copy?.bytesPerS, copy: c.copy, gemmFlopPerS: c.gemm?.flopPerS, gemm: c.gemm, errors: c.errors };
    const copyBW = c.copy?.bytesPerS ?? NaN;

    const { rand, normals, alloc, upload, encoded, randomBuffer, allocs, freeFrom } = deviceBuffers(gpu, core, stream);
    /** A [rows, cols] weight of the format's weight type: its elements and, for FP8, block scales (as [⌈rows/128⌉][⌈cols/128⌉] grids, `grids` of them). */
    const weightBuffer = (rows, cols, scale, grids = 1) => {
      const data = randomBuffer(rows * cols * grids, scale, WEIGHTS);
      const n = grids * Math.ceil(rows / 128) * Math.ceil(cols / 128);
      const scales = WEIGHTS === 'f8e4m3' ? upload(Float32Array.from({ length: n }, () => (scale / 64) * (0.5 + rand()))) : 0n;
      return { data, scales, bytes: rows * cols * grids * BYTES[WEIGHTS] + (scales ? 4 * n : 0) };
    };
    /** x · Wᵀ of a format weight into `c` of type `outDtype`. */
    const linear = (m, x, w, n, k, c, outDtype = ROWS) => gpu.gemm({
      m, n, k, a: x, b: w.data, c, transB: true, dtype: ROWS, outDtype, ...(WEIGHTS === 'f8e4m3' ? { bDtype: 'f8e4m3', bScales: w.scales } : {}), stream,
    });
    const freeAll = () => freeFrom(0);

    // ---- attention decode -------------------------------------------------------------------
    const { heads: H, kvHeads: Hkv, d, rot, page } = S;
    const W = H * d * 2 + 2 * Hkv * d;
    for (const ctx of quick ? [1024] : process.env.METRALE_BENCH_ONLY === 'moe' ? [] : [4096, 32768]) {
      for (const batch of quick ? [1, 4] : [1, 32]) {
        const pagesPer = Math.ceil(ctx / page);
        const pool = batch * pagesPer;
        const cacheElements = pool * page * Hkv * d;
        const kCache = randomBuffer(cacheElements, 1, ROWS);
        const vCache = randomBuffer(cacheElements, 1, ROWS);
        const table = upload(Int32Array.from({ length: pool }, (_, i) => i));
        const rope = std.ropeTable(ctx, rot, 1e7);
        const cos = upload(rope.cos);
        const sin = upload(rope.sin);
        const rowStarts = upload(Int32Array.from({ length: batch + 1 }, (_, i) => i));
        const slots = upload(Int32Array.from({ length: batch }, (_, i) => i));
        const positions = upload(new Int32Array(batch).fill(ctx - 1));
        const qkv = upload(encoded(batch * W, 1, ROWS));
        const qNorm = upload(normals(d, 0.2));
        const kNorm = upload(normals(d, 0.2));
        const q = alloc(BYTES[ROWS] * batch * H * d);
        const out = alloc(BYTES[ROWS] * batch * H * d);
        const common = {
          qkv, kCache, vCache, blockTable: table, slots, rowStarts, positions, batch, heads: H, kvHeads: Hkv, headDim: d, pageSize: page, maxPages: pagesPer, gated: 1,
          dtype: rowCode, ownKv: 1,
        };
        const kernels = std.ATTENTION_KERNELS[ROWS];
        const prep = () => gpu.launch(kernels.prep, std.prepLaunch(batch, H, Hkv, d, true, stream), {
          ...common, q, qNorm, kNorm, cos, sin, rotaryDim: rot, maxPositions: ctx, eps: 1e-6, normOffset: 1, roundNormalized: 0, vNorm: 0,
        });
        // As a served model's layer launches it: chunks from serve's longest sequence (the config's 262 144).
        const chunks = std.keyChunks('decode', 262144);
        const partials = alloc(std.partialsBytes(batch, H, d, chunks));
        const coreArgs = { ...common, q, out, scale: 1 / Math.sqrt(d), window: 0, chunks, partials };
        const attend = () => {
          gpu.launch(kernels.core, std.coreLaunch(batch, Hkv, d, BYTES[ROWS], chunks, gpu.device.multiprocessors, stream), coreArgs);
          gpu.launch(kernels.combine, std.combineLaunch(batch, H, stream), coreArgs);
        };
        const tPrep = cb.timeOnDevice(gpu, prep, { reps: REPS });
        const tCore = cb.timeOnDevice(gpu, attend, { reps: REPS });
        const bytes = batch * ctx * Hkv * d * BYTES[ROWS] * 2;
        const floorMs = (bytes / copyBW) * 1e3;
        const row = { ctx, batch, kvBytes: bytes, floorMs, prepMs: tPrep.ms, coreMs: tCore.ms, totalMs: tPrep.ms + tCore.ms, achievedBytesPerS: bytes / (tCore.ms * 1e-3) };
        result.attention.push(row);
        log(`attention ctx ${ctx} batch ${batch}: prep ${(tPrep.ms * 1e3).toFixed(1)} µs, core ${(tCore.ms * 1e3).toFixed(1)} µs, floor ${(floorMs * 1e3).toFixed(1)} µs (${(tCore.ms / floorMs).toFixed(2)} × floor, ${((100 * row.achievedBytesPerS) / copyBW).toFixed(1)} % of copy)`);
        freeAll();
      }
    }

    // ---- MoE ----------------------------------------------------------------------------------------
    const { hidden: D, topK, inter: I, sharedInter: SI } = S;
    const shGateUp = weightBuffer(2 * SI, D, 1 / Math.sqrt(D));
    const shDown = weightBuffer(D, SI, 1 / Math.sqrt(SI));
    const shGate = randomBuffer(D, 1 / Math.sqrt(D), ROWS);
    const k = std.EXPERT_KERNELS[FORMAT];
    const codes = { wDtype: std.WEIGHT_DTYPE_CODE[WEIGHTS], rowDtype: rowCode };
    const rb = BYTES[ROWS];
    const moeCases = quick ? [{ experts: 64, batches: [1, 4] }] : [{ experts: S.experts, batches: [1, 32] }, { experts: 64, batches: [1, 8, 64] }];
    for (const { experts: Eq, batches } of moeCases) {
      const caseAllocs = allocs.length;
      // Per expert: gate and up (two scale grids), down (one).
      const gateUp = weightBuffer(I, D, 1 / Math.sqrt(D), 2 * Eq);
      const down = weightBuffer(D, I, 1 / Math.sqrt(I), Eq);
      const router = randomBuffer(Eq * D, 1 / Math.sqrt(D), ROWS);
      const caseBuffers = allocs.length - caseAllocs;
      const maxBatch = Math.max(...batches);
      for (const batch of batches) {
        const sets = 8; // input sets rotated: each repetition routes differently
        const xs = Array.from({ length: sets }, () => upload(encoded(batch * D, 1, ROWS)));
        const logits = alloc(4 * batch * Eq);
        const ids = alloc(4 * batch * topK);
        const weights = alloc(4 * batch * topK);
        const groups = alloc(4 * std.moeGroupsLength(batch, topK, Eq));
        const h = alloc(rb * batch * topK * I);
        const y = alloc(rb * batch * topK * D);
        const routed = alloc(rb * batch * D);
        const shared = alloc(rb * batch * D);
        const gu = alloc(rb * batch * 2 * SI);
        const sh = alloc(rb * batch * SI);
        const gate = alloc(4 * batch);
        const out = alloc(rb * batch * D);
        const gemm = (x) => gpu.gemm({ m: batch, n: Eq, k: D, a: x, b: router, c: logits, transB: true, dtype: ROWS, outDtype: 'f32', stream });
        const routeKernel = () => gpu.launch(std.routeKernel, std.rowLaunch(batch, Eq, stream), {
          logits, bias: 0n, ids, weights, rows: batch, experts: Eq, topK, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1, padSlots: 0n, padK: 0,
        });
        const route = (x) => (gemm(x), routeKernel());
        // After: the grouped kernels (each chosen expert's weights read once per step).
        const experts = (x) => {
          gpu.launch(std.groupKernel, std.groupLaunch(batch, topK, stream), { ids, groups, rows: batch, experts: Eq, topK });
          gpu.launch(k.up, std.expertsUpLaunch(k.format, batch, topK, D, I, Eq, stream), {
            input: x, ids, groups, gateUp: gateUp.data, gateUpScales: gateUp.scales, h, rows: batch, hidden: D, inter: I, experts: Eq, topK, ...codes,
          });
          gpu.launch(k.down, std.expertsDownLaunch(k.format, batch, topK, D, I, Eq, stream), {
            h, ids, groups, down: down.data, downScales: down.scales, y, rows: batch, hidden: D, inter: I, experts: Eq, topK, ...codes,
          });
          gpu.launch(std.expertsKernel, std.expertsLaunch(batch, D, stream), { y, ids, weights, output: routed, rows: batch, hidden: D, experts: Eq, topK, dtype: rowCode });
        };
        // Before: the row-wise kernels (each row re-reads its experts' weights).
        const expertsRowwise = (x) => {
          gpu.launch(k.upRowwise, std.expertsUpRowwiseLaunch(batch, topK, I, stream), {
            input: x, ids, gateUp: gateUp.data, gateUpScales: gateUp.scales, h, rows: batch, hidden: D, inter: I, experts: Eq, topK, ...codes,
          });
          gpu.launch(k.rowwise, std.expertsRowwiseLaunch(batch, D, stream), {
            h, ids, weights, down: down.data, downScales: down.scales, output: routed, rows: batch, hidden: D, inter: I, experts: Eq, topK, ...codes,
          });
        };
        const sharedAndCombine = (x) => {
          linear(batch, x, shGateUp, 2 * SI, D, gu);
          gpu.launch(std.siluMulKernel, std.rowLaunch(batch, SI, stream), { gateUp: gu, out: sh, rows: batch, inter: SI, dtype: rowCode });
          linear(batch, sh, shDown, D, SI, shared);
          gpu.gemm({ m: batch, n: 1, k: D, a: x, b: shGate, c: gate, transB: true, dtype: ROWS, outDtype: 'f32', stream });
          gpu.launch(std.combineKernel, std.rowLaunch(batch, D, stream), { routed, shared, gate, output: out, rows: batch, hidden: D, dtype: rowCode });
        };
        // Distinct experts per input set (the floor's bytes).
        let distinct = 0;
        for (const x of xs) {
          route(x);
          const got = new Int32Array(gpu.download(ids, 4 * batch * topK).buffer);
          distinct += new Set(got).size / sets;
        }
        const x = (i) => xs[i % sets];
        const time = (f) => cb.timeOnDevice(gpu, f, { reps: REPS }).ms;
        const tGemm = time((i) => gemm(x(i)));
        const tRouteKernel = time((i) => (gemm(x(i)), routeKernel())) - tGemm;
        const tRoute = tGemm + tRouteKernel;
        const tExperts = time((i) => (route(x(i)), experts(x(i))));
        const tExpertsRowwise = time((i) => (route(x(i)), expertsRowwise(x(i))));
        const tAll = time((i) => (route(x(i)), experts(x(i)), sharedAndCombine(x(i))));
        const tAllRowwise = time((i) => (route(x(i)), expertsRowwise(x(i)), sharedAndCombine(x(i))));
        const expertBytes = (distinct * (gateUp.bytes + down.bytes)) / Eq;
        const routerBytes = Eq * D * rb;
        const expertsFloorMs = ((expertBytes + routerBytes) / copyBW) * 1e3;
        const bytes = expertBytes + routerBytes + shGateUp.bytes + shDown.bytes + D * rb;
        const floorMs = (bytes / copyBW) * 1e3;
        const row = {
          experts: Eq, batch, distinctExperts: distinct, weightBytes: bytes, floorMs, expertsFloorMs, routerGemmMs: tGemm, routeKernelMs: tRouteKernel, routeMs: tRoute,
          routePlusExpertsMs: tExperts, routePlusExpertsRowwiseMs: tExpertsRowwise, expertsMs: tExperts - tRoute, expertsRowwiseMs: tExpertsRowwise - tRoute,
          totalMs: tAll, totalRowwiseMs: tAllRowwise, achievedBytesPerS: bytes / (tAll * 1e-3),
        };
        result.moe.push(row);
        const us = (ms) => `${(ms * 1e3).toFixed(1)} µs`;
        log(`moe ${Eq} experts batch ${batch}: ${distinct.toFixed(1)} distinct experts, ${(bytes / MiB).toFixed(1)} MiB of weights; router GEMM ${us(tGemm)}, route kernel ${us(tRouteKernel)}`);
        log(`  route + experts: grouped ${us(tExperts)}, row-wise ${us(tExpertsRowwise)} (${(tExpertsRowwise / tExperts).toFixed(2)} ×); floor (distinct experts + router) ${us(expertsFloorMs)} (grouped ${(tExperts / expertsFloorMs).toFixed(2)} × floor)`);
        log(`  whole layer: grouped ${us(tAll)}, row-wise ${us(tAllRowwise)}; floor ${us(floorMs)} (${(tAll / floorMs).toFixed(2)} × floor, ${((100 * row.achievedBytesPerS) / copyBW).toFixed(1)} % of copy)`);
        gpu.synchronize();
        for (const p of allocs.splice(caseAllocs + caseBuffers)) gpu.free(p);
        if (batch === maxBatch) for (const p of allocs.splice(caseAllocs)) gpu.free(p);
      }
    }
    freeAll();
  } finally {
    gpu.dispose();
  }
  mkdirSync(dirname(outPath), { recursive: true });
  writeFileSync(outPath, `${JSON.stringify(result, null, 2)}\n`);
  log(`\nwrote ${outPath}`);
}

await main();
