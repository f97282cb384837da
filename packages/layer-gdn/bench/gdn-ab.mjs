#!/usr/bin/env node
// A/B of the gdn.recurrent / gdn.fold variants (kernels/gdn-recurrent.cu, gdn-fold.cu entry points
// _smem, _stream, _legacy, _pipe, plus builds with other -D knobs) at the Qwen3-Next-80B layer shape
// (H_k 16, H_v 32, d_k = d_v = 128, conv K 4, maxK 4; f32 state 2 MiB per sequence).
// Run: node bench/gdn-ab.mjs (bench/gdn-tune.sh runs it): needs node, the workspace's
// @metrale/core, @metrale/cuda-backend and this package built (dist: the launch shapes), and fatbins:
//   METRALE_GDN_AB_BUILDS="tag=dir,tag2=dir2"  each dir holds gdn-recurrent.fatbin and gdn-fold.fatbin
//   METRALE_GDN_AB_ROWS="tag:variant,..."      the rows of the table (default: every variant of every build)
//   METRALE_GDN_AB_PIPE_NB="tag=4,..."         builds whose pipe kernels were compiled with another
//                                               GDN_PIPE_NB than the package's PIPE_STAGES
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
// A pipe row runs what the layer would: pipe for decode steps (mode 0, k = 1) and the fold, the
// same build's smem entry point for the rest. The parameter lists below must match src/gdn-kernels.ts
// (RECURRENT_PARAMS, FOLD_PARAMS); threads and shared memory come from dist (gdn-launch.ts).
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outPath = resolve(pkgDir, process.env.METRALE_BENCH_OUT ?? 'bench-results/gdn-ab.json');
const NCU = process.env.METRALE_GDN_AB_NCU === '1';
const log = (...a) => console.log(...a);

const SHAPE = { hk: 16, hv: 32, dk: 128, dv: 128, convK: 4, maxK: 4 };
const EPS = 1e-6;
const MiB = 2 ** 20;
const convDim = 2 * SHAPE.hk * SHAPE.dk + SHAPE.hv * SHAPE.dv;
const width = 2 * SHAPE.hk * SHAPE.dk + 2 * SHAPE.hv * SHAPE.dv;
const stateSeqBytes = SHAPE.hv * SHAPE.dk * SHAPE.dv * 4;
const stashSeqFloats = SHAPE.hv * SHAPE.maxK * (SHAPE.dk + SHAPE.dv + 1);
const convStashRows = 2 * SHAPE.maxK;

