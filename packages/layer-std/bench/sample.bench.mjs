#!/usr/bin/env node
// The device sampler (src/device-sampler.ts) on CUDA at the Qwen3 vocabulary (151 936 logits a
// row), as the engine loop calls it after a decode step: each case is `DeviceSampler.sample` (or
// `argmax` for greedy), timed on the host around the call (its uploads, launches, the copy of the
// ids back and the wait: what a sampled step pays beyond its forward), the mean of 50 calls after
// 5 of warm-up, at 1, 8 and 64 rows of random logits (normal, σ 3), each row drawing its own
// uniform. Cases: greedy; temperature 0.7 alone; top-k 20 + top-p 0.8 (the decode bench's
// `--sampling 0.7,0.8,20`); the same with 5 logprobs; the same over peaked logits (σ 300: most p
// round to 0, as a confident model's do); the same over logits rounded to bf16 (ties at the cut:
// the top-p digit passes); top-p 0.95 alone (the digit passes); top-k 200; top-k 600 (past the
// pools: the top-k digit passes). Floor: the
// logits read once at the copy rate (the same run's ceiling), beside the time.
// Results print and go to $METRALE_BENCH_OUT (default bench-results/sample.json).
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = resolve(pkgDir, process.env.METRALE_BENCH_OUT ?? 'bench-results/sample.json');
const log = (...a) => console.log(...a);
const V = 151_936;
const BATCHES = [1, 8, 64];
const REPS = 50;
const WARMUP = 5;

const cb = await import('@metrale/cuda-backend');
const found = cb.probe();
if (!found.available) {
  log(`sample bench: skipped: no CUDA (${found.reason})`);
  process.exit(0);
}
const { DeviceSampler } = await import('@metrale/layer-std');
const { SeededRandom, fromBf16, toBf16 } = await import('@metrale/core');
const gpu = cb.CudaBackend.create();
const stream = gpu.defaultStream;
const result = { device: found.reason, vocab: V, ceilings: {}, cases: [] };
const CASES = [
  ['greedy', undefined],
  ['temperature 0.7', { temperature: 0.7 }],
  ['top-k 20, top-p 0.8', { temperature: 0.7, topK: 20, topP: 0.8 }],
  ['top-k 20, top-p 0.8, 5 logprobs', { temperature: 0.7, topK: 20, topP: 0.8, logprobs: 5 }],
  ['top-k 20, top-p 0.8, peaked', { temperature: 0.7, topK: 20, topP: 0.8, logits: 'peaked' }],
  ['top-k 20, top-p 0.8, bf16 ties', { temperature: 0.7, topK: 20, topP: 0.8, logits: 'bf16' }],
  ['top-p 0.95', { temperature: 1, topP: 0.95 }],
  ['top-k 200', { temperature: 0.7, topK: 200 }],
  ['top-k 600', { temperature: 0.7, topK: 600 }],
];
try {
  const c = cb.measureCeilings(gpu, { log: (l) => log(`  ${l}`), gemmSize: 4096 });
  result.ceilings = { copyBytesPerS: c.copy?.bytesPerS };
  const maxRows = Math.max(...BATCHES);
  const normal = new SeededRandom(5).normals(maxRows * V, 3);
  const sets = { normal, peaked: normal.map((x) => 100 * x), bf16: fromBf16(toBf16(normal)) };
  const buffers = Object.fromEntries(Object.entries(sets).map(([name, values]) => {
    const ptr = gpu.alloc(4 * maxRows * V);
    gpu.upload(ptr, values);
    return [name, ptr];
  }));
  const sampler = new DeviceSampler(gpu, maxRows);
  const draws = new SeededRandom(6);
  try {
    for (const rows of BATCHES) {
      for (const [name, p] of CASES) {
        const logits = buffers[p?.logits ?? 'normal'];
        const call = () => {
          if (!p) return sampler.argmax(logits, rows, V, stream);
          const picked = Array.from({ length: rows }, () => ({ temperature: p.temperature, topK: p.topK ?? 0, topP: p.topP ?? 1, minP: 0, uniform: draws.float(), ...(p.logprobs ? { logprobs: p.logprobs } : {}) }));
          return sampler.sample(logits, picked, V, stream).tokens;
        };
        for (let i = 0; i < WARMUP; i++) call();
        const t0 = performance.now();
        for (let i = 0; i < REPS; i++) call();
        const ms = (performance.now() - t0) / REPS;
        const floorMs = c.copy?.bytesPerS ? ((4 * rows * V) / c.copy.bytesPerS) * 1e3 : undefined;
        result.cases.push({ rows, case: name, ms_per_call: Number(ms.toFixed(4)), ...(floorMs ? { floor_ms: Number(floorMs.toFixed(4)) } : {}) });
        log(`rows ${String(rows).padStart(2)}  ${name.padEnd(32)} ${(ms * 1e3).toFixed(1).padStart(8)} µs a call${floorMs ? `  (logits read once: ${(floorMs * 1e3).toFixed(1)} µs)` : ''}`);
      }
    }
  } finally {
    sampler.dispose();
    for (const ptr of Object.values(buffers)) gpu.free(ptr);
  }
} finally {
  gpu.dispose();
}
mkdirSync(dirname(outPath), { recursive: true });
writeFileSync(outPath, `${JSON.stringify(result, null, 2)}\n`);
log(`wrote ${outPath}`);
