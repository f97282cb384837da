#!/usr/bin/env node
// GDN kernel benchmark on CUDA, at the Qwen3-Next-80B layer shape (H_k 16, H_v 32, d_k = d_v = 128,
// conv K 4; f32 state of 2 MiB per sequence). Run: `node bench/gdn.bench.mjs` in packages/layer-gdn
// (`npm run bench:gpu` at the root runs it too). Needs node and the workspace built
// (@metrale/cuda-backend, this package's dist and its fatbins, or nvcc to build them); without
// CUDA it says why and exits 0.
//
// Every figure is a ratio to a ceiling or a peer measured in this run, on this GPU:
//   copy, GEMM   cuda-backend's measureCeilings: device-to-device copy (1 GiB, read + write) and
//                the bf16 GEMM rate (8192³)
//   rmw, read    the bare state passes (bench/kernels/gdn-state-ceilings.cu): every head of the
//                batch's slots read and written back in place, or only read, in the decode state
//                kernel's layout, with the same slot sets and CUDA-graph replay as the kernels
//   fla          flash-linear-attention's chunked prefill (bench/gdn-fla-peer.py, run after the
//                kernel sections; fla from PYTHONPATH or the repository's .peers/). Not measured
//                (no python, torch, fla or GPU there): the bench says so and gives no ratio.
// Then, with device events around each repetition, warm-up first, median of the repetitions,
// random data, state sets rotated so that the bytes touched per repetition exceed the L2:
//   decode      a decode step (k = 1) as the layer launches it (gdn-decode-launch.ts decodePath),
//               batch 1 / 32 / 256, eager and CUDA-graph replay; ratio: rmw time / its time.
//               Bar (docs/performance.md): ≥ 0.90 at batch 32 and 256.
//   verify+fold a write-on-accept verify of k = 4 as the layer launches it (verifyPath), then the
//               fold of all 4 rows (launchFold; on another state set, as in a real step where all
//               layers verify before any folds); ratio: its floor, read + rmw time, / its time.
//               Bar: ≥ 0.80 at batch 256.
//   carried     one carried speculative cycle: the next verify (carried, k = 4, pending = 4 on
//               every slot) folds the accepted rows into S, writes S once and scores its 4 new
//               rows; ratio: rmw time / its time, and × the decode step. Bar: ≤ 1.15 × decode at 256.
//   prefill     the chunked WY prefill as the layer plans it (prefillPlan), one sequence of 8192
//               rows from an empty state and 4 sequences of 2048: the fast build (bf16 operands,
//               what the layer runs above PREFILL_EXACT_MAX_ROWS rows) and the exact one, the
//               WY and scan kernels alone, A/B rows (one piece, other piece cuts, the fused
//               norm); ratio: achieved FLOP rate / GEMM rate, FLOPs of the chunked form with
//               C = 64 (chunkFlops), and × FLA's time. Bar: ≤ 0.5 × FLA at 8192 rows.
// METRALE_GDN_BENCH_ONLY=prefill runs the ceilings and the prefill sections only (a comma-separated
// list of section name prefixes: decode,verify,carried,prefill). METRALE_GDN_FATBIN_DIR=dir:
// fatbins from there (dir/<file>.fatbin) before dist/kernels. A failing section is reported and
// the others still run. Results print as a table and go to $METRALE_BENCH_OUT (default
// bench-results/gdn.json) as JSON.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { EPS, MiB, SHAPE, allocLayer, freeAll, freeTables, setsFor, stateSeqBytes, stepTables } from './gdn-bench-layer.mjs';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const rootDir = resolve(pkgDir, '..', '..');
const benchDir = join(pkgDir, 'bench');
const outPath = resolve(pkgDir, process.env.METRALE_BENCH_OUT ?? 'bench-results/gdn.json');
const started = Date.now();
const log = (...a) => console.log(...a);

