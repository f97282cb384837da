#!/usr/bin/env node
// DSA kernel benchmark on CUDA, at the GLM-5 shape: lightning indexer 32 heads × 128, top-2048;
// MLA 64 heads, kv_lora 512, rope 64 (nope 192, v 256: the absorbed kernels see only the 576-wide
// latent). Run: `node bench/dsa.bench.mjs` in packages/layer-dsa (only node needed; the workspace
// built: @metrale/cuda-backend and this package's dist, or nvcc to compile kernels/*.cu). Without
// CUDA it says why and exits 0.
//
// In the same run it measures the ceilings: device-to-device copy bandwidth (bytes read + written,
// 1 GiB buffers, far above the L2) and the bf16 GEMM rate (backend gemm, 8192³, random data).
// Then, with device events, warm-up first, the median of many repetitions, random data (never
// zeros), and inputs rotated so that the bytes a repetition touches exceed the L2 where the real
// workload's would:
//   index   dsa.index_score + dsa.topk for one decode step (one row per sequence at position
//           ctx − 1, so every row scores ctx keys and keeps 2048), contexts 8 K / 32 K / 128 K,
//           batch 1 and 32, bf16 and fp8 keys, as CUDA-graph replay (what the step driver runs)
//           and eagerly; floor: the key cache read once, batch · ctx · (256 | 132) B at the copy
//           bandwidth. Bars (docs/performance.md): ≤ 2 × the floor at 128 K, batch 32; ≤ 30 µs
//           at 128 K, batch 1. (The printed bars quote PyTorch eager figures from the issue; they
//           are not measured here.)
//   attn    dsa.sparse_attn, decode rows with 2048 selected tokens each (random, ascending, from a
//           32 K context), batch 1 and 32, f32 and bf16 MLA caches; floor: the gathered bytes,
//           batch · 2048 · 576 · elementBytes. Bar: ≥ 70 % of the copy bandwidth at batch 32.
// Results print as a table and go to $METRALE_BENCH_OUT (default bench-results/dsa.json) as JSON.
// METRALE_BENCH_QUICK=1 runs small sizes only (a smoke test of the program).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = resolve(pkgDir, process.env.METRALE_BENCH_OUT ?? 'bench-results/dsa.json');
const quick = process.env.METRALE_BENCH_QUICK === '1';
const REPS = quick ? 2 : 30;
const started = Date.now();
const log = (...a) => console.log(...a);
const MiB = 2 ** 20;
const SHAPE = { idxHeads: 32, dI: 128, topk: 2048, heads: 64, kvLora: 512, rope: 64, nope: 192, v: 256 };

function writeResult(result) {
  mkdirSync(dirname(outPath), { recursive: true });
  writeFileSync(outPath, `${JSON.stringify(result, null, 2)}\n`);
  log(`\nwrote ${outPath}`);
}

