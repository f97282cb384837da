#!/usr/bin/env node
// Benchmark of the CUDA backend itself (a program, not a test): the two ceilings every GPU figure
// is compared with (device-to-device copy bandwidth, bf16 GEMM rate), launch overhead eager vs a
// replayed graph, allocation latency (pool hit vs miss), host<->device copy latency, and the
// block-FP8 GEMM at decode's rows (Qwen3-Next-80B's projections) against its floor and at a
// prefill's against cuBLASLt's bf16 GEMM and the GEMM ceiling, and a
// decode step's bytes read by 1 to 1 000 kernels of one graph (what a kernel count costs), and
// read by kernels that start on their bytes before they wait for the kernel ahead.
// Device times come from CUDA events (timeOnDevice, src/ceilings.ts), host times from
// process.hrtime; warm-up first, then the median of many repetitions, on random data. Prints a table and writes the same figures as JSON
// to $METRALE_BENCH_OUT (default <repo>/bench-results/cuda-backend.json).
// Run after building: `node bench/backend.bench.mjs` (or `node scripts/bench-gpu.mjs` at the root).
import { spawnSync } from 'node:child_process';
import { randomFillSync } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CudaBackend, READ_AHEAD_MODES, measureCopyBandwidth, measureGemmRate, probe, testKernels, timeOnDevice } from '../dist/index.js';

const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..');
const repoRoot = join(packageDir, '..', '..');
const outPath = resolve(process.env.METRALE_BENCH_OUT ?? join(repoRoot, 'bench-results', 'cuda-backend.json'));
const GiB = 2 ** 30, MiB = 2 ** 20;
// METRALE_BENCH_QUICK=1: small sizes and few repetitions, to check the program runs (figures are
// then meaningless: buffers fit in L2 and GEMMs are tiny).
const QUICK = process.env.METRALE_BENCH_QUICK === '1';
const COPY_BYTES = QUICK ? 64 * MiB : GiB;
const GEMM_SIZE = QUICK ? 256 : 8192;

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
};
const hostUs = (start) => Number(process.hrtime.bigint() - start) / 1e3;

/** The copy ceiling (src/ceilings.ts, shared with the layer benches): 1 GiB source + 1 GiB destination, far beyond the 60 MB L2. */
function copyBandwidth(b) {
  const c = measureCopyBandwidth(b, { bytes: COPY_BYTES, reps: 20 });
  return { name: 'copy bandwidth (device→device, read+write)', bytes: c.bytes, ms: c.ms, gbPerS: c.bytesPerS / 1e9 };
}

function gemmRate(b, dtype, size) {
  if (!b.gemmLibrary.loaded) return { name: `gemm ${dtype} ${size}³`, skipped: b.gemmLibrary.reason };
  const g = measureGemmRate(b, { dtype, size, reps: 10 });
  return { name: `gemm ${dtype} ${size}³ (x·Wᵀ, fp32 accumulate)`, flop: g.flop, ms: g.ms, tflops: g.flopPerS / 1e12 };
}

/**
 * Device ms of one replay of the graph that `record` captures on stream `s` (timeOnDevice's
 * median over `reps`, each of `inner` replays); the graph is freed after.
 */
function timeGraph(b, s, record, { reps, inner = 1 }) {
  b.beginCapture(s);
  record();
  const graph = b.endCapture(s);
  const exec = b.instantiate(graph);
  try {
    return timeOnDevice(b, () => b.launchGraph(exec, s), { stream: s, reps, inner }).ms;
  } finally {
    b.destroyGraphExec(exec);
    b.destroyGraph(graph);
  }
}

/** A decode step of 48 layers as 48 empty kernels: eager launches vs one replayed graph. */
function launchOverhead(b) {
  const layers = 48, steps = 200, batches = 15;
  const s = b.createStream();
  const cfg = { grid: 1, block: 32, stream: s };
  const step = () => {
    for (let l = 0; l < layers; l++) b.launch(testKernels.noop, cfg, {});
  };
  b.beginCapture(s);
  step();
  const graph = b.endCapture(s);
  const exec = b.instantiate(graph);
  const replay = () => b.launchGraph(exec, s);
  const measure = (run) => {
    for (let i = 0; i < steps; i++) run(); // warm-up
    b.synchronize(s);
    const host = [], device = [];
    const start = b.createEvent(), end = b.createEvent();
    for (let batch = 0; batch < batches; batch++) {
      b.recordEvent(start, s);
      const t = process.hrtime.bigint();
      for (let i = 0; i < steps; i++) run();
      host.push(hostUs(t) / steps);
      b.recordEvent(end, s);
      b.synchronizeEvent(end);
      device.push((b.elapsedMs(start, end) * 1e3) / steps);
    }
    b.destroyEvent(start);
    b.destroyEvent(end);
    return { hostUsPerStep: median(host), deviceUsPerStep: median(device) };
  };
  const eager = measure(step);
  const graphed = measure(replay);
  b.destroyGraphExec(exec);
  b.destroyGraph(graph);
  b.destroyStream(s);
  return { name: `launch overhead, ${layers}-kernel step`, graphNodes: graph.nodes, eager, graph: graphed };
}

