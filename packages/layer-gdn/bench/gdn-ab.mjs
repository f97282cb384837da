#!/usr/bin/env node
// A/B of the gdn.recurrent / gdn.fold variants (kernels/gdn-recurrent.cu, gdn-fold.cu entry points
// _smem, _pipe, _split, _general, the two-kernel decode and verify, the register fold, plus builds
// with other -D knobs) at the Qwen3-Next-80B layer shape (H_k 16, H_v 32, d_k = d_v = 128, conv K
// 4, maxK 4; f32 state 2 MiB per sequence).
// Run: node bench/gdn-ab.mjs (bench/gdn-tune.sh runs it): needs node, the workspace's
// @metrale/core, @metrale/cuda-backend and this package built (dist: the launch shapes), and fatbins:
//   METRALE_GDN_AB_BUILDS="tag=dir,tag2=dir2"  each dir holds any of gdn-recurrent, gdn-fold, gdn-decode and
//                                               gdn-verify .fatbin (the package's dist/kernels for the rest)
//   METRALE_GDN_AB_ROWS="tag:variant,..."      the rows of the table (default: every variant of every build)
//   METRALE_GDN_AB_PIPE_NB="tag=4,..."         builds whose pipe kernels were compiled with another
//                                               GDN_PIPE_NB than the package's PIPE_STAGES
//   METRALE_GDN_AB_DECODE_BATCHES="1,8,32"      the batches of the decode and carried decode sections (default 1,32,256)
//   METRALE_GDN_AB_ONLY="decode"                the sections to run (default all)
//   METRALE_BENCH_OUT                           the JSON (default bench-results/gdn-ab.json)
//   METRALE_GDN_AB_NCU=1                        one launch of each kernel per row and batch, no timing
//                                               (for ncu --kernel-name regex:gdn_)
// Per row, with device events around CUDA-graph replays of launches over rotating state sets
// (together ≥ 4 × L2), median of 30 repetitions, random data:
//   decode        mode 0, k 1                              floor: read + write S
//   verify        mode 1 (write-on-accept), k 4            floor: read S
//   fold          gdn_fold of 4 accepted rows              floor: read + write S
//   verify+fold   the two, the fold on another state set    floor: 1.5 × decode's bytes
//   carried       mode 1 carried, k 4, pending 4           floor: read + write S (= decode)
//   carried dec.  mode 0 carried, k 1, pending 2           floor: read + write S
// A `tag:two` row runs the two-kernel decode (kernels/gdn-decode.cu: gdn_decode_prep, then
// gdn_decode_state) for decode steps, the two-kernel verify (kernels/gdn-verify.cu) for verify
// steps of k ≤ 4 when the build has gdn-verify.fatbin, the register fold (gdn-decode.cu
// gdn_fold_state) for folds, and the smem entry points for the rest (needs gdn-decode.fatbin).
// METRALE_GDN_AB_FOLD_BATCHES="1,8,32,256" sets the fold section's batches (default 32,256). A
// `tag:two-serial` row runs the same kernels with the state kernels launched in stream order (no
// early start), for the early start's A/B; a `tag:two-general` row runs plain decode steps through
// gdn_decode_state instead of gdn_decode_state_plain. METRALE_GDN_AB_VERIFY_BATCHES="1,8,32" sets the verify and carried
// sections' batches (default 32,256 and 1,32,256).
// A pipe or split row runs what the layer would: that variant for decode steps (mode 0, k = 1), the
// same build's smem entry points for the rest (verify, fold). Parameters, threads and shared memory
// come from the package's dist (gdn-kernels.ts, gdn-launch.ts). Variants the layer no longer ships
// (stream, persist, the pipe and split folds, the scan in clusters of 4) and what they measured:
// KERNELS.md, "Removed variants".
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = resolve(pkgDir, process.env.METRALE_BENCH_OUT ?? 'bench-results/gdn-ab.json');
const NCU = process.env.METRALE_GDN_AB_NCU === '1';
const log = (...a) => console.log(...a);

import { EPS, SHAPE, allocLayer, freeAll, freeTables, setsFor, stateSeqBytes, stepTables } from './gdn-bench-layer.mjs';