const SHAPE_PARAMS = { hk: 'i32', hv: 'i32', dk: 'i32', dv: 'i32', convK: 'i32', maxK: 'i32' };
const RECURRENT_PARAMS = {
  qkvz: 'ptr', ba: 'ptr', y: 'ptr', slots: 'ptr', rowStarts: 'ptr', seqLens: 'ptr', state: 'ptr', convRing: 'ptr',
  convWeight: 'ptr', aLog: 'ptr', dtBias: 'ptr', normWeight: 'ptr', stash: 'ptr', convStash: 'ptr', pending: 'ptr',
  mode: 'i32', batch: 'i32', k: 'i32', ...SHAPE_PARAMS, eps: 'f32',
};
const FOLD_PARAMS = {
  qkvz: 'ptr', slots: 'ptr', seqLens: 'ptr', naTab: 'ptr', state: 'ptr', convRing: 'ptr', stash: 'ptr', batch: 'i32', k: 'i32', ...SHAPE_PARAMS,
};

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
  const { defineKernel, defineKernelModule } = await import('@metrale/core');
  const { variantSharedBytes, variantBlock, PIPE_STAGES } = await import(join(pkgDir, 'dist', 'index.js'));
  const builds = (process.env.METRALE_GDN_AB_BUILDS ?? `base=${join(pkgDir, 'dist', 'kernels')}`).split(',').map((s) => s.split('='));
  const kernelsOf = {};
  for (const [tag, dir] of builds) {
    const rm = defineKernelModule(`gdn-recurrent-${tag}`, join(dir, 'gdn-recurrent.fatbin'));
    const fm = defineKernelModule(`gdn-fold-${tag}`, join(dir, 'gdn-fold.fatbin'));
    const rec = (v) => defineKernel({ name: `gdn.recurrent.${tag}.${v}`, params: RECURRENT_PARAMS, cuda: { module: rm, symbol: `gdn_recurrent_${v}` } });
    for (const v of ['smem', 'stream', 'legacy', 'pipe']) {
      kernelsOf[`${tag}:${v}`] = {
        tag,
        variant: v,
        recurrent: rec(v),
        // pipe runs decode steps only: the layer takes smem for verify
        recurrentMulti: v === 'pipe' ? rec('smem') : rec(v),
        multiVariant: v === 'pipe' ? 'smem' : v,
        fold: defineKernel({ name: `gdn.fold.${tag}.${v}`, params: FOLD_PARAMS, cuda: { module: fm, symbol: `gdn_fold_${v}` } }),
      };
    }
  }
  const rows = (process.env.METRALE_GDN_AB_ROWS ?? Object.keys(kernelsOf).join(',')).split(',').filter((r) => kernelsOf[r]);
  const gpu = cb.CudaBackend.create();
  const dev = gpu.device;
  log(`gdn A/B: ${found.reason}; rows ${rows.join(', ')}${NCU ? ' (ncu mode: one launch each)' : ''}`);
  const result = { date: new Date().toISOString(), device: { name: dev.name, sms: dev.multiprocessors, l2Bytes: dev.l2CacheBytes }, shape: SHAPE, rows: [], errors: [] };
  const stream = gpu.defaultStream;
  const ev0 = gpu.createEvent();
  const ev1 = gpu.createEvent();
  const time = (fn, { reps = 30, warmup = 2, inner = 1 } = {}) => {
    for (let i = 0; i < warmup; i++) fn(i);
    gpu.synchronize(stream);
    const ms = [];
    for (let i = 0; i < reps; i++) {
      gpu.recordEvent(ev0, stream);
      fn(i);
      gpu.recordEvent(ev1, stream);
      gpu.synchronizeEvent(ev1);
      ms.push(gpu.elapsedMs(ev0, ev1) / inner);
    }
    ms.sort((a, b) => a - b);
    return { ms: ms[Math.floor(ms.length / 2)], min: ms[0], max: ms[ms.length - 1] };
  };

  // Copy ceiling (read + write).
  let copyBW;
  {
    const bytes = 1024 * MiB;
    const a = gpu.alloc(bytes);
    const b = gpu.alloc(bytes);
    fillRandomF32(gpu, a, bytes / 4);
    const t = time(() => gpu.copyDeviceAsync(b, a, bytes, stream), { reps: 10 });
    copyBW = (2 * bytes) / (t.ms * 1e-3);
    result.copyBytesPerS = copyBW;
    gpu.free(a);
    gpu.free(b);
    log(`copy: ${(copyBW / 1e12).toFixed(3)} TB/s`);
  }

  const maxSlots = 256;
  const maxRows = 1024;
  const L = {
    state: gpu.alloc(maxSlots * stateSeqBytes),
    convRing: gpu.alloc(maxSlots * SHAPE.convK * convDim * 4),
    convWeight: gpu.alloc(convDim * SHAPE.convK * 4),
    aLog: gpu.alloc(SHAPE.hv * 4),
    dtBias: gpu.alloc(SHAPE.hv * 4),
    normWeight: gpu.alloc(SHAPE.dv * 4),
    qkvz: gpu.alloc(maxRows * width * 4),
    ba: gpu.alloc(maxRows * 2 * SHAPE.hv * 4),
    y: gpu.alloc(maxRows * SHAPE.hv * SHAPE.dv * 4),
    stash: gpu.alloc(maxSlots * stashSeqFloats * 4),
    convStash: gpu.alloc(maxSlots * convStashRows * convDim * 4),
    pending: gpu.alloc(maxSlots * 4),
  };
  fillRandomF32(gpu, L.state, (maxSlots * stateSeqBytes) / 4, 0.5);
  fillRandomF32(gpu, L.convRing, maxSlots * SHAPE.convK * convDim);
  fillRandomF32(gpu, L.convWeight, convDim * SHAPE.convK, 0.6);
  gpu.upload(L.aLog, Float32Array.from({ length: SHAPE.hv }, () => Math.log(0.05 + 0.6 * Math.random())));
  fillRandomF32(gpu, L.dtBias, SHAPE.hv);
  gpu.upload(L.normWeight, Float32Array.from({ length: SHAPE.dv }, () => 0.5 + Math.random()));
  fillRandomF32(gpu, L.qkvz, maxRows * width);
  fillRandomF32(gpu, L.ba, maxRows * 2 * SHAPE.hv, 2);
  fillRandomF32(gpu, L.stash, maxSlots * stashSeqFloats, 0.1);
  fillRandomF32(gpu, L.convStash, maxSlots * convStashRows * convDim);
  const setPending = (n) => gpu.upload(L.pending, new Uint32Array(maxSlots).fill(n));

  function tables(batch, sets, k, seqLen) {
    const t = [];
    const up = (a) => {
      const p = gpu.alloc(Math.max(16, a.byteLength));
      gpu.upload(p, a);
      return p;
    };
    for (let s = 0; s < sets; s++) {
      t.push({
        slots: up(Int32Array.from({ length: batch }, (_, p) => s * batch + p)),
        seqLens: up(new Int32Array(batch).fill(seqLen)),
        rowStarts: up(Int32Array.from({ length: batch + 1 }, (_, p) => p * k)),
        naTab: up(new Uint32Array(batch).fill(k)),
      });
    }
    return t;
  }
  const freeTables = (ts) => ts.forEach((t) => Object.values(t).forEach((p) => gpu.free(p)));
  const setsFor = (batch) => Math.max(1, Math.min(Math.floor(maxSlots / batch), Math.ceil((4 * dev.l2CacheBytes) / (batch * stateSeqBytes))));
  const pipeNb = Object.fromEntries((process.env.METRALE_GDN_AB_PIPE_NB ?? '').split(',').filter(Boolean).map((s) => s.split('=')));
  // A pipe build with other stages: the package's shared memory plus or minus those blocks of [d_k][32].
  const launchOf = (variant, tag) => ({
    block: variantBlock(variant, SHAPE),
    sharedBytes: variantSharedBytes(variant, SHAPE) + (variant === 'pipe' && pipeNb[tag] ? (Number(pipeNb[tag]) - PIPE_STAGES) * SHAPE.dk * 32 * 4 : 0),
  });

  const SECTIONS = [
    { name: 'decode', batches: [1, 32, 256], k: 1, bytes: 2, pending: 0 },
    { name: 'verify', batches: [32, 256], k: 4, bytes: 1, pending: 0 },
    { name: 'fold', batches: [32, 256], k: 4, bytes: 2, pending: 0 },
    { name: 'verify+fold', batches: [32, 256], k: 4, bytes: 3, pending: 0 },
    { name: 'carried', batches: [1, 32, 256], k: 4, bytes: 2, pending: 4 },
    { name: 'carried decode', batches: [32, 256], k: 1, bytes: 2, pending: 2 },
  ];

  for (const rowName of rows) {
    const K = kernelsOf[rowName];
    const sh = variantSharedBytes(K.variant, SHAPE);
    const rec = (t, batch, mode, k, carried) =>
      gpu.launch(mode === 0 && k === 1 ? K.recurrent : K.recurrentMulti, { grid: [batch, SHAPE.hv], ...launchOf(mode === 0 && k === 1 ? K.variant : K.multiVariant, K.tag), stream }, {
        qkvz: L.qkvz, ba: L.ba, y: L.y, slots: t.slots, rowStarts: t.rowStarts, seqLens: t.seqLens, state: L.state, convRing: L.convRing,
        convWeight: L.convWeight, aLog: L.aLog, dtBias: L.dtBias, normWeight: L.normWeight,
        stash: L.stash, convStash: carried ? L.convStash : 0n, pending: carried ? L.pending : 0n,
        mode, batch, k, ...SHAPE, eps: EPS,
      });
    const fold = (t, batch, k) =>
      gpu.launch(K.fold, { grid: [batch, SHAPE.hv], ...launchOf(K.variant, K.tag), stream }, {
        qkvz: L.qkvz, slots: t.slots, seqLens: t.seqLens, naTab: t.naTab, state: L.state, convRing: L.convRing, stash: L.stash, batch, k, ...SHAPE,
      });
    const out = { row: rowName, variant: K.variant, sharedBytes: sh, sections: {} };
    result.rows.push(out);
    for (const sec of SECTIONS) {
      for (const batch of sec.batches) {
        const key = `${sec.name} ${batch}`;
        let ts;
        try {
          const sets = setsFor(batch);
          ts = tables(batch, sets, sec.k, 1000);
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
          if (ts) freeTables(ts);
          setPending(0);
        }
      }
    }
    if (!NCU) log(`${rowName}: ${Object.entries(out.sections).map(([k, v]) => `${k} ${v.us !== undefined ? `${v.us.toFixed(1)} µs` : 'ERR'}`).join(', ')}`);
  }
  for (const p of Object.values(L)) gpu.free(p);
  gpu.destroyEvent(ev0);
  gpu.destroyEvent(ev1);
  gpu.dispose();
  if (NCU) return;

  // ---- table: µs, % of copy bandwidth on the section's bytes, and × the row's own decode ----
  const keys = SECTIONS.flatMap((s) => s.batches.map((b) => `${s.name} ${b}`));
  log(`\nGDN variants A/B (80B shape, graph replay, medians; copy ${(copyBW / 1e12).toFixed(3)} TB/s; % = of copy on the floor bytes; × = vs the row's decode at that batch)`);
  const head = ['section', ...rows];
  const lines = keys.map((k) => [
    k,
    ...rows.map((r) => {
      const row = result.rows.find((x) => x.row === r);
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

function fillRandomF32(gpu, ptr, count, scale = 1) {
  const tile = Math.min(count, 4 * MiB);
  const data = new Float32Array(tile);
  for (let i = 0; i < tile; i++) data[i] = (Math.random() * 2 - 1) * scale || scale * 0.5;
  for (let off = 0; off < count; off += tile) {
    const n = Math.min(tile, count - off);
    gpu.upload(ptr + BigInt(off * 4), n === tile ? data : data.subarray(0, n));
  }
}

main().catch((error) => {
  console.error(`gdn A/B failed: ${error?.stack ?? error}`);
  process.exitCode = 1;
});