/** Qwen3-Next-80B's projections (n × k) that checkpoints ship in block-FP8. */
const FP8_PROJECTIONS = [
  { name: 'GDN in_proj_qkvz', n: 12288, k: 2048 },
  { name: 'attention q/gate/k/v', n: 9216, k: 2048 },
  { name: 'GDN out_proj', n: 2048, k: 4096 },
  { name: 'attention o_proj', n: 2048, k: 4096 },
];

/** A random block-FP8 weight [n][k] on the device (no NaN codes; scales 1/64): its codes, scales and their bytes. */
function uploadFp8Weight(b, n, k) {
  const codes = new Uint8Array(n * k);
  randomFillSync(codes);
  for (let i = 0; i < codes.length; i++) if ((codes[i] & 0x7f) === 0x7f) codes[i] ^= 1;
  const scales = new Float32Array(Math.ceil(n / 128) * Math.ceil(k / 128)).fill(1 / 64);
  const pb = b.alloc(codes.byteLength), ps = b.alloc(scales.byteLength);
  b.upload(pb, codes);
  b.upload(ps, scales);
  return { pb, ps, bytes: codes.byteLength + scales.byteLength };
}

/**
 * The block-FP8 GEMM at 1, 8 (the rows kernel), 9, 16, 32 and 64 rows (its wide form) on Qwen3-Next-80B's
 * projection widths, as a decode step replays it: 10 GEMMs in one graph, each on its own weight
 * copy (together beyond the L2), so every GEMM reads its weights from memory. Floor: the codes and
 * scales read once at the copy rate.
 */
function fp8DecodeGemms(b, copyBytesPerS) {
  const shapes = FP8_PROJECTIONS.slice(0, QUICK ? 1 : 4);
  const copies = QUICK ? 2 : 10;
  const s = b.createStream();
  const out = [];
  for (const { name, n, k } of shapes) {
    const weights = Array.from({ length: copies }, () => uploadFp8Weight(b, n, k));
    for (const m of QUICK ? [1, 8] : [1, 8, 9, 16, 32, 64]) {
      const a = new Uint16Array(m * k).fill(0x3f80);  // bf16 1.0
      const pa = b.alloc(a.byteLength), pc = b.alloc(m * n * 2);
      b.upload(pa, a);
      const ms = timeGraph(b, s, () => {
        for (const w of weights) b.gemm({ m, n, k, a: pa, b: w.pb, bDtype: 'f8e4m3', bScales: w.ps, c: pc, transB: true, dtype: 'bf16', outDtype: 'bf16', stream: s });
      }, { reps: QUICK ? 3 : 20, inner: copies });
      const floorUs = (weights[0].bytes / copyBytesPerS) * 1e6;
      out.push({ name, m, n, k, us: ms * 1e3, floorUs, ofCopy: floorUs / (ms * 1e3) });
      b.free(pa);
      b.free(pc);
    }
    for (const w of weights) b.free(w.pb), b.free(w.ps);
  }
  b.destroyStream(s);
  return out;
}

/** Random finite bf16 bits of magnitude below 2 (timing only). */
function randomBf16(count) {
  const u = new Uint16Array(count);
  randomFillSync(u);
  for (let i = 0; i < count; i++) u[i] &= 0xbfff;
  return u;
}

/**
 * The block-FP8 GEMM at a prefill's rows (4 096 tokens) on the same widths, against cuBLASLt's bf16
 * GEMM of the same shape in the same run (B in bf16) and the ceiling of its FLOPs at the measured
 * bf16 GEMM rate: what an FP8 checkpoint's prefill pays for keeping its weights in FP8.
 */