async function main() {
  let cb;
  const hook = process.env.METRALE_GDN_DEVICE_MODULE; // development only: a stand-in device module
  if (hook) {
    const m = await import(hook);
    cb = { probe: () => ({ available: true, reason: m.reason ?? hook }), CudaBackend: { create: () => m.createDevice() } };
  } else cb = await import('@metrale/cuda-backend');
  const found = cb.probe();
  if (!found.available) {
    log(`gdn A/B: skipped: no CUDA (${found.reason})`);
    return;
  }
  const { defineKernelModule } = await import('@metrale/core');
  const pkg = await import(join(pkgDir, 'dist', 'index.js'));
  const { variantSharedBytes, variantBlock, PIPE_STAGES } = pkg;
  // The package's declarations (parameters, CPU twin) with this build's module and entry point.
  const declOf = (decl, module, symbol) => Object.freeze({ ...decl, name: `${decl.name}.${module.name}`, cuda: { module, symbol } });
  const builds = (process.env.METRALE_GDN_AB_BUILDS ?? `base=${join(pkgDir, 'dist', 'kernels')}`).split(',').map((s) => s.split('='));
  const kernelsOf = {};
  const decodeOnly = (v) => v === 'pipe' || v === 'split';
  for (const [tag, dir] of builds) {
    // A build dir without one of the fatbins takes the package's.
    const fatbin = (f) => (existsSync(join(dir, f)) ? join(dir, f) : join(pkgDir, 'dist', 'kernels', f));
    const rm = defineKernelModule(`gdn-recurrent-${tag}`, fatbin('gdn-recurrent.fatbin'));
    const fm = defineKernelModule(`gdn-fold-${tag}`, fatbin('gdn-fold.fatbin'));
    const rec = (v) => declOf(pkg.recurrentVariantKernels[v], rm, pkg.recurrentVariantKernels[v].cuda.symbol);
    const fol = (v) => declOf(pkg.foldVariantKernels[v], fm, pkg.foldVariantKernels[v].cuda.symbol);
    const dfb = fatbin('gdn-decode.fatbin');
    if (existsSync(dfb)) {
      const dm = defineKernelModule(`gdn-decode-${tag}`, dfb);
      const vfb = fatbin('gdn-verify.fatbin');
      const vm = existsSync(vfb) ? defineKernelModule(`gdn-verify-${tag}`, vfb) : undefined;
      kernelsOf[`${tag}:two`] = {
        tag,
        variant: 'two',
        two: {
          prep: declOf(pkg.decodePrepKernel, dm, 'gdn_decode_prep'),
          state: declOf(pkg.decodeStateKernel, dm, 'gdn_decode_state'),
          statePlain: declOf(pkg.decodeStatePlainKernel, dm, 'gdn_decode_state_plain'),
        },
        twoVerify: vm && { prep: declOf(pkg.verifyPrepKernel, vm, 'gdn_verify_prep'), state: declOf(pkg.verifyStateKernel, vm, 'gdn_verify_state') },
        recurrentMulti: rec('smem'),
        multiVariant: 'smem',
        fold: fol('smem'),
        foldVariant: 'smem',
        foldState: declOf(pkg.foldStateKernel, dm, 'gdn_fold_state'),
      };
      // The same kernels with both launches in stream order (the state kernel without its early start).
      kernelsOf[`${tag}:two-serial`] = { ...kernelsOf[`${tag}:two`], serial: true };
      // Plain decode steps through gdn_decode_state too (the carried paths compiled in), as before gdn_decode_state_plain.
      const { statePlain: _plain, ...general } = kernelsOf[`${tag}:two`].two;
      kernelsOf[`${tag}:two-general`] = { ...kernelsOf[`${tag}:two`], two: general };
    }
    for (const v of pkg.GDN_KERNEL_VARIANTS) {
      kernelsOf[`${tag}:${v}`] = {
        tag,
        variant: v,
        recurrent: rec(v),
        // pipe and split run decode steps only: the layer takes smem for verify and the fold
        recurrentMulti: decodeOnly(v) ? rec('smem') : rec(v),
        multiVariant: decodeOnly(v) ? 'smem' : v,
        fold: decodeOnly(v) ? fol('smem') : fol(v),
        foldVariant: decodeOnly(v) ? 'smem' : v,
      };
    }
  }
  const rows = (process.env.METRALE_GDN_AB_ROWS ?? Object.keys(kernelsOf).join(',')).split(',').filter((r) => kernelsOf[r]);
  const gpu = cb.CudaBackend.create();
  const dev = gpu.device;
  log(`gdn A/B: ${found.reason}; rows ${rows.join(', ')}${NCU ? ' (ncu mode: one launch each)' : ''}`);
  const result = { date: new Date().toISOString(), device: { name: dev.name, sms: dev.multiprocessors, l2Bytes: dev.l2CacheBytes }, shape: SHAPE, rows: [], errors: [] };
  const stream = gpu.defaultStream;
  const { timeOnDevice, measureCopyBandwidth } = await import('@metrale/cuda-backend');
  const time = (fn, { reps = 30, warmup = 2, inner = 1 } = {}) => timeOnDevice(gpu, fn, { stream, reps, warmup, inner });

  // Copy ceiling (read + write; cuda-backend's measureCopyBandwidth, 1 GiB).
  const copyBW = measureCopyBandwidth(gpu, { stream, reps: 10 }).bytesPerS;
  result.copyBytesPerS = copyBW;
  log(`copy: ${(copyBW / 1e12).toFixed(3)} TB/s`);

  const maxSlots = 256;
  const maxRows = 1024;
  const L = allocLayer(gpu, maxSlots, maxRows);
  const setPending = (n) => gpu.upload(L.pending, new Uint32Array(maxSlots).fill(n));
  const prepBuf = gpu.alloc(Math.max(pkg.decodePrepBytes(SHAPE, maxSlots), pkg.verifyPrepBytes(SHAPE, maxSlots)));

  const pipeNb = Object.fromEntries((process.env.METRALE_GDN_AB_PIPE_NB ?? '').split(',').filter(Boolean).map((s) => s.split('=')));
  // A pipe build with other stages: the package's shared memory plus or minus those blocks of [d_k][32].
  const launchOf = (variant, tag, batch) => {
    const extra = variant === 'pipe' && pipeNb[tag] ? (Number(pipeNb[tag]) - PIPE_STAGES) * SHAPE.dk * 32 * 4 : 0;
    return { grid: pkg.variantGrid(variant, batch, SHAPE.hv), block: variantBlock(variant, SHAPE), sharedBytes: variantSharedBytes(variant, SHAPE) + extra };
  };

  const decodeBatches = (process.env.METRALE_GDN_AB_DECODE_BATCHES ?? '1,32,256').split(',').map(Number);
  const verifyBatches = process.env.METRALE_GDN_AB_VERIFY_BATCHES?.split(',').map(Number);
  const foldBatches = (process.env.METRALE_GDN_AB_FOLD_BATCHES ?? '32,256').split(',').map(Number);
  const SECTIONS = [
    { name: 'decode', batches: decodeBatches, k: 1, bytes: 2, pending: 0 },
    { name: 'verify', batches: verifyBatches ?? [32, 256], k: 4, bytes: 1, pending: 0 },
    { name: 'fold', batches: foldBatches, k: 4, bytes: 2, pending: 0 },
    { name: 'verify+fold', batches: [32, 256], k: 4, bytes: 3, pending: 0 },
    { name: 'carried', batches: verifyBatches ?? [1, 32, 256], k: 4, bytes: 2, pending: 4 },
    { name: 'carried decode', batches: decodeBatches, k: 1, bytes: 2, pending: 2 },
  ];

  const onlySections = process.env.METRALE_GDN_AB_ONLY?.split(',').filter(Boolean);
  const sections = onlySections ? SECTIONS.filter((sec) => onlySections.includes(sec.name)) : SECTIONS;
  for (const rowName of rows) {
    const K = kernelsOf[rowName];
    const sh = K.two ? pkg.decodeStateSharedBytes(SHAPE) : variantSharedBytes(K.variant, SHAPE);
    const tables = (t, carried) => ({
      qkvz: L.qkvz, y: L.y, slots: t.slots, rowStarts: t.rowStarts, seqLens: t.seqLens, state: L.state, convRing: L.convRing,
      convWeight: L.convWeight, aLog: L.aLog, dtBias: L.dtBias, normWeight: L.normWeight,
      stash: L.stash, convStash: carried ? L.convStash : 0n, pending: carried ? L.pending : 0n,
    });
    // A serial row launches the state kernel without its early start.
    const both = (prep, state, l, args) => {
      gpu.launch(prep, l.prep, args);
      gpu.launch(state, { ...l.state, earlyStart: !K.serial }, args);
    };
    const two = (t, batch, carried) => {
      const args = { ...tables(t, carried), prep: prepBuf, batch, ...SHAPE, eps: EPS, yDtype: 0, ...pkg.NO_GATE_ROWS };
      both(K.two.prep, pkg.decodeStateFor(K.two, args.pending), pkg.twoKernelDecodeLaunches(SHAPE, batch, stream, SHAPE.maxK), args);
    };
    const rec = (t, batch, mode, k, carried) => {
      const decode = mode === 0 && k === 1;
      if (K.two && decode) return two(t, batch, carried);
      if (K.twoVerify && mode === 1 && k <= pkg.VERIFY_ROWS) {
        return both(K.twoVerify.prep, K.twoVerify.state, pkg.twoKernelVerifyLaunches(SHAPE, batch, stream, SHAPE.maxK), { ...tables(t, carried), prep: prepBuf, batch, k, ...SHAPE, eps: EPS, yDtype: 0 });
      }
      const launch = { ...launchOf(decode ? K.variant : K.multiVariant, K.tag, batch), stream };
      return gpu.launch(decode ? K.recurrent : K.recurrentMulti, launch, { ...tables(t, carried), mode, batch, k, ...SHAPE, eps: EPS, yDtype: 0 });
    };
    const fold = (t, batch, k) => {
      const args = { qkvz: L.qkvz, slots: t.slots, seqLens: t.seqLens, naTab: t.naTab, state: L.state, convRing: L.convRing, stash: L.stash, batch, k, ...SHAPE };
      if (K.foldState) return gpu.launch(K.foldState, pkg.foldStateLaunch(SHAPE, batch, stream, SHAPE.maxK), args);
      return gpu.launch(K.fold, { ...launchOf(K.foldVariant ?? K.variant, K.tag, batch), stream }, args);
    };
    const out = { row: rowName, variant: K.variant, sharedBytes: sh, sections: {} };
    result.rows.push(out);
    for (const sec of sections) {
      for (const batch of sec.batches) {
        const key = `${sec.name} ${batch}`;
        let ts;
        try {
          const sets = setsFor(batch, dev.l2CacheBytes, maxSlots);
          ts = stepTables(gpu, batch, sets, sec.k, 1000);
          const far = Math.ceil(sets / 2);
          const one = (i) => {
            const t = ts[i % sets];
            if (sec.name === 'decode') rec(t, batch, 0, 1, false);
            else if (sec.name === 'verify') rec(t, batch, 1, 4, false);
            else if (sec.name === 'fold') fold(t, batch, 4);
            else if (sec.name === 'verify+fold') {
              rec(t, batch, 1, 4, false);
              fold(ts[(i + far) % sets], batch, 4);
            } else if (sec.name === 'carried') rec(t, batch, 1, 4, true);
            else rec(t, batch, 0, 1, true);
          };
          setPending(sec.pending);
          if (NCU) {
            one(0);
            gpu.synchronize(stream);
            continue;
          }
          // A CUDA graph of G steps over the sets, replayed. (Carried steps read pending = n every
          // time: the stash holds random rows of unit scale, which is what a real verify leaves.)
          const G = Math.max(sets, batch >= 32 ? 4 : 16);
          gpu.beginCapture(stream);
          for (let m = 0; m < G; m++) one(m);
          const graph = gpu.endCapture(stream);
          const exec = gpu.instantiate(graph);
          gpu.destroyGraph(graph);
          let t;
          try {
            t = time(() => gpu.launchGraph(exec, stream), { inner: G });
          } finally {
            gpu.destroyGraphExec(exec);
          }
          const bytes = sec.bytes * batch * stateSeqBytes;
          out.sections[key] = { us: t.ms * 1e3, minUs: t.min * 1e3, maxUs: t.max * 1e3, bytes, ofCopy: bytes / (t.ms * 1e-3) / copyBW };
        } catch (error) {
          const msg = `${rowName} ${key}: ${error?.message ?? error}`;
          result.errors.push(msg);
          out.sections[key] = { error: String(error?.message ?? error) };
          log(`!! ${msg}`);
          try {
            gpu.synchronize();
          } catch {
            // sticky error: the rest of this row will say so too
          }
        } finally {
          if (ts) freeTables(gpu, ts);
          setPending(0);
        }
      }
    }
    if (!NCU) log(`${rowName}: ${Object.entries(out.sections).map(([k, v]) => `${k} ${v.us !== undefined ? `${v.us.toFixed(1)} µs` : 'ERR'}`).join(', ')}`);
  }
  freeAll(gpu, L);
  gpu.free(prepBuf);
  gpu.dispose();
  if (NCU) return;

  // ---- table: µs, % of copy bandwidth on the section's bytes, and × the row's own decode ----
  const keys = sections.flatMap((s) => s.batches.map((b) => `${s.name} ${b}`));
  log(`\nGDN variants A/B (80B shape, graph replay, medians; copy ${(copyBW / 1e12).toFixed(3)} TB/s; % = of copy on the floor bytes; × = vs the row's decode at that batch)`);
  const head = ['section', ...rows];
  const lines = keys.map((k) => [
    k,
    // By position: a row named twice (runs in alternating order) has a column per run.
    ...rows.map((_, i) => {
      const row = result.rows[i];
      const v = row.sections[k];
      if (!v || v.us === undefined) return 'ERR';
      const batch = k.split(' ').pop();
      const dec = row.sections[`decode ${batch}`];
      const vs = !k.startsWith('decode') && dec?.us ? ` ${(v.us / dec.us).toFixed(2)}×` : '';
      return `${v.us.toFixed(1)} ${(100 * v.ofCopy).toFixed(0)}%${vs}`;
    }),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const fmt = (cells) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  log(fmt(head));
  for (const l of lines) log(fmt(l));
  mkdirSync(dirname(outPath), { recursive: true });
  writeFileSync(outPath, `${JSON.stringify(result, null, 2)}\n`);
  log(`\nwrote ${outPath}`);
}

main().catch((error) => {
  console.error(`gdn A/B failed: ${error?.stack ?? error}`);
  process.exitCode = 1;
});
