#!/usr/bin/env node
// Decode kernels of layer-std on CUDA, timed as a served step runs them: each case is 10 runs
// captured back to back in one CUDA graph, the graph replayed (timeOnDevice: warm-up, the median
// of 10 replays), the time per run. Eager timings of kernels this short measure the host's
// launches, not the device (std.bench.mjs's µs-scale figures do). Qwen3-Next-80B shapes, bf16:
//   attention decode   std.attn_core + std.attn_combine as the layer launches them (chunks from a
//                      262 144-token limit), one row per sequence at position ctx − 1, contexts 4 K,
//                      32 K and 128 K; floor: the K and V rows read once at the copy rate.
//   router + route     the three forms (routeForm) at 1 and 8 rows, 512 and 64 experts, top-10:
//                      std.moe_router_gemv; the router GEMM + std.moe_route_few; the GEMM +
//                      std.moe_route; floor: the router weight read once.
// Results print and go to $METRALE_BENCH_OUT (default bench-results/decode-kernels.json).
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BYTES, deviceBuffers } from './device-buffers.mjs';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = resolve(pkgDir, process.env.METRALE_BENCH_OUT ?? 'bench-results/decode-kernels.json');
const ROWS = 'bf16';
const log = (...a) => console.log(...a);

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
const result = { device: found.reason, rows: ROWS, ceilings: {}, attention: [], router: [] };
try {
  const c = cb.measureCeilings(gpu, { log: (l) => log(`  ${l}`), gemmSize: 4096 });
  result.ceilings = { copyBytesPerS: c.copy?.bytesPerS };
  const copyBW = c.copy.bytesPerS;
  const { alloc, upload, encoded, randomBuffer, freeFrom } = deviceBuffers(gpu, core, stream);
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
  for (const [ctx, batch] of [[4096, 1], [4096, 8], [4096, 32], [4096, 64], [32768, 1], [32768, 8], [32768, 32], [131072, 1]]) {
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
    const ms = graphMs(() => {
      gpu.launch(k.core, std.coreLaunch(batch, Hkv, d, BYTES[ROWS], chunks, gpu.device.multiprocessors, stream), args);
      gpu.launch(k.combine, std.combineLaunch(batch, H, stream), args);
    });
    const bytes = batch * ctx * Hkv * d * BYTES[ROWS] * 2;
    const floorMs = (bytes / copyBW) * 1e3;
    result.attention.push({ ctx, batch, kvBytes: bytes, floorMs, ms, ofCopy: floorMs / ms });
    log(`attention decode ctx ${ctx} batch ${batch}: ${(ms * 1e3).toFixed(1)} µs, floor ${(floorMs * 1e3).toFixed(1)} µs (${((100 * floorMs) / ms).toFixed(1)} % of copy)`);
    freeFrom(0);
  }

  // ---- router + route ----------------------------------------------------------------------------------
  const D = 2048, topK = 10;
  for (const E of [512, 64]) {
    const router = randomBuffer(E * D, 1 / Math.sqrt(D), ROWS);
    const counter = upload(new Uint32Array(1));
    for (const batch of [1, 8]) {
      const xs = Array.from({ length: 10 }, () => upload(encoded(batch * D, 1, ROWS)));
      const logits = alloc(4 * batch * E);
      const args = { bias: 0n, ids: alloc(4 * batch * topK), weights: alloc(4 * batch * topK), rows: batch, experts: E, topK, scoring: 0, normTopK: 1, nGroup: 1, topkGroup: 1, scaling: 1 };
      const gemm = (i) => gpu.gemm({ m: batch, n: E, k: D, a: xs[i], b: router, c: logits, transB: true, dtype: ROWS, outDtype: 'f32', stream });
      const fusedMs = graphMs((i) => gpu.launch(std.routerGemvKernel, std.routerGemvLaunch(E, stream), { x: xs[i], w: router, logits, counter, ...args, hidden: D, dtype: rowCode }));
      const fewMs = graphMs((i) => (gemm(i), gpu.launch(std.routeFewKernel, std.routeFewLaunch(stream), { logits, ...args })));
      const blockMs = graphMs((i) => (gemm(i), gpu.launch(std.routeKernel, std.rowLaunch(batch, E, stream), { logits, ...args })));
      const gemmMs = graphMs(gemm);
      const floorMs = ((E * D * BYTES[ROWS]) / copyBW) * 1e3;
      result.router.push({ experts: E, batch, form: std.routeForm(batch, topK, E, ROWS), floorMs, fusedMs, gemmRouteFewMs: fewMs, gemmRouteMs: blockMs, gemmMs });
      const us = (ms) => `${(ms * 1e3).toFixed(1)} µs`;
      log(`router + route ${E} experts batch ${batch}: std.moe_router_gemv ${us(fusedMs)}; GEMM + std.moe_route_few ${us(fewMs)}; GEMM + std.moe_route ${us(blockMs)} (GEMM alone ${us(gemmMs)}); floor ${us(floorMs)}`);
    }
    freeFrom(0);
  }
} finally {
  gpu.dispose();
}
mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, `${JSON.stringify(result, null, 2)}\n`);
log(`wrote ${outPath}`);