function fp8PrefillGemms(b, bf16FlopPerS) {
  const m = QUICK ? 256 : 4096;
  // GDN's in_proj_qkvz and out_proj: the widest and a narrow one.
  const shapes = [FP8_PROJECTIONS[0], FP8_PROJECTIONS[2]];
  const s = b.createStream();
  const out = [];
  for (const { name, n, k } of shapes) {
    const { pb: pb8, ps } = uploadFp8Weight(b, n, k);
    const pa = b.alloc(m * k * 2), pb16 = b.alloc(n * k * 2), pc = b.alloc(m * n * 2);
    b.upload(pa, randomBf16(m * k));
    b.upload(pb16, randomBf16(n * k));
    const base = { m, n, k, a: pa, c: pc, transB: true, dtype: 'bf16', outDtype: 'bf16', stream: s };
    const reps = QUICK ? 2 : 10;
    const fp8 = timeOnDevice(b, () => b.gemm({ ...base, b: pb8, bDtype: 'f8e4m3', bScales: ps }), { stream: s, reps });
    const bf16 = b.gemmLibrary.loaded ? timeOnDevice(b, () => b.gemm({ ...base, b: pb16 }), { stream: s, reps }) : undefined;
    const ceilingUs = bf16FlopPerS ? ((2 * m * n * k) / bf16FlopPerS) * 1e6 : undefined;
    out.push({ name, m, n, k, us: fp8.ms * 1e3, bf16Us: bf16 ? bf16.ms * 1e3 : undefined, ceilingUs });
    for (const p of [pa, pb8, ps, pb16, pc]) b.free(p);
  }
  b.destroyStream(s);
  return out;
}

/**
 * The ceiling a decode step's kernel count sets: the bytes of the 80B-shaped bf16 step at batch 1
 * (its floor's bytes, apps/serve/bench/decode.bench.mjs) read once, split evenly over N kernels of
 * one replayed graph (read_xor_u32, a grid of 4 CTAs an SM), with early start and without. The
 * step's time against the bytes at the copy rate gives each kernel's fixed cost in a graph.
 */
function kernelChain(b, copyBytesPerS) {
  const totalBytes = QUICK ? 64 * MiB : 7.2e9;
  const counts = QUICK ? [1, 16] : [1, 100, 500, 1000];
  const grid = 4 * b.device.multiprocessors;
  const src = b.alloc(totalBytes), sink = b.alloc(4 * grid);
  const s = b.createStream();
  const out = [];
  try {
    for (const kernels of counts) {
      const n4 = Math.floor(totalBytes / kernels / 16);
      for (const earlyStart of [true, false]) {
        const ms = timeGraph(b, s, () => {
          for (let i = 0; i < kernels; i++) {
            b.launch(testKernels.readXorU32, { grid, block: 256, stream: s, earlyStart }, { src: src + BigInt(i * n4 * 16), sink, n4 });
          }
        }, { reps: QUICK ? 3 : 10 });
        const floorMs = ((kernels * n4 * 16) / copyBytesPerS) * 1e3;
        out.push({ kernels, earlyStart, ms, floorMs, ofCopy: floorMs / ms, usPerKernelOverFloor: ((ms - floorMs) * 1e3) / kernels });
      }
    }
  } finally {
    b.destroyStream(s);
    b.free(src);
    b.free(sink);
  }
  return out;
}

/**
 * What a kernel that starts on its bytes before it waits for the kernel ahead would buy a decode
 * step: about the bytes of the block-FP8 80B-shaped step at batch 1 (4.0 GB; 512 experts) read by
 * 5 kernels a layer over 48 layers (read_xor_ahead_u32, 4 CTAs an SM, each launched early), with
 * and without a kernel moving no bytes after each (spin_cycles for SPIN_CYCLES clocks: the norms',
 * preps' and route tails' serial work), each way of reading ahead (READ_AHEAD_MODES). The light
 * kernels alone give their own share. One replayed graph each.
 */