async function main() {
  let cb;
  const hook = process.env.METRALE_DSA_DEVICE_MODULE; // development only: a stand-in device module
  try {
    if (hook) {
      const m = await import(pathToFileURL(resolve(pkgDir, hook)).href);
      cb = { probe: () => ({ available: true, reason: m.reason ?? hook }), CudaBackend: { create: () => m.createDevice() } };
    } else cb = await import('@metrale/cuda-backend');
  } catch (error) {
    log(`dsa bench: skipped: @metrale/cuda-backend could not be loaded (${error.message}); build the workspace first`);
    return;
  }
  const found = cb.probe();
  if (!found.available) {
    log(`dsa bench: skipped: no CUDA (${found.reason})`);
    return;
  }
  let pkg;
  try {
    pkg = await import('@metrale/layer-dsa');
  } catch (error) {
    log(`dsa bench: @metrale/layer-dsa is not built (${error.message}); run its build first`);
    process.exitCode = 1;
    return;
  }
  const { defineKernelModule } = await import('@metrale/core');
  const fatbin = hook ? (k) => k : (k, file) => withFatbin(k, file, defineKernelModule);
  const kernels = {
    score: fatbin(pkg.indexScoreKernel, 'dsa-index'),
    topk: fatbin(pkg.topkKernel, 'dsa-topk'),
    attn: fatbin(pkg.sparseAttnKernel, 'dsa-attn'),
  };
  const gpu = cb.CudaBackend.create();
  const dev = gpu.device;
  log(`dsa bench: ${found.reason}`);
  const L2 = dev.l2CacheBytes || 60 * MiB;
  const result = {
    date: new Date().toISOString(),
    device: { name: dev.name, cc: dev.computeCapability, sms: dev.multiprocessors, l2Bytes: dev.l2CacheBytes, driver: found.driverVersion },
    shape: SHAPE,
    ceilings: {},
    sections: [],
    checks: [],
    errors: [],
  };
  const stream = gpu.defaultStream;
  // Device time of one unit of work (cuda-backend's timeOnDevice: warm-up, then the median).
  const { timeOnDevice, measureCeilings } = await import('@metrale/cuda-backend');
  const time = (fn, { reps = 40, warmup = quick ? 0 : 3, inner = 1 } = {}) => timeOnDevice(gpu, fn, { stream, reps, warmup, inner });

  /** Times `count` launches of `enqueue(i)` captured into one graph (replayed), per launch. */
  function timeGraph(enqueue, count, opts = {}) {
    gpu.beginCapture(stream);
    for (let i = 0; i < count; i++) enqueue(i);
    const graph = gpu.endCapture(stream);
    const exec = gpu.instantiate(graph);
    gpu.destroyGraph(graph);
    try {
      return time(() => gpu.launchGraph(exec, stream), { ...opts, inner: count });
    } finally {
      gpu.destroyGraphExec(exec);
    }
  }

  const section = async (name, body) => {
    const t0 = Date.now();
    try {
      await body();
    } catch (error) {
      result.errors.push(`${name}: ${error?.stack ?? error}`);
      log(`!! section ${name} failed: ${error?.message ?? error}`);
      try {
        gpu.synchronize();
      } catch {
        // a sticky device error: later sections will report it too
      }
    }
    log(`   (${name}: ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  };

  const allocs = new Set();
  const alloc = (bytes) => {
    const p = gpu.alloc(Math.max(bytes, 16));
    allocs.add(p);
    return p;
  };
  const free = (p) => {
    if (allocs.delete(p)) gpu.free(p);
  };
  const upload = (data) => {
    const p = alloc(data.byteLength);
    gpu.upload(p, data);
    return p;
  };

  /** Random bytes over `bytes` at `ptr`: a random block of up to 32 MiB uploaded, then repeated on the device. */
  function fillRandom(ptr, bytes, makeBlock) {
    const blockBytes = Math.min(bytes, 32 * MiB);
    const block = makeBlock(blockBytes);
    gpu.upload(ptr, block);
    for (let off = blockBytes; off < bytes; off += blockBytes) {
      gpu.copyDeviceAsync(ptr + BigInt(off), ptr, Math.min(blockBytes, bytes - off), stream);
    }
    gpu.synchronize(stream);
  }
  const randF32 = (scale = 1) => (bytes) => {
    const a = new Float32Array(bytes / 4);
    for (let i = 0; i < a.length; i++) a[i] = (Math.random() * 2 - 1) * scale || scale / 2;
    return a;
  };
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  const randBf16 = (scale = 1) => (bytes) => {
    const a = new Uint16Array(bytes / 2);
    for (let i = 0; i < a.length; i++) {
      f32[0] = (Math.random() * 2 - 1) * scale || scale / 2;
      a[i] = u32[0] >>> 16;
    }
    return a;
  };
  const randFp8 = () => (bytes) => {
    const a = new Uint8Array(bytes);
    for (let i = 0; i < a.length; i++) {
      let c = (Math.random() * 256) | 0;
      if ((c & 0x7f) === 0x7f) c ^= 1;
      if ((c & 0x7f) === 0) c |= 0x30;
      a[i] = c;
    }
    return a;
  };

  // ---- ceilings (cuda-backend's measureCeilings; quick: 64 MiB copy, 256³ GEMM) ----
  await section('ceilings', () => {
    const c = measureCeilings(gpu, { stream, log: (l) => log(l), ...(quick ? { copyBytes: 64 * MiB, gemmSize: 256 } : { gemmReps: 10 }) });
    result.ceilings = { copyBytesPerS: c.copy?.bytesPerS, copy: c.copy, gemmFlopPerS: c.gemm?.flopPerS, gemm: c.gemm };
    result.errors.push(...c.errors);
  });
  const copyBW = result.ceilings.copyBytesPerS;
  const gemmRate = result.ceilings.gemmFlopPerS;

  const record = (rec) => {
    result.sections.push(rec);
    return rec;
  };

  /** Step tables for `sets` disjoint slot sets of `batch` decode rows at position `pos`. */
  function decodeTables(batch, sets, pos) {
    const t = [];
    for (let s = 0; s < sets; s++) {
      t.push({
        slots: upload(Int32Array.from({ length: batch }, (_, p) => s * batch + p)),
        seqLens: upload(new Int32Array(batch).fill(pos)),
        rowStarts: upload(Int32Array.from({ length: batch + 1 }, (_, p) => p)),
        positions: upload(new Int32Array(batch).fill(pos)),
      });
    }
    return t;
  }
  const freeTables = (ts) => ts.forEach((t) => Object.values(t).forEach(free));

  // ---- indexer score + top-2048 ----
  const contexts = quick ? [4096] : [8192, 32768, 131072];
  const qbWidth = SHAPE.idxHeads * SHAPE.dI;
  for (const idxDtype of [1, 2]) {
    for (const ctx of contexts) {
      for (const batch of quick ? [1, 3] : [1, 32]) {
        const name = `index ${idxDtype === 1 ? 'bf16' : 'fp8'} ctx ${ctx / 1024}K batch ${batch}`;
        await section(name, () => {
          const keyBytes = SHAPE.dI * (idxDtype === 1 ? 2 : 1);
          const perSeq = ctx * (keyBytes + (idxDtype === 2 ? 4 : 0));
          const sets = Math.max(1, Math.min(64, Math.ceil((4 * L2) / (batch * perSeq))));
          const slots = sets * batch;
          const keys = alloc(slots * ctx * keyBytes);
          const scales = idxDtype === 2 ? alloc(slots * ctx * 4) : 0n;
          const qb = alloc(batch * qbWidth * 4);
          const xa = alloc(batch * SHAPE.idxHeads * 4);
          const scores = alloc(batch * ctx * 4);
          const W = SHAPE.topk;
          const sel = alloc(batch * W * 4);
          const selCount = alloc(batch * 4);
          const ts = decodeTables(batch, sets, ctx - 1);
          try {
            fillRandom(keys, slots * ctx * keyBytes, idxDtype === 1 ? randBf16(1) : randFp8());
            if (scales) fillRandom(scales, slots * ctx * 4, (bytes) => Float32Array.from({ length: bytes / 4 }, () => 0.002 + 0.02 * Math.random()));
            fillRandom(qb, batch * qbWidth * 4, randF32(1));
            gpu.upload(xa, Float32Array.from({ length: batch * SHAPE.idxHeads }, () => Math.random() * 2 - 1 || 0.3));
            const shape = { dI: SHAPE.dI, idxHeads: SHAPE.idxHeads, idxDtype, multiprocessors: dev.multiprocessors };
            const scoreLaunch = pkg.indexScoreLaunch(ctx, batch, shape, stream);
            const topkLaunch = pkg.topkLaunch(batch, ctx, stream);
            const scoreArgs = (t) => ({
              qb, xa, keys, keyScales: scales, scores, ...{ slots: t.slots, rowStarts: t.rowStarts, positions: t.positions },
              batch, rowBase: 0, rowCount: batch, qbWidth, qIOff: 0, xaWidth: SHAPE.idxHeads, wOff: 0, idxHeads: SHAPE.idxHeads, dI: SHAPE.dI,
              kpool: 1, keyCapacity: ctx, scoreStride: ctx, idxDtype, qbDtype: 0, scale: 1 / Math.sqrt(SHAPE.dI * SHAPE.idxHeads),
            });
            const topkArgs = (t) => ({
              scores, sel, selCount, slots: t.slots, rowStarts: t.rowStarts, positions: t.positions,
              batch, rowBase: 0, rowCount: batch, scoreStride: ctx, selWidth: W, topk: SHAPE.topk, kpool: 1,
            });
            const score = (i) => gpu.launch(kernels.score, scoreLaunch, scoreArgs(ts[i % sets]));
            const topk = (i) => gpu.launch(kernels.topk, topkLaunch, topkArgs(ts[i % sets]));
            const both = (i) => {
              score(i);
              topk(i);
            };
            // Correctness spot check: every row keeps 2048 ascending distinct candidates < ctx.
            both(0);
            gpu.synchronize(stream);
            const cnt = new Int32Array(gpu.download(selCount, batch * 4).buffer);
            const s0 = new Int32Array(gpu.download(sel, W * 4).buffer);
            let okSel = cnt.every((c) => c === W);
            for (let j = 0; j < W; j++) if (s0[j] < 0 || s0[j] >= ctx || (j > 0 && s0[j] <= s0[j - 1])) okSel = false;
            result.checks.push({ name, ok: okSel });
            if (!okSel) log(`!! ${name}: selection check failed (selCount[0] = ${cnt[0]})`);

            const G = quick ? 1 : Math.max(sets, 8);
            const graph = timeGraph(both, G, { reps: REPS });
            const eager = time((i) => both(i), { reps: REPS, warmup: quick ? 0 : 3 });
            const sOnly = timeGraph(score, G, { reps: REPS });
            const kOnly = timeGraph(topk, G, { reps: REPS });
            const floorBytes = batch * perSeq;
            const floorMs = copyBW ? (floorBytes / copyBW) * 1e3 : undefined;
            const bar = batch === 32 && ctx === 131072 ? '≤ 2 × floor (PyTorch 3.2 ×)' : batch === 1 && ctx === 131072 ? '≤ 30 µs (PyTorch 142 µs)' : '';
            record({
              kind: 'index', name, dtype: idxDtype === 1 ? 'bf16' : 'fp8', ctx, batch, sets, floorBytes, floorMs,
              graph, eager, scoreOnly: sOnly, topkOnly: kOnly,
              vsFloor: floorMs ? graph.ms / floorMs : undefined, achievedBytesPerS: floorBytes / (graph.ms * 1e-3), bar,
              launch: { score: scoreLaunch.grid, scoreShared: scoreLaunch.sharedBytes, topk: topkLaunch.grid, topkShared: topkLaunch.sharedBytes },
            });
            log(`${name}: graph ${(graph.ms * 1e3).toFixed(1)} µs (score ${(sOnly.ms * 1e3).toFixed(1)} + topk ${(kOnly.ms * 1e3).toFixed(1)}), eager ${(eager.ms * 1e3).toFixed(1)} µs, floor ${floorMs ? (floorMs * 1e3).toFixed(1) : '?'} µs → ${floorMs ? (graph.ms / floorMs).toFixed(2) : '?'} ×`);
          } finally {
            for (const p of [keys, scales, qb, xa, scores, sel, selCount]) if (p) free(p);
            freeTables(ts);
          }
        });
      }
    }
  }

  // ---- sparse MLA decode ----
  const lat = SHAPE.kvLora + SHAPE.rope;
  for (const kvDtype of [0, 1]) {
    for (const batch of quick ? [1, 2] : [1, 32]) {
      const name = `attn ${kvDtype === 0 ? 'f32' : 'bf16'} cache batch ${batch}`;
      await section(name, () => {
        const eb = kvDtype === 0 ? 4 : 2;
        const ctx = quick ? 4096 : 32768;
        const n = quick ? 256 : SHAPE.topk;
        const W = SHAPE.topk;
        const gathered = batch * n * lat * eb;
        const selSets = quick ? 1 : Math.max(3, Math.min(16, Math.ceil((4 * L2) / gathered)));
        const cache = alloc(batch * ctx * lat * eb);
        const qlat = alloc(batch * SHAPE.heads * lat * 4);
        const olat = alloc(batch * SHAPE.heads * SHAPE.kvLora * 4);
        const sels = [];
        const selCount = upload(new Int32Array(batch).fill(n));
        const ts = decodeTables(batch, 1, ctx - 1);
        try {
          fillRandom(cache, batch * ctx * lat * eb, kvDtype === 0 ? randF32(1) : randBf16(1));
          fillRandom(qlat, batch * SHAPE.heads * lat * 4, randF32(1));
          for (let s = 0; s < selSets; s++) {
            const a = new Int32Array(batch * W);
            for (let r = 0; r < batch; r++) {
              const picks = new Set();
              while (picks.size < n) picks.add((Math.random() * ctx) | 0);
              [...picks].sort((x, y) => x - y).forEach((v, j) => (a[r * W + j] = v));
            }
            sels.push(upload(a));
          }
          const shape = { heads: SHAPE.heads, kvLora: SHAPE.kvLora, rope: SHAPE.rope, selWidth: W, kvDtype };
          const launch = pkg.sparseAttnLaunch(batch, shape, stream, dev.computeCapability);
          const t0 = ts[0];
          const run = (i) => gpu.launch(kernels.attn, launch, {
            qlat, kvCache: cache, sel: sels[i % selSets], selCount, olat, slots: t0.slots, rowStarts: t0.rowStarts, positions: t0.positions,
            batch, heads: SHAPE.heads, kvLora: SHAPE.kvLora, rope: SHAPE.rope, selWidth: W, capacity: ctx, kvDtype, olatDtype: 0,
            scale: 1 / Math.sqrt(SHAPE.nope + SHAPE.rope),
          });
          run(0);
          gpu.synchronize(stream);
          const o = new Float32Array(gpu.download(olat, SHAPE.heads * SHAPE.kvLora * 4).buffer);
          const okOut = o.every((x) => Number.isFinite(x)) && o.some((x) => x !== 0);
          result.checks.push({ name, ok: okOut });
          if (!okOut) log(`!! ${name}: output check failed (non-finite or all zero)`);
          const M = quick ? 1 : batch >= 32 ? selSets : 4 * selSets;
          const eager = time((i) => {
            for (let m = 0; m < M; m++) run(i * M + m);
          }, { reps: REPS, inner: M });
          const graph = timeGraph(run, M, { reps: REPS });
          const t = Math.min(eager.ms, graph.ms);
          const flop = 2 * batch * SHAPE.heads * n * (lat + SHAPE.kvLora);
          const bw = gathered / (t * 1e-3);
          record({
            kind: 'attn', name, dtype: kvDtype === 0 ? 'f32' : 'bf16', batch, n, ctx, selSets, gatheredBytes: gathered, flop,
            eager, graph, ms: t, achievedBytesPerS: bw, ratio: copyBW ? bw / copyBW : undefined, gemmRatio: gemmRate ? flop / (t * 1e-3) / gemmRate : undefined,
            bar: batch === 32 ? '≥ 70 % of copy on gathered bytes' : '', launch: { grid: launch.grid, shared: launch.sharedBytes },
          });
          log(`${name}: ${(t * 1e3).toFixed(1)} µs, ${(gathered / MiB).toFixed(1)} MiB gathered → ${(bw / 1e12).toFixed(3)} TB/s = ${copyBW ? ((100 * bw) / copyBW).toFixed(1) : '?'} % of copy; ${(flop / (t * 1e-3) / 1e12).toFixed(1)} TFLOP/s`);
        } finally {
          for (const p of [cache, qlat, olat, selCount, ...sels]) free(p);
          freeTables(ts);
        }
      });
    }
  }

  for (const p of [...allocs]) free(p);
  try {
    gpu.dispose();
  } catch (error) {
    result.errors.push(`teardown: ${error?.message ?? error}`);
  }

  // ---- table ----
  const us = (ms) => (ms === undefined ? '–' : ms >= 1 ? `${ms.toFixed(3)} ms` : `${(ms * 1e3).toFixed(1)} µs`);
  log('\nCeilings');
  if (copyBW) log(`  copy bandwidth  ${(copyBW / 1e12).toFixed(3)} TB/s (d2d, read + write)`);
  if (gemmRate) log(`  bf16 GEMM       ${(gemmRate / 1e12).toFixed(1)} TFLOP/s`);
  log('\nIndexer score + top-2048 (decode rows; medians; graph replay per step)');
  const ih = ['keys', 'ctx', 'batch', 'floor (read once)', 'score+topk', 'score', 'topk', 'eager', '× floor', 'bar'];
  const il = result.sections.filter((s) => s.kind === 'index').map((s) => [
    s.dtype, `${s.ctx / 1024}K`, String(s.batch), us(s.floorMs), us(s.graph.ms), us(s.scoreOnly.ms), us(s.topkOnly.ms), us(s.eager.ms),
    s.vsFloor !== undefined ? `${s.vsFloor.toFixed(2)} ×` : '–', s.bar,
  ]);
  printTable(ih, il);
  log('\nSparse MLA decode (top-2048; medians)');
  const ah = ['cache', 'batch', 'gathered', 'time', 'eager', 'graph', 'achieved', '% copy', 'TFLOP/s', 'bar'];
  const al = result.sections.filter((s) => s.kind === 'attn').map((s) => [
    s.dtype, String(s.batch), `${(s.gatheredBytes / MiB).toFixed(1)} MiB`, us(s.ms), us(s.eager.ms), us(s.graph.ms),
    `${(s.achievedBytesPerS / 1e12).toFixed(3)} TB/s`, s.ratio !== undefined ? `${(100 * s.ratio).toFixed(1)} %` : '–',
    (s.flop / (s.ms * 1e-3) / 1e12).toFixed(1), s.bar,
  ]);
  printTable(ah, al);
  const failedChecks = result.checks.filter((c) => !c.ok);
  if (failedChecks.length) log(`\n${failedChecks.length} output check(s) FAILED: ${failedChecks.map((c) => c.name).join(', ')}`);
  if (result.errors.length) log(`\n${result.errors.length} section(s) failed:\n  ${result.errors.map((e) => e.split('\n')[0]).join('\n  ')}`);
  result.seconds = (Date.now() - started) / 1000;
  log(`\ntotal ${result.seconds.toFixed(1)} s`);
  writeResult(result);
}

function printTable(head, lines) {
  const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const fmt = (cells) => cells.map((c, i) => (i === 0 || i === head.length - 1 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  log(fmt(head));
  for (const l of lines) log(fmt(l));
}

function findNvcc() {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/local/cuda/bin']) if (dir && existsSync(join(dir, 'nvcc'))) return join(dir, 'nvcc');
  return undefined;
}

/** The declaration, with its fatbin found: its own path, dist/kernels/, or compiled here with nvcc. */
function withFatbin(k, file, defineKernelModule) {
  if (existsSync(k.cuda.module.fatbin)) return k;
  let path = join(pkgDir, 'dist', 'kernels', `${file}.fatbin`);
  if (!existsSync(path)) {
    const nvcc = findNvcc();
    if (!nvcc) throw new Error(`${k.cuda.module.fatbin} is missing and there is no nvcc: build @metrale/layer-dsa first`);
    const dir = join(tmpdir(), `metrale-dsa-bench-${process.pid}`);
    mkdirSync(dir, { recursive: true });
    path = join(dir, `${file}.fatbin`);
    // <metrale/elements.cuh> is core's (metrale-build-kernels passes the same include path).
    const coreInclude = join(dirname(createRequire(import.meta.url).resolve('@metrale/core/package.json')), 'include');
    execFileSync(nvcc, ['-fatbin', '-O3', '-std=c++17', '--expt-relaxed-constexpr', '-gencode=arch=compute_80,code=sm_80',
      '-gencode=arch=compute_90a,code=sm_90a', '-gencode=arch=compute_90,code=compute_90', `-I${join(pkgDir, 'kernels')}`, `-I${coreInclude}`,
      '-o', path, join(pkgDir, 'kernels', `${file}.cu`)], { stdio: 'inherit' });
  }
  return Object.freeze({ ...k, cuda: { module: defineKernelModule(k.cuda.module.name, path), symbol: k.cuda.symbol } });
}

main().catch((error) => {
  console.error(`dsa bench failed: ${error?.stack ?? error}`);
  process.exitCode = 1;
});
