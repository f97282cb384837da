#!/usr/bin/env node
// GDN kernel benchmark on CUDA, at the Qwen3-Next-80B layer shape (H_k 16, H_v 32, d_k = d_v = 128,
// conv K 4; f32 state of 2 MiB per sequence). Run: `node bench/gdn.bench.mjs` in packages/layer-gdn
// (needs only node; the workspace built: @metrale/cuda-backend and this package's dist, or nvcc to
// compile kernels/*.cu). Without CUDA it says why and exits 0.
//
// In the same run it measures the ceilings: device-to-device copy bandwidth (bytes read + written,
// 1 GiB buffers, far above the L2) and the bf16 GEMM rate (backend gemm, 8192³, random data).
// Then, with device events around each repetition, warm-up first, median of the repetitions,
// random data, state sets rotated so that the bytes touched per repetition exceed the L2:
//   decode      a decode step (k = 1) as the layer launches it (gdn-decode-launch.ts decodePath: the
//               two-kernel decode, or gdn.recurrent's variant), batch 1 / 32 / 256; floor: state
//               read + write (2 × batch × 2 MiB); eager launches and CUDA-graph replay.
//   verify+fold a write-on-accept verify of k = 4 as the layer launches it (verifyPath), then the
//               fold of all 4 rows (launchFold; on another state set, as in a real step where all
//               layers verify before any folds); floor: verify reads S, fold reads and writes it
//               (3 × batch × 2 MiB), so 1.5 × a decode step's bytes; printed bar ≤ 1.15 × decode.
//   carried     one carried speculative cycle: the accept of the previous verify launches nothing;
//               the next verify (carried, k = 4, pending = 4 on every slot, as the layer launches
//               it) folds those 4 rows into S, writes S once, and scores its 4 new rows; floor:
//               2 × batch × 2 MiB, the same as one decode step; printed bar ≤ 1.10 × decode.
//   prefill     the chunked WY prefill (kernels/gdn-chunk.cu: gdn_prefill_wy + gdn_prefill_scan, the
//               gated norm where prefillPlan puts it), one sequence of 8192 rows from an empty
//               state and 4 sequences of 2048; fast build (bf16 operands, what the layer runs above
//               PREFILL_EXACT_MAX_ROWS rows) and exact build (bf16 hi/lo pairs); the two kernels
//               alone; the unfused norm; the row-by-row oracle (gdn_chunk_rowwise) once. FLOPs
//               counted as the chunked (WY) form with C = 64 (see chunkFlops); printed bar: ≥ 40 %
//               of the bf16 GEMM rate. The "× FLA" ratio divides by 1.08 ms, a flash-linear-attention
//               figure quoted from the issue, not measured in the same run.
// The printed bars are the first list; docs/performance.md has the current ones.
// METRALE_GDN_BENCH_ONLY=prefill runs the ceilings and the prefill sections only (a comma-separated
// list of section name prefixes: decode,verify,carried,prefill).
// METRALE_GDN_FATBIN_DIR=dir: fatbins from there (dir/<file>.fatbin) before dist/kernels.
// A failing section is reported and the others still run. Results print as a table and go to
// $METRALE_BENCH_OUT (default bench-results/gdn.json) as JSON.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = resolve(pkgDir, process.env.METRALE_BENCH_OUT ?? 'bench-results/gdn.json');
const started = Date.now();
const log = (...a) => console.log(...a);

import { EPS, MiB, SHAPE, allocLayer, freeAll, freeTables, setsFor, stateSeqBytes, stepTables } from './gdn-bench-layer.mjs';

function writeResult(result) {
  mkdirSync(dirname(outPath), { recursive: true });
  writeFileSync(outPath, `${JSON.stringify(result, null, 2)}\n`);
  log(`\nwrote ${outPath}`);
}