const SPIN_CYCLES = 2000;
function kernelChainAhead(b, copyBytesPerS) {
  const totalBytes = QUICK ? 64 * MiB : 4.0e9;
  const layers = QUICK ? 4 : 48, perLayer = 5;
  const heavy = layers * perLayer;
  const grid = 4 * b.device.multiprocessors;
  const n4 = Math.floor(totalBytes / heavy / 16);
  const src = b.alloc(heavy * n4 * 16), sink = b.alloc(4 * grid), spun = b.alloc(4);
  const s = b.createStream();
  const floorMs = ((heavy * n4 * 16) / copyBytesPerS) * 1e3;
  const time = (record) => timeGraph(b, s, record, { reps: QUICK ? 3 : 10 });
  const light = () => b.launch(testKernels.spinCycles, { grid: 1, block: 32, stream: s, earlyStart: true }, { sink: spun, cycles: SPIN_CYCLES });
  const out = [];
  try {
    const lightMs = time(() => {
      for (let i = 0; i < heavy; i++) light();
    });
    out.push({ name: `${heavy} light kernels alone (${SPIN_CYCLES} clocks each)`, kernels: heavy, ms: lightMs });
    for (const [mode, ahead] of Object.entries(READ_AHEAD_MODES)) {
      for (const withLight of [false, true]) {
        const ms = time(() => {
          for (let i = 0; i < heavy; i++) {
            b.launch(testKernels.readXorAheadU32, { grid, block: 256, stream: s, earlyStart: true }, { src: src + BigInt(i * n4 * 16), sink, n4, ahead });
            if (withLight) light();
          }
        });
        const kernels = withLight ? 2 * heavy : heavy;
        out.push({
          name: `${heavy} readers${withLight ? ` + ${heavy} light` : ''}, ahead: ${mode}`, mode, withLight, kernels, ms, floorMs,
          ofCopy: floorMs / ms, usPerKernelOverFloor: ((ms - floorMs) * 1e3) / kernels,
        });
      }
    }
  } finally {
    b.destroyStream(s);
    b.free(src);
    b.free(sink);
    b.free(spun);
  }
  return out;
}

function allocLatency(b) {
  const bytes = 4 * MiB, reps = 200;
  const miss = [], hit = [], free = [];
  for (let i = 0; i < reps; i++) {
    b.trim(); // empty pool: the next alloc calls cuMemAlloc
    let t = process.hrtime.bigint();
    const p = b.alloc(bytes);
    miss.push(hostUs(t));
    t = process.hrtime.bigint();
    b.free(p);
    free.push(hostUs(t));
    t = process.hrtime.bigint();
    const q = b.alloc(bytes); // the block just freed: a pool hit
    hit.push(hostUs(t));
    b.free(q);
  }
  b.trim();
  return { name: `alloc/free ${bytes / MiB} MiB (host µs)`, poolMissUs: median(miss), poolHitUs: median(hit), freeUs: median(free) };
}

function copyLatency(b) {
  const out = [];
  for (const bytes of [4096, QUICK ? 16 * MiB : 256 * MiB]) {
    const host = b.allocHost(bytes);
    randomFillSync(host.bytes);
    const dev = b.alloc(bytes);
    const s = b.createStream();
    for (const [dir, body] of [
      ['host→device', () => b.copyToDeviceAsync(dev, host, 0, bytes, s)],
      ['device→host', () => b.copyToHostAsync(host, 0, dev, bytes, s)],
    ]) {
      const reps = bytes > MiB ? 20 : 500;
      const { ms } = timeOnDevice(b, body, { reps, stream: s });
      // Host round trip: issue, then wait (what a synchronous caller pays).
      const wall = [];
      for (let i = 0; i < reps; i++) {
        const t = process.hrtime.bigint();
        body();
        b.synchronize(s);
        wall.push(hostUs(t));
      }
      out.push({ name: `${dir} ${bytes >= MiB ? `${bytes / MiB} MiB` : `${bytes / 1024} KiB`} (pinned)`, bytes, deviceUs: ms * 1e3, hostRoundTripUs: median(wall), gbPerS: bytes / (ms * 1e-3) / 1e9 });
    }
    b.destroyStream(s);
    b.free(dev);
    b.freeHost(host);
  }
  return out;
}