/** The bars of docs/performance.md, each as what a row's figure must reach. */
const BARS = {
  decode: { text: '≥ 0.90 of rmw at batch 32, 256', batches: [32, 256], meets: (r) => r.ofCeiling >= 0.9 },
  verifyFold: { text: '≥ 0.80 of floor at batch 256', batches: [256], meets: (r) => r.ofCeiling >= 0.8 },
  carried: { text: '≤ 1.15 × decode at batch 256', batches: [256], meets: (r) => r.vsDecode <= 1.15 },
  prefill: { text: '≤ 0.5 × FLA at 8192 rows', meets: (r) => r.vsPeer <= 0.5 },
};

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
      const m = await import(pathToFileURL(resolve(pkgDir, hook)).href);
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
  const { defineKernel, defineKernelModule } = await import('@metrale/core');
  const fatbin = hook ? (k) => k : (k) => withFatbin(k, pkgDir, defineKernelModule);
  // The entry points the layer launches, each loaded on first use (a section that does not run needs no fatbin).
  const loaded = new Map();
  const once = (key, make) => (loaded.has(key) ? loaded.get(key) : (loaded.set(key, make()), loaded.get(key)));
  const kernels = {
    recurrentOf: (v) => once(`r.${v}`, () => fatbin(pkg.recurrentVariantKernels[v])),
    foldOf: (v) => once(`f.${v}`, () => fatbin(pkg.foldVariantKernels[v])),
    get foldState() {
      return once('fold-state', () => fatbin(pkg.foldStateKernel));
    },
    get twoKernel() {
      return once('two-kernel', () => ({ prep: fatbin(pkg.decodePrepKernel), state: fatbin(pkg.decodeStateKernel), statePlain: fatbin(pkg.decodeStatePlainKernel) }));
    },
    get twoKernelVerify() {
      return once('two-kernel-verify', () => ({ prep: fatbin(pkg.verifyPrepKernel), state: fatbin(pkg.verifyStateKernel) }));
    },
    get ceilings() {
      return once('ceilings', () => ceilingKernels(defineKernel, defineKernelModule, !hook));
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
    bars: Object.fromEntries(Object.entries(BARS).map(([k, b]) => [k, b.text])),
    ceilings: { state: {} },
    sections: [],
    errors: [],
  };
  const stream = gpu.defaultStream;
  // sm_90+: the layer runs clusters (split decode, the prefill's fused norm).
  const clusters = pkg.runsClusters(gpu);
  const { timeOnDevice, measureCeilings } = await import('@metrale/cuda-backend');
  const time = (fn, { reps = 50, warmup = 3, inner = 1 } = {}) => timeOnDevice(gpu, fn, { stream, reps, warmup, inner });

  const only = process.env.METRALE_GDN_BENCH_ONLY?.split(',').filter(Boolean);
  const wanted = (name) => !only || only.some((o) => name.startsWith(o));
  const section = async (name, body, run = wanted(name)) => {
    if (!run) return;
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
    result.ceilings = { ...result.ceilings, copyBytesPerS: c.copy?.bytesPerS, copy: c.copy, gemmFlopPerS: c.gemm?.flopPerS, gemm: c.gemm };
    result.errors.push(...c.errors);
  }
  const copyBW = result.ceilings.copyBytesPerS;
  const gemmRate = result.ceilings.gemmFlopPerS;

  const row = (name, batch, kind, amount, t, extra = {}) => {
    const perS = amount / (t.ms * 1e-3);
    const rec = { name, batch, kind, amount, ms: t.ms, minMs: t.min, maxMs: t.max, reps: t.reps, perS, ...extra };
    result.sections.push(rec);
    return rec;
  };
  /** `rec` against its bar where the bar covers its batch. */
  const judge = (rec, bar) => {
    if (bar.batches && !bar.batches.includes(rec.batch)) return rec;
    rec.bar = bar.text;
    rec.meetsBar = bar.meets(rec);
    return rec;
  };

  try {
    // ---- layer buffers for up to 256 sequence slots ----
    const maxSlots = 256;
    const maxRows = 8192;
    const L = allocLayer(gpu, maxSlots, maxRows);
    const zeroPending = new Uint32Array(maxSlots);
    const fourPending = new Uint32Array(maxSlots).fill(4);
    const shapeArgs = { ...SHAPE };
    // The two-kernel decode's and verify's prep records (the layer keeps them in its scratch).
    const prepBuf = gpu.alloc(Math.max(pkg.decodePrepBytes(SHAPE, maxSlots), pkg.verifyPrepBytes(SHAPE, maxSlots)));
    const ceilingOut = gpu.alloc(4 * maxSlots * SHAPE.hv);
    const recurrent = (t, batch, mode, k, carried) => {
      const args = {
        qkvz: L.qkvz, y: L.y, slots: t.slots, rowStarts: t.rowStarts, seqLens: t.seqLens, state: L.state, convRing: L.convRing,
        convWeight: L.convWeight, aLog: L.aLog, dtBias: L.dtBias, normWeight: L.normWeight,
        stash: mode === 1 || carried ? L.stash : 0n, convStash: carried ? L.convStash : 0n, pending: carried ? L.pending : 0n,
      };
      if (mode === 0 && k === 1 && pkg.decodePath(SHAPE, batch, clusters) === 'two-kernel') {
        return pkg.launchTwoKernelDecode(gpu, kernels.twoKernel, SHAPE, stream, { ...args, prep: prepBuf, batch, ...shapeArgs, eps: EPS, yDtype: 0, ...pkg.NO_GATE_ROWS });
      }
      if (mode === 1 && pkg.verifyPath(SHAPE, batch, k, clusters) === 'two-kernel') {
        return pkg.launchTwoKernelVerify(gpu, kernels.twoKernelVerify, SHAPE, stream, { ...args, prep: prepBuf, batch, k, ...shapeArgs, eps: EPS, yDtype: 0 });
      }
      const v = pkg.recurrentVariant(SHAPE, mode, k, batch, clusters);
      return gpu.launch(kernels.recurrentOf(v), pkg.recurrentLaunch(SHAPE, batch, stream, SHAPE.maxK, v), { ...args, mode, batch, k, ...shapeArgs, eps: EPS, yDtype: 0 });
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
      });
    /** Device time per launch of G launches over the sets, captured in a CUDA graph and replayed. */
    const replayed = (G, launchOne) => {
      gpu.beginCapture(stream);
      for (let m = 0; m < G; m++) launchOne(m);
      const graph = gpu.endCapture(stream);
      const exec = gpu.instantiate(graph);
      gpu.destroyGraph(graph);
      try {
        return time(() => gpu.launchGraph(exec, stream), { reps: 50, inner: G });
      } finally {
        gpu.destroyGraphExec(exec);
      }
    };

    // ---- the state-pass ceilings of each batch, as the kernels' sections time them ----
    const ceilingMs = {};
    for (const batch of [1, 32, 256]) {
      await section(`ceilings batch ${batch}`, () => {
        const sets = setsFor(batch, dev.l2CacheBytes, maxSlots);
        const ts = stepTables(gpu, batch, sets, 1, 1000);
        try {
          const { rmw, read } = kernels.ceilings;
          const cfg = { grid: [batch, SHAPE.hv], block: 256, stream };
          const G = Math.max(sets, batch >= 32 ? 4 : 20);
          const tRmw = replayed(G, (m) => gpu.launch(rmw, cfg, { state: L.state, slots: ts[m % sets].slots, hv: SHAPE.hv }));
          const tRead = replayed(G, (m) => gpu.launch(read, cfg, { state: L.state, slots: ts[m % sets].slots, hv: SHAPE.hv, out: ceilingOut }));
          ceilingMs[batch] = { rmw: tRmw.ms, read: tRead.ms };
          result.ceilings.state[batch] = { rmwMs: tRmw.ms, readMs: tRead.ms };
          row('ceiling: state rmw', batch, 'bytes', 2 * batch * stateSeqBytes, tRmw, { ofCopy: (2 * batch * stateSeqBytes) / (tRmw.ms * 1e-3) / copyBW });
          row('ceiling: state read', batch, 'bytes', batch * stateSeqBytes, tRead, { ofCopy: (batch * stateSeqBytes) / (tRead.ms * 1e-3) / copyBW });
        } finally {
          freeTables(gpu, ts);
        }
      }, ['decode', 'verify', 'carried'].some(wanted));
    }
    const ofRmw = (batch, ms) => (ceilingMs[batch] ? ceilingMs[batch].rmw / ms : undefined);

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
          judge(row('decode (eager)', batch, 'bytes', bytes, eager, { sets, ofCeiling: ofRmw(batch, eager.ms), ceiling: 'rmw' }), BARS.decode);
          const replay = replayed(Math.max(sets, M), (m) => recurrent(ts[m % sets], batch, 0, 1, false));
          judge(row('decode (graph replay)', batch, 'bytes', bytes, replay, { sets, ofCeiling: ofRmw(batch, replay.ms), ceiling: 'rmw' }), BARS.decode);
          decodeMs[batch] = Math.min(eager.ms, replay.ms);
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
          const c = ceilingMs[batch];
          judge(row('verify k=4 + fold', batch, 'bytes', 3 * batch * stateSeqBytes, t, {
            sets, ofCeiling: c ? (c.read + c.rmw) / t.ms : undefined, ceiling: 'read + rmw', vsDecode: decodeMs[batch] ? t.ms / decodeMs[batch] : undefined,
          }), BARS.verifyFold);
          row('  verify k=4 alone', batch, 'bytes', batch * stateSeqBytes, v, { sets, ofCeiling: c ? c.read / v.ms : undefined, ceiling: 'read', vsDecode: decodeMs[batch] ? v.ms / decodeMs[batch] : undefined });
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
          judge(row('carried cycle (fold 4 + verify 4)', batch, 'bytes', 2 * batch * stateSeqBytes, t, {
            sets, ofCeiling: ofRmw(batch, t.ms), ceiling: 'rmw', vsDecode: decodeMs[batch] ? t.ms / decodeMs[batch] : undefined,
          }), BARS.carried);
          gpu.upload(L.pending, zeroPending);
        } finally {
          freeTables(gpu, ts);
        }
      });
    }

    // ---- prefill: the chunked WY form ----
    const prefillShape = { ...SHAPE };
    const pk = Object.fromEntries(Object.entries(pkg.prefillKernels).map(([name, k]) => [name, fatbin(k)]));
    const scratchBytes = Math.max(pkg.prefillScratchLayout(prefillShape, maxRows, 1).bytes, pkg.prefillScratchLayout(prefillShape, maxRows, 2).bytes);
    const scratch = wanted('prefill') ? gpu.alloc(scratchBytes) : 0n;
    const prefillTables = (lens) => {
      const n = lens.length;
      const t = { slots: gpu.alloc(Math.max(16, 4 * n)), seqLens: gpu.alloc(Math.max(16, 4 * n)), rowStarts: gpu.alloc(Math.max(16, 4 * (n + 1))) };
      gpu.upload(t.slots, Int32Array.from({ length: n }, (_, p) => p));
      gpu.upload(t.seqLens, new Int32Array(n));
      gpu.upload(t.rowStarts, Int32Array.from({ length: n + 1 }, (_, p) => lens.slice(0, p).reduce((a, b) => a + b, 0)));
      return t;
    };
    const prefillBufs = (t) => ({
      qkvz: L.qkvz, y: L.y, slots: t.slots, rowStarts: t.rowStarts, seqLens: t.seqLens, state: L.state, convRing: L.convRing,
      convWeight: L.convWeight, aLog: L.aLog, dtBias: L.dtBias, normWeight: L.normWeight, stash: 0n, convStash: 0n, pending: 0n, scratch,
    });
    const prefillArgs = (t, batch, rows, plan) => ({
      ...prefillBufs(t), batch, rows, ...SHAPE, eps: EPS, fuseNorm: plan.fuseNorm ? 1 : 0, chunk0: 0, chunkEnd: pkg.PREFILL_ALL_CHUNKS, o: L.y, yDtype: 0,
    });
    for (const pc of PREFILL_CASES) {
      await section(pc.name, () => {
        const rows = pc.lens.reduce((a, b) => a + b, 0);
        const batch = pc.lens.length;
        const t1 = prefillTables(pc.lens);
        const flop = pc.lens.reduce((a, n) => a + chunkFlops(n), 0);
        // The build the layer runs a step of this many rows with.
        const layerBuild = rows <= pkg.PREFILL_EXACT_MAX_ROWS ? 'exact' : 'fast';
        try {
          const variants = [
            // prefillPlan's defaults (the fast build with the norm kernel, the exact build with the
            // norm fused where clusters run), then the A/B rows.
            { label: 'fast', planned: true, exact: false },
            { label: 'exact', planned: true, exact: true },
            // A/B: the fast build's pieces (the layer pipelines a batch of one where clusters run,
            // in pieces shrinking by PREFILL_PIECE_RATIO).
            { label: 'fast, one piece', exact: false, pieceChunks: 0 },
            { label: 'fast, pieces of 32 chunks', exact: false, pieceChunks: 32 },
            { label: 'fast, pieces shrinking by 0.3', exact: false, pieceRatio: 0.3 },
            { label: 'fast, pieces shrinking by 0.5', exact: false, pieceRatio: 0.5 },
            ...(clusters ? [{ label: 'fast, fused norm', exact: false, fuseNorm: true }] : []),
          ];
          for (const v of variants) {
            const plan = pkg.prefillPlan(prefillShape, batch, rows, stream, {
              clusters, exact: v.exact, sms: dev.multiprocessors, ...(v.fuseNorm !== undefined ? { fuseNorm: v.fuseNorm } : {}),
              ...(v.pieceChunks !== undefined ? { pieceChunks: v.pieceChunks } : {}), ...(v.pieceRatio !== undefined ? { pieceRatio: v.pieceRatio } : {}),
            });
            const run = () => pkg.launchPrefill(gpu, pk, prefillShape, prefillBufs(t1), batch, rows, EPS, plan);
            const t = time(run, { reps: 20, warmup: 2 });
            const rec = row(`${pc.name} (${v.label})`, batch, 'flop', flop, t, {
              ofCeiling: gemmRate ? flop / (t.ms * 1e-3) / gemmRate : undefined, ceiling: 'GEMM', case: pc.name, layers: v.planned === true && v.label === layerBuild,
              build: v.label, fuseNorm: plan.fuseNorm,
              flopFormula: 'per value head and chunk of C = 64: 3·2C²d_k + 2·2C²d_v + 3·2C·d_k·d_v + C³/3', seqs: pc.lens,
            });
            log(`${rec.name}: ${t.ms.toFixed(3)} ms, ${(rec.perS / 1e12).toFixed(1)} TFLOP/s, ${rec.ofCeiling !== undefined ? (100 * rec.ofCeiling).toFixed(1) : '?'} % of GEMM`);
            if (v.planned) {
              // The two kernels alone (each launch repeated: the scratch stays valid).
              const args = prefillArgs(t1, batch, rows, plan);
              const tw = time(() => gpu.launch(v.exact ? pk.wyExact : pk.wy, plan.wy, args), { reps: 20, warmup: 2 });
              const tsc = time(() => gpu.launch(v.exact ? pk.scanExact : pk.scan, plan.scan, args), { reps: 20, warmup: 2 });
              const parts = pc.lens.reduce((a, n) => { const f = chunkFlopParts(n); return { wy: a.wy + f.wy, scan: a.scan + f.scan }; }, { wy: 0, scan: 0 });
              row(`  ${v.label}: gdn_prefill_wy alone`, batch, 'flop', parts.wy, tw, { ofCeiling: gemmRate ? parts.wy / (tw.ms * 1e-3) / gemmRate : undefined, ceiling: 'GEMM' });
              row(`  ${v.label}: gdn_prefill_scan alone`, batch, 'flop', parts.scan, tsc, { ofCeiling: gemmRate ? parts.scan / (tsc.ms * 1e-3) / gemmRate : undefined, ceiling: 'GEMM' });
              log(`  wy ${tw.ms.toFixed(3)} ms, scan ${tsc.ms.toFixed(3)} ms`);
            }
          }
        } finally {
          Object.values(t1).forEach((p) => gpu.free(p));
        }
      });
    }
    if (scratch) gpu.free(scratch);
    freeAll(gpu, L);
    gpu.free(prepBuf);
    gpu.free(ceilingOut);
  } catch (error) {
    result.errors.push(`setup: ${error?.stack ?? error}`);
    log(`!! kernel sections stopped: ${error?.message ?? error}`);
  }
  try {
    gpu.dispose();
  } catch (error) {
    result.errors.push(`teardown: ${error?.message ?? error}`);
  }

  // ---- the peer, on the same GPU after ours: flash-linear-attention's chunked prefill ----
  if (wanted('prefill') && !hook) {
    result.peer = measurePeer(PREFILL_CASES);
    log(result.peer.measured ? `peer: fla ${result.peer.fla} (torch ${result.peer.torch})` : `peer not measured: ${result.peer.reason}`);
    for (const rec of result.sections) {
      const peerCase = result.peer.cases?.find((c) => c.name === rec.case);
      if (!peerCase) continue;
      rec.peerMs = peerCase.ms;
      rec.vsPeer = rec.ms / peerCase.ms;
      if (rec.layers && rec.case === PREFILL_CASES[0].name) judge(rec, BARS.prefill);
    }
  }

  // ---- table ----
  const fmtBytes = (b) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / MiB).toFixed(1)} MiB`);
  log('\nCeilings');
  if (copyBW) log(`  copy bandwidth  ${(copyBW / 1e12).toFixed(3)} TB/s (d2d, read + write)`);
  if (gemmRate) log(`  bf16 GEMM       ${(gemmRate / 1e12).toFixed(1)} TFLOP/s (8192³)`);
  log('\nGDN kernels (Qwen3-Next-80B layer shape; medians; "of ceiling": the ceiling time / the row\'s time, or its rate / the GEMM rate)');
  const head = ['section', 'batch', 'floor', 'time', 'achieved', 'of ceiling', 'vs', 'bar'];
  const lines = result.sections.map((s) => [
    s.name,
    String(s.batch),
    s.kind === 'bytes' ? fmtBytes(s.amount) : `${(s.amount / 1e9).toFixed(1)} GFLOP`,
    s.ms >= 1 ? `${s.ms.toFixed(3)} ms` : `${(s.ms * 1e3).toFixed(2)} µs`,
    s.kind === 'bytes' ? `${(s.perS / 1e12).toFixed(3)} TB/s` : `${(s.perS / 1e12).toFixed(1)} TFLOP/s`,
    s.ofCeiling !== undefined ? `${(100 * s.ofCeiling).toFixed(1)} % ${s.ceiling}` : s.ofCopy !== undefined ? `${(100 * s.ofCopy).toFixed(1)} % copy` : '–',
    s.vsPeer !== undefined ? `${s.vsPeer.toFixed(2)} × FLA` : s.vsDecode !== undefined ? `${s.vsDecode.toFixed(2)} × decode` : '',
    s.bar ? `${s.meetsBar ? 'meets' : 'misses'} ${s.bar}` : '',
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

const PREFILL_CASES = [
  { name: 'prefill 8192 rows', lens: [8192] },
  { name: 'prefill 4 × 2048 rows', lens: [2048, 2048, 2048, 2048] },
];

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

/** bench/gdn-fla-peer.py on the cases: its JSON, or why it gave none. */
function measurePeer(cases) {
  const peers = process.env.METRALE_PEERS_DIR ?? join(rootDir, '.peers');
  const env = { ...process.env, PYTHONPATH: [existsSync(peers) ? peers : undefined, process.env.PYTHONPATH].filter(Boolean).join(delimiter) };
  const r = spawnSync(process.env.PYTHON ?? 'python3', [join(benchDir, 'gdn-fla-peer.py'), JSON.stringify(cases)], { env, encoding: 'utf8', timeout: 600_000 });
  if (r.error) return { peer: 'fla', measured: false, reason: `python3 could not run (${r.error.message})` };
  const last = (r.stdout ?? '').trim().split('\n').at(-1) ?? '';
  try {
    return JSON.parse(last);
  } catch {
    return { peer: 'fla', measured: false, reason: `gdn-fla-peer.py exited ${r.status}: ${(r.stderr ?? '').trim().split('\n').slice(-3).join(' | ')}` };
  }
}

/** The state-pass ceiling kernels (bench/kernels/gdn-state-ceilings.cu), built with the bench's own kernels when missing. */
function ceilingKernels(defineKernel, defineKernelModule, real) {
  const path = join(benchDir, 'dist', 'kernels', 'gdn-state-ceilings.fatbin');
  if (real && !existsSync(path)) {
    const tool = join(pkgDir, 'node_modules', '.bin', 'metrale-build-kernels');
    const r = spawnSync(tool, ['--package-dir', benchDir], { encoding: 'utf8' });
    if (!existsSync(path)) throw new Error(`${path} is missing and metrale-build-kernels --package-dir bench did not build it: ${(r.stdout ?? '').trim()} ${(r.stderr ?? '').trim()}`);
  }
  const module = defineKernelModule('gdn-state-ceilings', path);
  return {
    rmw: defineKernel({ name: 'gdn-bench.ceiling-rmw', params: { state: 'ptr', slots: 'ptr', hv: 'i32' }, cuda: { module, symbol: 'gdn_ceiling_rmw' } }),
    read: defineKernel({ name: 'gdn-bench.ceiling-read', params: { state: 'ptr', slots: 'ptr', hv: 'i32', out: 'ptr' }, cuda: { module, symbol: 'gdn_ceiling_read' } }),
  };
}

/** The declaration with its fatbin: METRALE_GDN_FATBIN_DIR's, else the package's dist/kernels (built by metrale-build-kernels when missing). */
function withFatbin(k, dir, defineKernelModule) {
  const file = `${k.cuda.module.name}.fatbin`;
  const override = process.env.METRALE_GDN_FATBIN_DIR;
  const path = override && existsSync(join(override, file)) ? join(override, file) : join(dir, 'dist', 'kernels', file);
  if (!existsSync(path)) {
    const tool = join(dir, 'node_modules', '.bin', 'metrale-build-kernels');
    const r = spawnSync(tool, ['--package-dir', dir], { encoding: 'utf8' });
    if (!existsSync(path)) throw new Error(`${path} is missing and metrale-build-kernels did not build it (nvcc on the PATH?): ${(r.stdout ?? '').trim()} ${(r.stderr ?? '').trim()}`);
  }
  return Object.freeze({ ...k, cuda: { module: defineKernelModule(k.cuda.module.name, path), symbol: k.cuda.symbol } });
}

main().catch((error) => {
  console.error(`gdn bench failed: ${error?.stack ?? error}`);
  process.exitCode = 1;
});