async function main() {
  let cb;
  const hook = process.env.METRALE_GDN_DEVICE_MODULE; // development only: a stand-in device module
  try {
    if (hook) {
      const m = await import(pathToFileURL(hook).href);
      cb = { probe: () => ({ available: true, reason: m.reason ?? hook }), CudaBackend: { create: () => m.createDevice() } };
    } else cb = await import('@metrale/cuda-backend');
  } catch (error) {
    log(`gdn bench: skipped: @metrale/cuda-backend could not be loaded (${error.message}); build the workspace first`);
    return;
  }
  const found = cb.probe();
  if (!found.available) {
    log(`gdn bench: skipped: no CUDA (${found.reason})`);
    return;
  }
  let pkg;
  try {
    pkg = await import('@metrale/layer-gdn');
  } catch (error) {
    log(`gdn bench: @metrale/layer-gdn is not built (${error.message}); run its build first`);
    process.exitCode = 1;
    return;
  }
  const { defineKernelModule } = await import('@metrale/core');
  const fatbin = hook ? (k) => k : (k, file) => withFatbin(k, file, defineKernelModule);
  // The entry points the layer launches (gdn-launch.ts recurrentVariant / foldVariant), each
  // loaded on first use (a section that does not run needs no fatbin).
  const loaded = new Map();
  const once = (key, make) => (loaded.has(key) ? loaded.get(key) : (loaded.set(key, make()), loaded.get(key)));
  const kernels = {
    recurrentOf: (v) => once(`r.${v}`, () => fatbin(pkg.recurrentVariantKernels[v], 'gdn-recurrent')),
    foldOf: (v) => once(`f.${v}`, () => fatbin(pkg.foldVariantKernels[v], 'gdn-fold')),
    get foldState() {
      return once('fold-state', () => fatbin(pkg.foldStateKernel, 'gdn-decode'));
    },
    get twoKernel() {
      return once('two-kernel', () => ({
        prep: fatbin(pkg.decodePrepKernel, 'gdn-decode'), state: fatbin(pkg.decodeStateKernel, 'gdn-decode'), statePlain: fatbin(pkg.decodeStatePlainKernel, 'gdn-decode'),
      }));
    },
    get twoKernelVerify() {
      return once('two-kernel-verify', () => ({ prep: fatbin(pkg.verifyPrepKernel, 'gdn-verify'), state: fatbin(pkg.verifyStateKernel, 'gdn-verify') }));
    },
    get chunk() {
      return once('chunk', () => fatbin(pkg.chunkKernel, 'gdn-chunk-rowwise'));
    },
  };
  const gpu = cb.CudaBackend.create();
  const dev = gpu.device;
  log(`gdn bench: ${found.reason}`);
  log(`shape: H_k ${SHAPE.hk}, H_v ${SHAPE.hv}, d_k ${SHAPE.dk}, d_v ${SHAPE.dv}, K ${SHAPE.convK}; state ${stateSeqBytes / MiB} MiB per sequence; L2 ${(dev.l2CacheBytes / MiB).toFixed(0)} MiB`);
  const result = {
    date: new Date().toISOString(),
    device: { name: dev.name, cc: dev.computeCapability, sms: dev.multiprocessors, l2Bytes: dev.l2CacheBytes, driver: found.driverVersion },
    shape: SHAPE,
    ceilings: {},
    sections: [],
    errors: [],
  };
  const stream = gpu.defaultStream;
  // sm_90+: the layer runs clusters (split decode, the prefill's fused norm).
  const clusters = pkg.runsClusters(gpu);
  // Device time of one unit of work (cuda-backend's timeOnDevice: warm-up, then the median).
  const { timeOnDevice, measureCeilings } = await import('@metrale/cuda-backend');
  const time = (fn, { reps = 50, warmup = 3, inner = 1 } = {}) => timeOnDevice(gpu, fn, { stream, reps, warmup, inner });

  const only = process.env.METRALE_GDN_BENCH_ONLY?.split(',').filter(Boolean);
  const wanted = (name) => !only || only.some((o) => name.startsWith(o));
  const section = async (name, body) => {
    if (!wanted(name)) return;
    const t0 = Date.now();
    try {
      await body();
    } catch (error) {
      const msg = `${name}: ${error?.stack ?? error}`;
      result.errors.push(msg);
      log(`!! section ${name} failed: ${error?.message ?? error}`);
      try {
        gpu.synchronize();
      } catch {
        // a sticky device error: later sections will report it too
      }
    }
    log(`   (${name}: ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  };

  // ---- ceilings (cuda-backend's measureCeilings: 1 GiB d2d copy, bf16 GEMM 8192³) ----
  {
    const c = measureCeilings(gpu, { stream, log: (l) => log(l) });
    result.ceilings = { copyBytesPerS: c.copy?.bytesPerS, copy: c.copy, gemmFlopPerS: c.gemm?.flopPerS, gemm: c.gemm };
    result.errors.push(...c.errors);
  }
  const copyBW = result.ceilings.copyBytesPerS;
  const gemmRate = result.ceilings.gemmFlopPerS;

  try {
    // ---- layer buffers for up to 256 sequence slots ----
    const maxSlots = 256;
    const maxRows = 8192;
    const L = allocLayer(gpu, maxSlots, maxRows);
    const zeroPending = new Uint32Array(maxSlots);
    const fourPending = new Uint32Array(maxSlots).fill(4);

    const shapeArgs = { ...SHAPE };
    const grid = (batch) => [batch, SHAPE.hv];
    const block = Math.min(SHAPE.dv, 1024);
    // The two-kernel decode's prep records (the layer keeps them in its scratch).
    const prepBuf = gpu.alloc(Math.max(pkg.decodePrepBytes(SHAPE, maxSlots), pkg.verifyPrepBytes(SHAPE, maxSlots)));
    const recurrent = (t, batch, mode, k, carried) => {
      const args = {
        qkvz: L.qkvz, ba: L.ba, y: L.y, slots: t.slots, rowStarts: t.rowStarts, seqLens: t.seqLens, state: L.state, convRing: L.convRing,
        convWeight: L.convWeight, aLog: L.aLog, dtBias: L.dtBias, normWeight: L.normWeight,
        stash: mode === 1 || carried ? L.stash : 0n, convStash: carried ? L.convStash : 0n, pending: carried ? L.pending : 0n,
      };
      if (mode === 0 && k === 1 && pkg.decodePath(SHAPE, batch, clusters) === 'two-kernel') {
        return pkg.launchTwoKernelDecode(gpu, kernels.twoKernel, SHAPE, stream, { ...args, prep: prepBuf, batch, ...shapeArgs, eps: EPS, yDtype: 0 });
      }
      if (mode === 1 && pkg.verifyPath(SHAPE, batch, k, clusters) === 'two-kernel') {
        return pkg.launchTwoKernelVerify(gpu, kernels.twoKernelVerify, SHAPE, stream, { ...args, prep: prepBuf, batch, k, ...shapeArgs, eps: EPS, yDtype: 0 });
      }
      const v = pkg.recurrentVariant(SHAPE, mode, k, batch, clusters);
      return gpu.launch(kernels.recurrentOf(v), pkg.recurrentLaunch(SHAPE, batch, stream, SHAPE.maxK, v, dev.multiprocessors), { ...args, mode, batch, k, ...shapeArgs, eps: EPS, yDtype: 0 });
    };
    const decodeAt = (batch) => pkg.decodePath(SHAPE, batch, clusters);
    log(`launched as the layer does: decode ${decodeAt(1)} at batch 1, ${decodeAt(32)} at 32, ${decodeAt(256)} at 256; verify ${pkg.verifyPath(SHAPE, 1, 4, clusters)} at batch 1, ${pkg.verifyPath(SHAPE, 32, 4, clusters)} at 32, ${pkg.verifyPath(SHAPE, 256, 4, clusters)} at 256; fold ${pkg.foldPath(SHAPE)}`);
    // The fold as the layer runs it (gdn-fold-launch.ts launchFold); only the kernel it picks is loaded.
    const foldKernels = {
      get state() {
        return kernels.foldState;
      },
      variants: new Proxy({}, { get: (_, v) => kernels.foldOf(v) }),
    };
    const fold = (t, batch, k) =>
      pkg.launchFold(gpu, foldKernels, SHAPE, stream, {
        qkvz: L.qkvz, slots: t.slots, seqLens: t.seqLens, naTab: t.naTab, state: L.state, convRing: L.convRing, stash: L.stash,
        batch, k, ...shapeArgs,
      }, dev.multiprocessors);

    /** State sets so that one pass over all of them is ≥ 4 × L2 (and the slots fit). */
    const row = (name, batch, kind, amount, t, ceiling, extra = {}) => {
      const perS = kind === 'bytes' ? amount / (t.ms * 1e-3) : amount / (t.ms * 1e-3);
      const ratio = ceiling ? perS / ceiling : undefined;
      const rec = { name, batch, kind, amount, ms: t.ms, minMs: t.min, maxMs: t.max, reps: t.reps, perS, ratio, ...extra };
      result.sections.push(rec);
      return rec;
    };

    const decodeMs = {};
    for (const batch of [1, 32, 256]) {
      await section(`decode batch ${batch}`, () => {
        const sets = setsFor(batch, dev.l2CacheBytes, maxSlots);
        const ts = stepTables(gpu, batch, sets, 1, 1000);
        try {
          const M = batch >= 32 ? 4 : 20;
          const eager = time((i) => {
            for (let m = 0; m < M; m++) recurrent(ts[(i * M + m) % sets], batch, 0, 1, false);
          }, { reps: 50, inner: M });
          const bytes = 2 * batch * stateSeqBytes;
          const rec = row('decode (eager)', batch, 'bytes', bytes, eager, copyBW, { sets, launchesPerRep: M, bar: '≥ 0.90 of copy at batch ≥ 32' });
          decodeMs[batch] = eager.ms;
          // CUDA graph of G launches over the sets, replayed.
          const G = Math.max(sets, M);
          gpu.beginCapture(stream);
          for (let m = 0; m < G; m++) recurrent(ts[m % sets], batch, 0, 1, false);
          const graph = gpu.endCapture(stream);
          const exec = gpu.instantiate(graph);
          gpu.destroyGraph(graph);
          try {
            const replay = time(() => gpu.launchGraph(exec, stream), { reps: 50, inner: G });
            row('decode (graph replay)', batch, 'bytes', bytes, replay, copyBW, { sets, launchesPerRep: G, bar: '≥ 0.90 of copy at batch ≥ 32' });
            decodeMs[batch] = Math.min(decodeMs[batch], replay.ms);
          } finally {
            gpu.destroyGraphExec(exec);
          }
          void rec;
        } finally {
          freeTables(gpu, ts);
        }
      });
    }

    for (const batch of [1, 32, 256]) {
      await section(`verify k=4 + fold batch ${batch}`, () => {
        const sets = setsFor(batch, dev.l2CacheBytes, maxSlots);
        const ts = stepTables(gpu, batch, sets, 4, 1000);
        try {
          const M = batch >= 32 ? 2 : 10;
          // The fold runs on another state set than the verify before it: in a real step every
          // layer verifies before any layer folds, so the fold finds none of its state in L2.
          const far = Math.ceil(sets / 2);
          const t = time((i) => {
            for (let m = 0; m < M; m++) {
              const at = i * M + m;
              recurrent(ts[at % sets], batch, 1, 4, false);
              fold(ts[(at + far) % sets], batch, 4);
            }
          }, { reps: 50, inner: M });
          const v = time((i) => {
            for (let m = 0; m < M; m++) recurrent(ts[(i * M + m) % sets], batch, 1, 4, false);
          }, { reps: 50, inner: M });
          const bytes = 3 * batch * stateSeqBytes;
          row('verify k=4 + fold', batch, 'bytes', bytes, t, copyBW, {
            sets, vsDecode: decodeMs[batch] ? t.ms / decodeMs[batch] : undefined, bar: '≤ 1.15 × decode (byte floor 1.5 ×)',
          });
          row('  verify k=4 alone', batch, 'bytes', batch * stateSeqBytes, v, copyBW, { sets, vsDecode: decodeMs[batch] ? v.ms / decodeMs[batch] : undefined });
        } finally {
          freeTables(gpu, ts);
        }
      });
    }

    for (const batch of [1, 32, 256]) {
      await section(`carried cycle batch ${batch}`, () => {
        const sets = setsFor(batch, dev.l2CacheBytes, maxSlots);
        const ts = stepTables(gpu, batch, sets, 4, 1000);
        try {
          // Fill every set's stash with real rows (pending 0), then cycle with pending = 4.
          gpu.upload(L.pending, zeroPending);
          for (const tt of ts) recurrent(tt, batch, 1, 4, true);
          gpu.synchronize(stream);
          gpu.upload(L.pending, fourPending);
          const M = batch >= 32 ? 4 : 20;
          const t = time((i) => {
            for (let m = 0; m < M; m++) recurrent(ts[(i * M + m) % sets], batch, 1, 4, true);
          }, { reps: 50, inner: M });
          const bytes = 2 * batch * stateSeqBytes;
          row('carried cycle (fold 4 + verify 4)', batch, 'bytes', bytes, t, copyBW, {
            sets, vsDecode: decodeMs[batch] ? t.ms / decodeMs[batch] : undefined, bar: '≤ 1.10 × decode',
          });
          gpu.upload(L.pending, zeroPending);
        } finally {
          freeTables(gpu, ts);
        }
      });
    }

    // ---- prefill: the chunked WY form ----
    const prefillShape = { ...SHAPE };
    const pk = {
      wy: fatbin(pkg.prefillWyKernel, 'gdn-chunk'),
      wyExact: fatbin(pkg.prefillWyExactKernel, 'gdn-chunk'),
      scan: fatbin(pkg.prefillScanKernel, 'gdn-chunk'),
      scanExact: fatbin(pkg.prefillScanExactKernel, 'gdn-chunk'),
      scanC4: fatbin(pkg.prefillScanC4Kernel, 'gdn-chunk'),
      scanC4Exact: fatbin(pkg.prefillScanC4ExactKernel, 'gdn-chunk'),
      norm: fatbin(pkg.prefillNormKernel, 'gdn-chunk'),
    };
    const scratchBytes = Math.max(pkg.prefillScratchLayout(prefillShape, maxRows, 1).bytes, pkg.prefillScratchLayout(prefillShape, maxRows, 2).bytes);
    const scratch = await (async () => {
      if (only && !only.some((o) => 'prefill'.startsWith(o) || o.startsWith('prefill'))) return 0n;
      return gpu.alloc(scratchBytes);
    })();
    const prefillTables = (lens) => {
      const n = lens.length;
      const t = { slots: gpu.alloc(Math.max(16, 4 * n)), seqLens: gpu.alloc(Math.max(16, 4 * n)), rowStarts: gpu.alloc(Math.max(16, 4 * (n + 1))) };
      gpu.upload(t.slots, Int32Array.from({ length: n }, (_, p) => p));
      gpu.upload(t.seqLens, new Int32Array(n));
      gpu.upload(t.rowStarts, Int32Array.from({ length: n + 1 }, (_, p) => lens.slice(0, p).reduce((a, b) => a + b, 0)));
      return t;
    };
    const prefillBufs = (t) => ({
      qkvz: L.qkvz, ba: L.ba, y: L.y, slots: t.slots, rowStarts: t.rowStarts, seqLens: t.seqLens, state: L.state, convRing: L.convRing,
      convWeight: L.convWeight, aLog: L.aLog, dtBias: L.dtBias, normWeight: L.normWeight, stash: 0n, convStash: 0n, pending: 0n, scratch,
    });
    const prefillArgs = (t, batch, rows, plan) => ({
      ...prefillBufs(t), batch, rows, ...SHAPE, eps: EPS, fuseNorm: plan.fuseNorm ? 1 : 0, chunk0: 0, chunkEnd: pkg.PREFILL_ALL_CHUNKS, o: L.y, yDtype: 0,
    });
    const prefillExtra = (rows, seqs, plan, label) => ({
      recurrentFlop: recurrentFlops(rows), flaMs: 1.08, bar: '≥ 0.40 of bf16 GEMM rate', build: label, fuseNorm: plan.fuseNorm,
      flopFormula: 'per value head and chunk of C = 64: 3·2C²d_k + 2·2C²d_v + 3·2C·d_k·d_v + C³/3',
      seqs,
    });
    const prefillCases = [
      { name: 'prefill 8192 rows', lens: [8192] },
      { name: 'prefill 4 × 2048 rows', lens: [2048, 2048, 2048, 2048] },
    ];
    for (const pc of prefillCases) {
      await section(pc.name, () => {
        const rows = pc.lens.reduce((a, b) => a + b, 0);
        const batch = pc.lens.length;
        const t1 = prefillTables(pc.lens);
        const flop = pc.lens.reduce((a, n) => a + chunkFlops(n), 0);
        try {
          const variants = [
            // As the layer plans them (prefillPlan's defaults: the fast build with the norm kernel,
            // the exact build with the norm fused where clusters run), then the A/B rows.
            { label: 'fast', exact: false, clusters },
            { label: 'exact', exact: true, clusters },
            // A/B: the fast build's pieces (the layer's default pipelines a batch of one where clusters
            // run, in pieces shrinking by PREFILL_PIECE_RATIO).
            { label: 'fast, one piece', exact: false, clusters, pieceChunks: 0 },
            { label: 'fast, pieces of 32 chunks', exact: false, clusters, pieceChunks: 32 },
            { label: 'fast, pieces shrinking by 0.3', exact: false, clusters, pieceRatio: 0.3 },
            { label: 'fast, pieces shrinking by 0.5', exact: false, clusters, pieceRatio: 0.5 },
            ...(clusters ? [{ label: 'fast, fused norm', exact: false, clusters, fuseNorm: true }] : []),
            // A/B: the scan in clusters of 4 CTAs of 4 warps per head (twice the SMs, twice the L2 reads).
            { label: 'fast, scan clusters of 4', exact: false, clusters, cluster: 4, fuseNorm: true },
            { label: 'fast, scan clusters of 4, norm kernel', exact: false, clusters, cluster: 4, fuseNorm: false },
            { label: 'exact, scan clusters of 4', exact: true, clusters, cluster: 4, fuseNorm: true },
          ];
          for (const v of variants) {
            const plan = pkg.prefillPlan(prefillShape, batch, rows, stream, {
              clusters: v.clusters, exact: v.exact, sms: dev.multiprocessors, ...(v.cluster ? { cluster: v.cluster } : {}), ...(v.fuseNorm !== undefined ? { fuseNorm: v.fuseNorm } : {}),
              ...(v.pieceChunks !== undefined ? { pieceChunks: v.pieceChunks } : {}), ...(v.pieceRatio !== undefined ? { pieceRatio: v.pieceRatio } : {}),
            });
            const run = () => pkg.launchPrefill(gpu, pk, prefillShape, prefillBufs(t1), batch, rows, EPS, plan);
            const t = time(run, { reps: 20, warmup: 2 });
            const rec = row(`${pc.name} (${v.label})`, batch, 'flop', flop, t, gemmRate, { ...prefillExtra(rows, pc.lens, plan, v.label), vsFla: t.ms / 1.08 });
            log(`${rec.name}: ${t.ms.toFixed(3)} ms, ${(rec.perS / 1e12).toFixed(1)} TFLOP/s, ${rec.ratio !== undefined ? (100 * rec.ratio).toFixed(1) : '?'} % of GEMM, ${(t.ms / 1.08).toFixed(2)} × FLA`);
            if (!v.label.includes('fused norm') && !v.label.includes('piece')) {
              // The two kernels alone (each launch repeated: the scratch stays valid).
              const args = prefillArgs(t1, batch, rows, plan);
              const wyK = v.exact ? pk.wyExact : pk.wy;
              const scanK = plan.cluster === 4 ? (v.exact ? pk.scanC4Exact : pk.scanC4) : v.exact ? pk.scanExact : pk.scan;
              const tw = time(() => gpu.launch(wyK, plan.wy, args), { reps: 20, warmup: 2 });
              const ts = time(() => gpu.launch(scanK, plan.scan, args), { reps: 20, warmup: 2 });
              const parts = pc.lens.reduce((a, n) => { const f = chunkFlopParts(n); return { wy: a.wy + f.wy, scan: a.scan + f.scan }; }, { wy: 0, scan: 0 });
              row(`  ${v.label}: gdn_prefill_wy alone`, batch, 'flop', parts.wy, tw, gemmRate, { build: v.label, part: 'wy' });
              row(`  ${v.label}: gdn_prefill_scan alone`, batch, 'flop', parts.scan, ts, gemmRate, { build: v.label, part: 'scan' });
              log(`  wy ${tw.ms.toFixed(3)} ms, scan ${ts.ms.toFixed(3)} ms`);
            }
          }
          if (pc.lens.length === 1) {
            const rt = time(() => gpu.launch(kernels.chunk, { grid: grid(batch), block, stream }, {
              qkvz: L.qkvz, ba: L.ba, y: L.y, slots: t1.slots, rowStarts: t1.rowStarts, seqLens: t1.seqLens, state: L.state, convRing: L.convRing,
              convWeight: L.convWeight, aLog: L.aLog, dtBias: L.dtBias, normWeight: L.normWeight, stash: 0n, convStash: 0n, pending: 0n,
              batch, ...shapeArgs, eps: EPS,
            }), { reps: 2, warmup: 1 });
            row(`${pc.name} (row-by-row oracle)`, batch, 'flop', flop, rt, gemmRate, { vsFla: rt.ms / 1.08, build: 'rowwise' });
          }
        } finally {
          Object.values(t1).forEach((p) => gpu.free(p));
        }
      });
    }
    if (scratch) gpu.free(scratch);
    freeAll(gpu, L);
    gpu.free(prepBuf);
  } catch (error) {
    result.errors.push(`setup: ${error?.stack ?? error}`);
    log(`!! kernel sections stopped: ${error?.message ?? error}`);
  }
  try {
    gpu.dispose();
  } catch (error) {
    result.errors.push(`teardown: ${error?.message ?? error}`);
  }

  // ---- table ----
  const fmtBytes = (b) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / MiB).toFixed(1)} MiB`);
  log('\nCeilings');
  if (copyBW) log(`  copy bandwidth  ${(copyBW / 1e12).toFixed(3)} TB/s (d2d, read + write)`);
  if (gemmRate) log(`  bf16 GEMM       ${(gemmRate / 1e12).toFixed(1)} TFLOP/s (8192³)`);
  log('\nGDN kernels (Qwen3-Next-80B layer shape; medians)');
  const head = ['section', 'batch', 'floor', 'time', 'achieved', 'ratio', 'vs decode', 'bar'];
  const lines = result.sections.map((s) => [
    s.name,
    String(s.batch),
    s.kind === 'bytes' ? fmtBytes(s.amount) : `${(s.amount / 1e9).toFixed(1)} GFLOP`,
    s.ms >= 1 ? `${s.ms.toFixed(3)} ms` : `${(s.ms * 1e3).toFixed(2)} µs`,
    s.kind === 'bytes' ? `${(s.perS / 1e12).toFixed(3)} TB/s` : `${(s.perS / 1e12).toFixed(1)} TFLOP/s`,
    s.ratio !== undefined ? `${(100 * s.ratio).toFixed(1)} %` : '–',
    s.vsDecode !== undefined ? `${s.vsDecode.toFixed(2)} ×` : s.vsFla !== undefined ? `${s.vsFla.toFixed(2)} × FLA time` : '',
    s.bar ?? '',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const fmt = (cells) => cells.map((c, i) => (i === 0 || i === 7 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  log(fmt(head));
  for (const l of lines) log(fmt(l));
  if (result.errors.length) log(`\n${result.errors.length} section(s) failed:\n  ${result.errors.map((e) => e.split('\n')[0]).join('\n  ')}`);
  result.seconds = (Date.now() - started) / 1000;
  log(`\ntotal ${result.seconds.toFixed(1)} s`);
  writeResult(result);
}

/** FLOPs of the chunked (WY) form, C = 64, per head: KKᵀ, W, QKᵀ (2C²d_k each), U and the intra-chunk output (2C²d_v each), WS, QS and the state update (2C·d_k·d_v each), the triangular solve (C³/3). */
function chunkFlops(rows, C = 64) {
  const { hv, dk, dv } = SHAPE;
  const chunks = Math.ceil(rows / C);
  const perChunk = 3 * 2 * C * C * dk + 2 * 2 * C * C * dv + 3 * 2 * C * dk * dv + (C * C * C) / 3;
  return hv * chunks * perChunk;
}

/** The same FLOPs split by kernel: gdn_prefill_wy (KKᵀ, QKᵀ, W, U, the solve), gdn_prefill_scan (WS, QS, the state update, the intra-chunk output). */
function chunkFlopParts(rows, C = 64) {
  const { hv, dk, dv } = SHAPE;
  const chunks = Math.ceil(rows / C);
  return {
    wy: hv * chunks * (3 * 2 * C * C * dk + 2 * C * C * dv + (C * C * C) / 3),
    scan: hv * chunks * (2 * C * C * dv + 3 * 2 * C * dk * dv),
  };
}

/** FLOPs of the row-by-row recurrence: per row and head Sᵀk, Sᵀq (2·d_k·d_v each), decay and update (2·d_k·d_v). */
function recurrentFlops(rows) {
  const { hv, dk, dv } = SHAPE;
  return hv * rows * 6 * dk * dv;
}

function findNvcc() {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/local/cuda/bin']) if (dir && existsSync(join(dir, 'nvcc'))) return join(dir, 'nvcc');
  return undefined;
}

/** The declaration, with its fatbin found: its own path, dist/kernels/, or compiled here with nvcc. */
function withFatbin(k, file, defineKernelModule) {
  const dir = process.env.METRALE_GDN_FATBIN_DIR;
  if (dir && existsSync(join(dir, `${file}.fatbin`))) {
    return Object.freeze({ ...k, cuda: { module: defineKernelModule(k.cuda.module.name, join(dir, `${file}.fatbin`)), symbol: k.cuda.symbol } });
  }
  if (existsSync(k.cuda.module.fatbin)) return k;
  let path = join(pkgDir, 'dist', 'kernels', `${file}.fatbin`);
  if (!existsSync(path)) {
    const nvcc = findNvcc();
    if (!nvcc) throw new Error(`${k.cuda.module.fatbin} is missing and there is no nvcc: build @metrale/layer-gdn first`);
    const dir = join(tmpdir(), `metrale-gdn-bench-${process.pid}`);
    mkdirSync(dir, { recursive: true });
    path = join(dir, `${file}.fatbin`);
    execFileSync(nvcc, ['-fatbin', '-O3', '-std=c++17', '-gencode=arch=compute_80,code=sm_80', '-gencode=arch=compute_90a,code=sm_90a',
      '-gencode=arch=compute_90,code=compute_90', '-o', path, join(pkgDir, 'kernels', `${file}.cu`)], { stdio: 'inherit' });
  }
  return Object.freeze({ ...k, cuda: { module: defineKernelModule(k.cuda.module.name, path), symbol: k.cuda.symbol } });
}

main().catch((error) => {
  console.error(`gdn bench failed: ${error?.stack ?? error}`);
  process.exitCode = 1;
});