function gitCommit() {
  const r = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: repoRoot, encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

function main() {
  const found = probe();
  if (!found.available) {
    console.log(`cuda-backend bench: no GPU, nothing measured (${found.reason})`);
    return 0;
  }
  console.log(`cuda-backend bench on ${found.reason}`);
  const b = CudaBackend.create();
  try {
    const copy = copyBandwidth(b);
    const bf16 = gemmRate(b, 'bf16', GEMM_SIZE);
    const f32 = gemmRate(b, 'f32', GEMM_SIZE);
    const launches = launchOverhead(b);
    const alloc = allocLatency(b);
    const copies = copyLatency(b);
    // The copy ceiling counts bytes read + written; a read-only floor takes the same byte rate.
    const fp8 = fp8DecodeGemms(b, copy.gbPerS * 1e9);
    const chain = kernelChain(b, copy.gbPerS * 1e9);
    const ahead = kernelChainAhead(b, copy.gbPerS * 1e9);
    const prefill = fp8PrefillGemms(b, bf16.tflops ? bf16.tflops * 1e12 : undefined);

    const fmt = (x, d = 1) => (x === undefined ? '-' : x.toFixed(d));
    const rows = [
      [copy.name, `${fmt(copy.gbPerS)} GB/s`, `${fmt(copy.ms * 1e3)} µs per ${copy.bytes / MiB} MiB moved`],
      ...[bf16, f32].map((g) => [g.name, g.skipped ? 'skipped' : `${fmt(g.tflops)} TFLOP/s`, g.skipped ?? `${fmt(g.ms, 3)} ms${g === f32 && bf16.tflops ? ` (${fmt((100 * f32.tflops) / bf16.tflops)} % of bf16)` : ''}`]),
      [`${launches.name}, eager`, `${fmt(launches.eager.hostUsPerStep)} µs host`, `${fmt(launches.eager.deviceUsPerStep)} µs device per step`],
      [`${launches.name}, graph replay`, `${fmt(launches.graph.hostUsPerStep)} µs host`, `${fmt(launches.graph.deviceUsPerStep)} µs device per step (${launches.graphNodes} nodes)`],
      [alloc.name, `hit ${fmt(alloc.poolHitUs, 2)} µs`, `miss ${fmt(alloc.poolMissUs, 1)} µs, free ${fmt(alloc.freeUs, 2)} µs`],
      ...copies.map((c) => [c.name, `${fmt(c.deviceUs)} µs device`, `${fmt(c.hostRoundTripUs)} µs host round trip, ${fmt(c.gbPerS)} GB/s`]),
      ...chain.map((c) => [`${c.kernels}-kernel chain reading ${QUICK ? '64 MiB' : '7.2 GB'}${c.earlyStart ? ', early start' : ''}`, `${fmt(c.ms, 3)} ms`, `floor ${fmt(c.floorMs, 3)} ms: ${fmt(100 * c.ofCopy)} % of copy, ${fmt(c.usPerKernelOverFloor, 2)} µs a kernel over it`]),
      ...ahead.map((c) => [c.name, `${fmt(c.ms, 3)} ms`, c.floorMs === undefined ? `${fmt((c.ms * 1e3) / c.kernels, 2)} µs a kernel` : `floor ${fmt(c.floorMs, 3)} ms: ${fmt(100 * c.ofCopy)} % of copy, ${fmt(c.usPerKernelOverFloor, 2)} µs a kernel over it`]),
      ...fp8.map((g) => [`block-FP8 GEMM, ${g.name} (${g.n} × ${g.k}), ${g.m} row${g.m > 1 ? 's' : ''}`, `${fmt(g.us)} µs`, `floor ${fmt(g.floorUs)} µs: ${fmt(100 * g.ofCopy)} % of copy`]),
      ...prefill.map((g) => [
        `block-FP8 GEMM, ${g.name} (${g.n} × ${g.k}), ${g.m} rows`, `${fmt(g.us)} µs`,
        `cuBLASLt bf16 ${fmt(g.bf16Us)} µs; ceiling ${fmt(g.ceilingUs)} µs at the bf16 GEMM rate: ${g.ceilingUs ? fmt((100 * g.ceilingUs) / g.us) : '-'} % of it`,
      ]),
    ];
    const w0 = Math.max(...rows.map((r) => r[0].length)), w1 = Math.max(...rows.map((r) => r[1].length));
    console.log('');
    for (const [a, c, d] of rows) console.log(`${a.padEnd(w0)}  ${c.padStart(w1)}  ${d}`);
    console.log(`\nceilings: copy ${fmt(copy.gbPerS)} GB/s, bf16 GEMM ${bf16.tflops ? `${fmt(bf16.tflops)} TFLOP/s` : 'not measured'}`);

    const report = {
      benchmark: 'cuda-backend',
      quick: QUICK,
      date: new Date().toISOString(),
      commit: gitCommit(),
      gpu: b.device.name,
      computeCapability: b.device.computeCapability.join('.'),
      driverVersion: found.driverVersion,
      cublasLt: b.gemmLibrary.loaded ? { path: b.gemmLibrary.path, version: b.gemmLibrary.version } : { missing: b.gemmLibrary.reason },
      ceilings: { copyBandwidthGBs: copy.gbPerS, bf16GemmTflops: bf16.tflops ?? null },
      results: { copy, gemmBf16: bf16, gemmF32: f32, launchOverhead: launches, alloc, copies, fp8DecodeGemms: fp8, fp8PrefillGemms: prefill, kernelChain: chain, kernelChainAhead: ahead },
    };
    mkdirSync(dirname(outPath), { recursive: true });
    writeFileSync(outPath, `${JSON.stringify(report, null, 2)}\n`);
    console.log(`wrote ${outPath}`);
  } finally {
    b.dispose();
  }
  return 0;
}

process.exit(main());
