// GPU tests of the DSA kernels (kernels/*.cu) one launch at a time: each case runs the package's
// `defineKernel` declaration on the device and on the CPU backend (the twins in src/*.cpu.ts) from
// identical random buffers, with the launch shapes of src/dsa-launch.ts, outputs poisoned first
// (NaN, or −1234567 for i32), and compares every buffer the kernel may write: f32 by relative L2
// error (an element written on one side only — poison left on the other — fails), bf16 / fp8
// caches decoded, i32 selections exactly. A table of the errors prints at the end.
//
// Shapes: the miniature ones of the layer tests (generic paths) and the GLM-5 / GLM-5.3 ones
// (the tensor-core paths: indexer d_I 128 × 32 heads, MLA 64 heads × (512 + 64)). Where a fast
// path rounds operands to bf16 (q_I in dsa.index_score; q, the cache and p in dsa.sparse_attn),
// the exactness cases feed inputs that are already bf16 values, so both sides compute the same
// function; the other sparse-attention cases use plain f32 data at a bf16-level bound.
// Row-typed buffers (qr, qb, olat: core's FLOAT_DTYPE_CODE) run in f32, bf16 and f16; a bf16 or
// f16 output both sides round from (nearly) the same f32 value is held to about one rounding.
//
// Run: node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts
// Without a GPU it skips and says why. METRALE_DSA_SEED=n repeats a run's random inputs.
// METRALE_DSA_DEVICE_MODULE=test/gpu/emu/device.mjs (development only) runs the kernels on the
// CPU emulator (tools/cuda-emu) instead (smaller sizes).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  FLOAT_DTYPE_CODE, SeededRandom, defineKernelModule, f16BitsToF32, toF16, type DevicePtr, type FloatDtype, type GpuBackend, type Kernel, type KernelParams,
  type LaunchConfig,
} from '@metrale/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chooseDevice } from './device.js';

const here = dirname(fileURLToPath(import.meta.url));
const pkgDir = join(here, '..', '..');

// ---- device and kernels -----------------------------------------------------------------------

type AnyKernel = Kernel<KernelParams>;
type Pkg = typeof import('@metrale/layer-dsa');

function findNvcc(): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/local/cuda/bin']) {
    if (dir && existsSync(join(dir, 'nvcc'))) return join(dir, 'nvcc');
  }
  return undefined;
}

/** The declaration, with its fatbin found: its own path, dist/kernels/, or compiled here with nvcc. */
function withFatbin(k: AnyKernel, file: string): AnyKernel {
  const cuda = k.cuda!;
  if (existsSync(cuda.module.fatbin)) return k;
  let path = join(pkgDir, 'dist', 'kernels', `${file}.fatbin`);
  if (!existsSync(path)) {
    const nvcc = findNvcc();
    if (!nvcc) throw new Error(`${cuda.module.fatbin} is missing and there is no nvcc to compile kernels/${file}.cu: build @metrale/layer-dsa first`);
    const dir = join(tmpdir(), `metrale-dsa-kernels-${process.pid}`);
    mkdirSync(dir, { recursive: true });
    path = join(dir, `${file}.fatbin`);
    // <metrale/elements.cuh> is core's (metrale-build-kernels passes the same include path).
    const coreInclude = join(dirname(createRequire(import.meta.url).resolve('@metrale/core/package.json')), 'include');
    execFileSync(nvcc, ['-fatbin', '-O3', '-std=c++17', '--expt-relaxed-constexpr', '-gencode=arch=compute_80,code=sm_80',
      '-gencode=arch=compute_90a,code=sm_90a', '-gencode=arch=compute_90,code=compute_90', `-I${join(pkgDir, 'kernels')}`, `-I${coreInclude}`,
      '-o', path, join(pkgDir, 'kernels', `${file}.cu`)], { stdio: 'inherit' });
  }
  return Object.freeze({ ...k, cuda: { module: defineKernelModule(cuda.module.name, path), symbol: cuda.symbol } });
}

const device = await chooseDevice();
if (!device.available) console.warn(`[layer-dsa gpu] kernel tests skipped: ${device.reason}`);
const pkg: Pkg = await import('@metrale/layer-dsa');
const small = !device.real;  // the emulator: smaller problems

// ---- random data ------------------------------------------------------------------------------

/** Random test data from core's SeededRandom: reproducible from the printed seed. */
function rng(seed: number) {
  const r = new SeededRandom(seed);
  const next = () => r.float();
  const normal = () => r.normal();
  return {
    next,
    normal,
    int: (lo: number, hi: number) => r.int(lo, hi),
    /** Normal values (never exactly 0) times `scale`. */
    normals: (n: number, scale = 1) => Float32Array.from({ length: n }, () => (normal() || 0.5) * scale),
    uniform: (n: number, lo: number, hi: number) => Float32Array.from({ length: n }, () => lo + (hi - lo) * next() || lo),
  };
}
type Rng = ReturnType<typeof rng>;

const baseSeed = Number(process.env.METRALE_DSA_SEED ?? Date.now() % 1_000_000_007);
let seedCounter = 0;
const nextSeed = () => baseSeed + 104729 * ++seedCounter;

const f32s = new Float32Array(1);
const u32s = new Uint32Array(f32s.buffer);
/** f32 → bf16 bits, round to nearest even. */
function bf16(x: number): number {
  f32s[0] = x;
  const b = u32s[0]!;
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}
function bf16ToF32(b: number): number {
  u32s[0] = (b & 0xffff) << 16;
  return f32s[0]!;
}
/** The values rounded to bf16 (as f32). */
const roundBf16 = (a: Float32Array): Float32Array => Float32Array.from(a, (x) => bf16ToF32(bf16(x)));
const toBf16 = (a: Float32Array): Uint16Array => Uint16Array.from(a, (x) => bf16(x));
/** Values as a row-typed buffer of `dtype` (bf16 / f16 rounded to nearest even). */
const asRows = (a: Float32Array, dtype: FloatDtype): Host => (dtype === 'f32' ? a : dtype === 'bf16' ? toBf16(a) : toF16(a));
/** A row-typed output buffer of n elements, poisoned (NaN in every type). */
const poisonRows = (n: number, dtype: FloatDtype): Host => (dtype === 'f32' ? nanF32(n) : new Uint16Array(n).fill(dtype === 'bf16' ? 0xffff : 0x7fff));
const ROW_DTYPES: readonly FloatDtype[] = ['f32', 'bf16', 'f16'];
/** A row-typed output's bound: `f32` where both sides store the same f32 computation, about one rounding otherwise. */
const rowTol = (dtype: FloatDtype, f32: number): number => (dtype === 'f32' ? f32 : Math.max(f32, dtype === 'bf16' ? 2e-3 : 3e-4));

// ---- one launch on both backends ----------------------------------------------------------------

type Host = Float32Array | Int32Array | Uint16Array | Uint8Array;
type Kind = 'f32' | 'i32' | 'bf16' | 'f16' | 'fp8';
interface Case {
  readonly name: string;
  readonly kernel: AnyKernel;
  /** Buffers by parameter name (null passes a null pointer), made from the case's own random stream when it runs. */
  readonly build: (R: Rng) => Record<string, Host | null>;
  readonly scalars: Record<string, number>;
  /** Outputs to compare, with how. */
  readonly outputs: Record<string, { kind: Kind; tol?: number; scales?: string }>;
  readonly launch: (gpu: GpuBackend) => LaunchConfig;
}

interface Row {
  readonly case: string;
  readonly buffer: string;
  readonly rel: number;
  readonly maxAbs: number;
  readonly bad: number;
  readonly compared: number;
  readonly ok: boolean;
}
const table: Row[] = [];

function upload(gpu: GpuBackend, a: Host): DevicePtr {
  const p = gpu.alloc(Math.max(16, a.byteLength));
  gpu.upload(p, a);
  return p;
}

function runOn(gpu: GpuBackend, c: Case, buffers: Record<string, Host | null>): Record<string, Uint8Array> {
  const ptrs: Record<string, DevicePtr> = {};
  for (const [name, a] of Object.entries(buffers)) ptrs[name] = a ? upload(gpu, a) : 0n;
  const args: Record<string, number | bigint> = { ...c.scalars };
  for (const { name, type } of c.kernel.paramList) if (type === 'ptr') args[name] = ptrs[name] ?? 0n;
  gpu.launch(c.kernel, c.launch(gpu), args as never);
  gpu.synchronize();
  const out: Record<string, Uint8Array> = {};
  for (const name of Object.keys(c.outputs)) {
    out[name] = gpu.download(ptrs[name]!, buffers[name]!.byteLength);
  }
  for (const p of Object.values(ptrs)) if (p !== 0n) gpu.free(p);
  return out;
}

const E4M3 = Float64Array.from({ length: 256 }, (_, b) => pkg.e4m3ToF32(b));

function decode(kind: Kind, bytes: Uint8Array, scales?: Float32Array, rowLen?: number): Float64Array {
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  if (kind === 'f32') return Float64Array.from(new Float32Array(buf));
  if (kind === 'i32') return Float64Array.from(new Int32Array(buf));
  if (kind === 'bf16') return Float64Array.from(new Uint16Array(buf), (b) => bf16ToF32(b));
  if (kind === 'f16') return Float64Array.from(new Uint16Array(buf), (b) => f16BitsToF32(b));
  const u8 = new Uint8Array(buf);
  return Float64Array.from(u8, (b, i) => E4M3[b]! * (scales && rowLen ? scales[Math.floor(i / rowLen)]! : 1));
}

function compare(caseName: string, buffer: string, kind: Kind, got: Float64Array, ref: Float64Array, tol: number): void {
  let num = 0;
  let den = 0;
  let maxAbs = 0;
  let bad = 0;
  let compared = 0;
  for (let i = 0; i < ref.length; i++) {
    const g = got[i]!;
    const r = ref[i]!;
    if (kind === 'i32') {
      if (g !== r) bad++;
      compared++;
      continue;
    }
    const gn = Number.isNaN(g);
    const rn = Number.isNaN(r);
    if (gn || rn) {
      if (gn !== rn) bad++;
      continue;
    }
    num += (g - r) ** 2;
    den += r * r;
    maxAbs = Math.max(maxAbs, Math.abs(g - r));
    compared++;
  }
  const rel = kind === 'i32' ? 0 : den > 0 ? Math.sqrt(num / den) : Math.sqrt(num);
  const ok = bad === 0 && rel <= tol && Number.isFinite(rel);
  table.push({ case: caseName, buffer, rel, maxAbs, bad, compared, ok });
  expect(bad, `${caseName} ${buffer}: ${kind === 'i32' ? 'entries differ' : 'elements written on one side only (poison left on the other)'}`).toBe(0);
  expect(rel, `${caseName} ${buffer}: relative L2 error`).toBeLessThanOrEqual(tol);
}

function printTable(): void {
  if (table.length === 0) return;
  const w = Math.max(...table.map((r) => r.case.length), 4);
  const lines = [`${'case'.padEnd(w)}  ${'buffer'.padEnd(10)}  ${'rel L2'.padStart(9)}  ${'max |Δ|'.padStart(9)}  ${'bad'.padStart(5)}  ${'compared'.padStart(9)}  ok`];
  for (const r of table) {
    lines.push(`${r.case.padEnd(w)}  ${r.buffer.padEnd(10)}  ${r.rel.toExponential(2).padStart(9)}  ${r.maxAbs.toExponential(2).padStart(9)}  ${String(r.bad).padStart(5)}  ${String(r.compared).padStart(9)}  ${r.ok ? 'ok' : 'FAIL'}`);
  }
  console.log(`DSA kernels, device vs CPU twin (seed ${baseSeed}, device: ${device.reason})\n${lines.join('\n')}`);
}

// ---- step tables --------------------------------------------------------------------------------

interface Seq {
  /** −1: a padding position. */
  readonly slot: number;
  /** Committed length before the step. */
  readonly len: number;
  /** Rows of this position in the step. */
  readonly rows: number;
}
function tables(seqs: readonly Seq[]) {
  const batch = seqs.length;
  const rowStarts = new Int32Array(batch + 1);
  seqs.forEach((s, p) => (rowStarts[p + 1] = rowStarts[p]! + s.rows));
  const rows = rowStarts[batch]!;
  const positions = new Int32Array(Math.max(rows, 1));
  seqs.forEach((s, p) => {
    for (let i = 0; i < s.rows; i++) positions[rowStarts[p]! + i] = s.slot < 0 ? 0 : s.len + i;
  });
  return {
    batch, rows,
    buffers: {
      slots: Int32Array.from(seqs, (s) => s.slot), seqLens: Int32Array.from(seqs, (s) => s.len), rowStarts, positions,
    },
  };
}

/**
 * The caches in pages of `pageRows` rows for `maxSeqs` slots of `entries` rows each, with the
 * block table a random permutation of the pages (the model's pool hands pages out in any order).
 */
function paged(maxSeqs: number, entries: number, pageRows: number) {
  const pagesPerSeq = Math.ceil(entries / pageRows);
  const pages = maxSeqs * pagesPerSeq;
  return {
    rows: pages * pageRows,
    scalars: { pagesPerSeq, pageRows },
    table: (R: Rng): Int32Array => {
      const t = Int32Array.from({ length: pages }, (_, i) => i);
      for (let i = pages - 1; i > 0; i--) {
        const j = R.int(0, i);
        [t[i], t[j]] = [t[j]!, t[i]!];
      }
      return t;
    },
  };
}

const nanF32 = (n: number) => new Float32Array(n).fill(Number.NaN);
const poisonI32 = (n: number) => new Int32Array(n).fill(-1234567);

// ---- cases ------------------------------------------------------------------------------------

const DT = ['f32', 'bf16', 'fp8'] as const;
const cacheOf = (dtype: number, n: number): Host =>
  dtype === 0 ? nanF32(n) : dtype === 1 ? new Uint16Array(n).fill(0xffff) : new Uint8Array(n).fill(0x7f);
const cacheKind = (dtype: number): Kind => (dtype === 0 ? 'f32' : dtype === 1 ? 'bf16' : 'fp8');

function appendCases(): Case[] {
  const out: Case[] = [];
  const shapes = [
    { name: 'mini', qL: 12, kL: 10, rope: 4, dI: 8, H: 2, nope: 6, idxHeads: 8, cap: 132_000, t0: 131_000, theta: 8e6 },
    { name: 'GLM-5', qL: 2048, kL: 512, rope: 64, dI: 128, H: 64, nope: 192, idxHeads: 32, cap: 300, t0: 250, theta: 8e6 },
  ];
  for (const s of shapes) {
    const maxSeqs = 3;
    const lat = s.kL + s.rope;
    const pg = paged(maxSeqs, s.cap, 16);
    const seqs: Seq[] = [
      { slot: 2, len: s.t0, rows: 3 },
      { slot: -1, len: 0, rows: 1 },
      { slot: 0, len: 0, rows: 4 },
      { slot: 1, len: 40, rows: 1 },
    ];
    const tb = tables(seqs);
    const kOff = s.qL + s.kL + s.rope;
    const xaWidth = kOff + s.dI + 5;
    const invFreq = pkg.ropeInvFreq(s.theta, s.rope);
    const mlaVariants: [number, number, FloatDtype][] = [[0, 1, 'f32'], [0, 0, 'f32'], [1, 1, 'f32'], [1, 0, 'f32'], [1, 1, 'bf16'], [0, 0, 'f16']];
    for (const [kvDtype, inter, qrType] of mlaVariants) {
      out.push({
        name: `mla_append ${s.name} ${DT[kvDtype]} ${inter ? 'interleaved' : 'half-split'} qr ${qrType}`,
        kernel: pkg.mlaAppendKernel as AnyKernel,
        build: (R) => ({
          xa: R.normals(tb.rows * xaWidth), qr: poisonRows(tb.rows * s.qL, qrType), kvCache: cacheOf(kvDtype, pg.rows * lat),
          qaNorm: R.uniform(s.qL, 0.5, 1.5), kvaNorm: R.uniform(s.kL, 0.5, 1.5), invFreq, ...tb.buffers, blockTable: pg.table(R),
        }),
        scalars: {
          batch: tb.batch, xaWidth, qLora: s.qL, kvLora: s.kL, rope: s.rope, ropeInterleave: inter, kvDtype, qrDtype: FLOAT_DTYPE_CODE[qrType],
          ...pg.scalars, eps: 1e-6,
        },
        outputs: { qr: { kind: qrType, tol: rowTol(qrType, 1e-6) }, kvCache: { kind: cacheKind(kvDtype), tol: kvDtype ? 1e-3 : 1e-6 } },
        launch: (gpu) => pkg.rowLaunch(tb.rows, gpu.defaultStream),
      });
    }
    for (const idxDtype of [0, 1, 2]) {
      for (const mode of idxDtype === 0 ? [0, 1] : [0]) {
        const outputs: Case['outputs'] = mode === 1
          ? { xa: { kind: 'f32', tol: 1e-6 } }
          : { idxCache: { kind: cacheKind(idxDtype), tol: idxDtype === 0 ? 1e-6 : 1e-3, scales: idxDtype === 2 ? 'idxScales' : undefined } };
        if (mode === 0 && idxDtype === 2) outputs.idxScales = { kind: 'f32', tol: 1e-6 };
        out.push({
          name: `index_append ${s.name} ${DT[idxDtype]} mode ${mode}`,
          kernel: pkg.indexAppendKernel as AnyKernel,
          build: (R) => ({
            xa: R.normals(tb.rows * xaWidth), idxCache: mode === 1 ? null : cacheOf(idxDtype, pg.rows * s.dI),
            idxScales: idxDtype === 2 ? nanF32(pg.rows) : null,
            kNormWeight: R.uniform(s.dI, 0.5, 1.5), kNormBias: R.normals(s.dI, 0.2), invFreq, ...tb.buffers, blockTable: pg.table(R),
          }),
          scalars: { batch: tb.batch, xaWidth, kOff, dI: s.dI, idxRope: s.rope, ropeInterleave: mode, idxDtype, ...pg.scalars, mode, eps: 1e-6 },
          outputs,
          launch: (gpu) => pkg.rowLaunch(tb.rows, gpu.defaultStream),
        });
      }
    }
    const qbWidth = s.H * (s.nope + s.rope) + s.idxHeads * s.dI + 3;
    for (const qbType of ROW_DTYPES) {
      out.push({
        name: `q_rope ${s.name} qb ${qbType}`,
        kernel: pkg.qRopeKernel as AnyKernel,
        build: (R) => ({ qb: asRows(R.normals(tb.rows * qbWidth), qbType), qlat: nanF32(tb.rows * s.H * lat), invFreq, ...tb.buffers }),
        scalars: {
          batch: tb.batch, qbWidth, heads: s.H, nope: s.nope, rope: s.rope, kvLora: s.kL, idxHeads: s.idxHeads, dI: s.dI, idxRope: s.rope,
          ropeInterleave: 1, idxRopeInterleave: 0, qbDtype: FLOAT_DTYPE_CODE[qbType],
        },
        outputs: { qb: { kind: qbType, tol: rowTol(qbType, 1e-6) }, qlat: { kind: 'f32', tol: 1e-6 } },
        launch: (gpu) => pkg.rowLaunch(tb.rows, gpu.defaultStream),
      });
    }
  }
  // GLM-5.3: pool keys from rows of the step and from the ring, then the ring store.
  for (const s of [{ name: 'mini', dI: 8, P: 4, maxK: 4 }, { name: 'GLM-5.3', dI: 128, P: 16, maxK: 4 }]) {
    const maxSeqs = 3;
    const ringLen = s.maxK + s.P - 1;
    const poolCap = 40;
    // Pages of 4·P positions: 4 pool rows each.
    const pg = paged(maxSeqs, poolCap, 4);
    const seqs: Seq[] = [
      { slot: 1, len: 3 * s.P - 2, rows: 4 },   // verify: completes pool 2 from ring members and rows
      { slot: -1, len: 0, rows: 1 },
      { slot: 0, len: 0, rows: 2 * s.P + 3 },    // prefill: pools 0 and 1 from rows only
      { slot: 2, len: 5 * s.P - 1, rows: 1 },    // decode: pool 4 with P − 1 ring members
    ];
    const tb = tables(seqs);
    const kOff = 7;
    const gOff = kOff + s.dI + 2;
    const xaWidth = gOff + s.dI + 3;
    for (const idxDtype of [0, 1, 2]) {
      const outputs: Case['outputs'] = { poolCache: { kind: cacheKind(idxDtype), tol: idxDtype === 0 ? 1e-6 : 1e-3, scales: idxDtype === 2 ? 'poolScales' : undefined } };
      if (idxDtype === 2) outputs.poolScales = { kind: 'f32', tol: 1e-6 };
      out.push({
        name: `pool_append ${s.name} P=${s.P} ${DT[idxDtype]}`,
        kernel: pkg.poolAppendKernel as AnyKernel,
        build: (R) => ({
          xa: R.normals(tb.rows * xaWidth), ring: R.normals(maxSeqs * ringLen * 2 * s.dI), poolCache: cacheOf(idxDtype, pg.rows * s.dI),
          poolScales: idxDtype === 2 ? nanF32(pg.rows) : null, ape: R.normals(s.P * s.dI, 0.5), ...tb.buffers, blockTable: pg.table(R),
        }),
        scalars: { batch: tb.batch, xaWidth, kOff, gOff, dI: s.dI, kpool: s.P, ringLen, idxDtype, ...pg.scalars },
        outputs,
        launch: (gpu) => pkg.rowLaunch(tb.rows, gpu.defaultStream),
      });
    }
    out.push({
      name: `ring_store ${s.name} R=${ringLen}`,
      kernel: pkg.ringStoreKernel as AnyKernel,
      build: (R) => ({ xa: R.normals(tb.rows * xaWidth), ring: nanF32(maxSeqs * ringLen * 2 * s.dI), ...tb.buffers }),
      scalars: { batch: tb.batch, xaWidth, kOff, gOff, dI: s.dI, ringLen },
      outputs: { ring: { kind: 'f32', tol: 0 } },
      launch: (gpu) => pkg.rowLaunch(tb.rows, gpu.defaultStream),
    });
  }
  return out;
}

/** Random keys of a cache (f32 / bf16 / fp8 codes, every code but NaN, + per-key scales). */
function randomKeys(R: Rng, idxDtype: number, rows: number, dI: number): { keys: Host; scales: Float32Array | null } {
  if (idxDtype === 0) return { keys: R.normals(rows * dI), scales: null };
  if (idxDtype === 1) return { keys: toBf16(R.normals(rows * dI)), scales: null };
  const codes = new Uint8Array(rows * dI);
  for (let i = 0; i < codes.length; i++) {
    let c = R.int(0, 255);
    while ((c & 0x7f) === 0x7f) c = R.int(0, 255);
    codes[i] = c;
  }
  return { keys: codes, scales: R.uniform(rows, 0.002, 0.05) };
}

function scoreCases(): Case[] {
  const out: Case[] = [];
  const shapes = [
    { name: 'mini', dI: 8, heads: 8, kpool: 1, cap: 160 },
    { name: 'mini pools of 4', dI: 8, heads: 8, kpool: 4, cap: 40 },
    { name: 'GLM-5', dI: 128, heads: 32, kpool: 1, cap: small ? 700 : 8300 },
    { name: 'd128 × 8 heads', dI: 128, heads: 8, kpool: 1, cap: small ? 300 : 1000 },
    { name: 'd128 × 24 heads', dI: 128, heads: 24, kpool: 1, cap: small ? 300 : 1000 },
    { name: 'GLM-5.3 pools', dI: 128, heads: 32, kpool: 16, cap: small ? 40 : 600 },
  ];
  for (const s of shapes) {
    const maxSeqs = 3;
    const fast = s.dI === 128;
    const L = s.cap * s.kpool;  // positions
    const pg = paged(maxSeqs, s.cap, 16);
    for (const idxDtype of fast ? [1, 2] : [0, 1, 2]) {
      const layouts: [string, Seq[], number, number][] = [
        ['decode', [{ slot: 2, len: L - 1, rows: 1 }, { slot: -1, len: 0, rows: 1 }, { slot: 0, len: Math.floor(L / 3), rows: 1 }], 0, 3],
        ['verify k=4', [{ slot: 1, len: L - 4, rows: 4 }, { slot: 0, len: 5, rows: 4 }], 0, 8],
        ['prefill block', [{ slot: 0, len: 0, rows: 3 }, { slot: 2, len: Math.floor(L / 2), rows: 14 }], 2, 12],
      ];
      // qb in each row type: f32 for every layout; bf16 (what the bf16 data path writes) and f16 for the decode layout.
      const variants = layouts.flatMap((l): [typeof l, FloatDtype][] => (l[0] === 'decode' ? ROW_DTYPES.map((d) => [l, d]) : [[l, 'f32']]));
      for (const [[lname, seqs, rowBase, rowCount], qbType] of variants) {
        const tb = tables(seqs);
        const qIOff = 5;
        const qbWidth = qIOff + s.heads * s.dI + 2;
        const wOff = 3;
        const xaWidth = wOff + s.heads + 4;
        out.push({
          name: `index_score ${s.name} ${DT[idxDtype]} ${lname} qb ${qbType}`,
          kernel: pkg.indexScoreKernel as AnyKernel,
          build: (R) => {
            const q = R.normals(tb.rows * qbWidth);
            const { keys, scales } = randomKeys(R, idxDtype, pg.rows, s.dI);
            // The fast path rounds q_I to bf16: f32 inputs are bf16 values there so both sides compute the same scores.
            const qb = qbType === 'f32' ? (fast ? roundBf16(q) : q) : asRows(q, qbType);
            return { qb, xa: R.normals(tb.rows * xaWidth), keys, keyScales: scales, scores: nanF32(rowCount * s.cap), ...tb.buffers, blockTable: pg.table(R) };
          },
          scalars: {
            batch: tb.batch, rowBase, rowCount, qbWidth, qIOff, xaWidth, wOff, idxHeads: s.heads, dI: s.dI, kpool: s.kpool,
            ...pg.scalars, scoreStride: s.cap, idxDtype, qbDtype: FLOAT_DTYPE_CODE[qbType], scale: 1 / Math.sqrt(s.dI * s.heads),
          },
          // f16 queries on the fast path are rounded once more, to bf16, for the tensor cores.
          outputs: { scores: { kind: 'f32', tol: fast && qbType === 'f16' ? 5e-3 : 1e-5 } },
          launch: (gpu) => pkg.indexScoreLaunch(s.cap, tb.batch, { dI: s.dI, idxHeads: s.heads, idxDtype, multiprocessors: gpu.device.multiprocessors }, gpu.defaultStream),
        });
      }
    }
  }
  return out;
}

type ScoreStyle = 'distinct' | 'ties' | 'zeros' | 'equal';
/** Scores with what the tie rule must handle: ties (few distinct values), ±0, negatives, all equal. */
function randomScores(R: Rng, n: number, style: ScoreStyle): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    if (style === 'distinct') a[i] = R.normal() * 3;
    else if (style === 'ties') a[i] = Math.round(R.normal() * 4) / 4;
    else if (style === 'zeros') a[i] = R.next() < 0.5 ? (R.next() < 0.5 ? -0 : 0) : R.normal();
    else a[i] = 1.5;
  }
  return a;
}

function topkCases(): Case[] {
  const out: Case[] = [];
  const configs: { name: string; K: number; P: number; cap: number; lens: number[]; style: ScoreStyle; cache?: number }[] = [
    { name: 'mini top-6', K: 6, P: 1, cap: 160, lens: [0, 3, 5, 6, 80, 159], style: 'distinct' },
    { name: 'mini top-6 ties', K: 6, P: 1, cap: 160, lens: [20, 100, 159], style: 'ties' },
    { name: 'mini top-8 pools of 4', K: 8, P: 4, cap: 40, lens: [2, 7, 9, 13, 58, 159], style: 'ties' },
    { name: 'top-2048 ±0', K: 2048, P: 1, cap: small ? 5000 : 40_000, lens: small ? [2047, 2048, 4999] : [2047, 2048, 2049, 17_000, 39_999], style: 'zeros' },
    { name: 'top-2048 ties', K: 2048, P: 1, cap: small ? 5000 : 40_000, lens: small ? [4999] : [39_999, 9000], style: 'ties' },
    { name: 'top-2048 all equal', K: 2048, P: 1, cap: small ? 3000 : 20_000, lens: small ? [2999] : [19_999], style: 'equal' },
    { name: 'top-2048 distinct', K: 2048, P: 1, cap: small ? 5000 : 140_000, lens: small ? [4999] : [139_999, 70_000], style: 'distinct' },
    { name: 'top-2048 cache of 300 (re-read)', K: 2048, P: 1, cap: small ? 5000 : 40_000, lens: small ? [4999] : [39_999], style: 'ties', cache: 300 },
    { name: 'top-128 pools of 16', K: 2048, P: 16, cap: small ? 300 : 8192, lens: small ? [2047, 2063, 4799] : [2047, 2063, 4799, 131_071], style: 'distinct' },
  ];
  for (const c of configs) {
    const W = c.K + c.P - 1;
    const maxT = c.cap * c.P;
    const seqs: Seq[] = c.lens.map((len, i) => ({ slot: i % 3, len: Math.min(len, maxT - 1), rows: 1 }));
    seqs.splice(1, 0, { slot: -1, len: 0, rows: 1 });
    const tb = tables(seqs);
    const rowBase = 1;  // row 0 is outside the block: it must stay untouched
    const rowCount = tb.rows - 1;
    out.push({
      name: `topk ${c.name}`,
      kernel: pkg.topkKernel as AnyKernel,
      build: (R) => {
        const scores = new Float32Array(rowCount * c.cap);
        for (let r = 0; r < rowCount; r++) scores.set(randomScores(R, c.cap, c.style), r * c.cap);
        return { scores, sel: poisonI32(tb.rows * W), selCount: poisonI32(tb.rows), ...tb.buffers };
      },
      scalars: { batch: tb.batch, rowBase, rowCount, scoreStride: c.cap, selWidth: W, topk: c.K, kpool: c.P },
      outputs: { sel: { kind: 'i32' }, selCount: { kind: 'i32' } },
      launch: (gpu) => {
        const l = pkg.topkLaunch(rowCount, c.cap, gpu.defaultStream);
        return c.cache === undefined ? l : { ...l, sharedBytes: 4 * 2048 + 3 * 4 * 2048 + 512 + 4 * c.cache };
      },
    });
  }
  return out;
}

function attnCases(): Case[] {
  const out: Case[] = [];
  const shapes = [
    { name: 'mini', H: 2, kL: 10, rope: 4, K: 6, P: 1, qk: 10 },
    { name: 'GLM-5', H: 64, kL: 512, rope: 64, K: 2048, P: 1, qk: 256 },
    { name: 'GLM-5.3 NoPE', H: 64, kL: 512, rope: 0, K: 2048, P: 16, qk: 256 },
  ];
  for (const s of shapes) {
    const fast = s.H === 64;
    const lat = s.kL + s.rope;
    const W = s.K + s.P - 1;
    const cap = fast ? (small ? 400 : 3000) : 160;
    const maxSeqs = 3;
    const pg = paged(maxSeqs, cap, 16);
    const counts = fast ? (small ? [0, 1, 3, 70, 300] : [W, 1, 3, 37, 700]) : [0, 1, 6, 5];
    const seqs: Seq[] = counts.map((n, i) => ({ slot: n === 0 ? -1 : i % maxSeqs, len: cap - 1 - i, rows: 1 }));
    const tb = tables(seqs);
    const attnVariants: [number, boolean, FloatDtype][] = [];
    for (const kvDtype of [0, 1]) for (const exact of fast ? [true, false] : [true]) attnVariants.push([kvDtype, exact, 'f32']);
    // olat in the bf16 data path's type (bf16 cache), and f16 on the generic path.
    attnVariants.push([1, true, 'bf16']);
    if (!fast) attnVariants.push([0, true, 'f16']);
    for (const [kvDtype, exact, olatType] of attnVariants) {
      {
        out.push({
          name: `sparse_attn ${s.name} ${DT[kvDtype]} cache${fast ? (exact ? ', bf16-valued inputs' : ', f32 inputs') : ''}, olat ${olatType}`,
          kernel: pkg.sparseAttnKernel as AnyKernel,
          build: (R) => {
            const sel = poisonI32(tb.rows * W);
            const selCount = new Int32Array(tb.rows);
            seqs.forEach((sq, r) => {
              if (sq.slot < 0) return;
              const picks = new Set<number>();
              while (picks.size < Math.min(counts[r]!, W, sq.len + 1)) picks.add(R.int(0, sq.len));
              [...picks].sort((a, b) => a - b).forEach((v, j) => (sel[r * W + j] = v));
              selCount[r] = picks.size;
            });
            let q: Float32Array = R.normals(tb.rows * s.H * lat);
            let kv: Float32Array = R.normals(pg.rows * lat);
            if (fast && exact) {
              q = roundBf16(q);
              kv = roundBf16(kv);
            }
            return { qlat: q, kvCache: kvDtype ? toBf16(kv) : kv, sel, selCount, olat: poisonRows(tb.rows * s.H * s.kL, olatType), ...tb.buffers, blockTable: pg.table(R) };
          },
          scalars: {
            batch: tb.batch, heads: s.H, kvLora: s.kL, rope: s.rope, selWidth: W, ...pg.scalars, kvDtype, olatDtype: FLOAT_DTYPE_CODE[olatType],
            scale: 1 / Math.sqrt(s.qk),
          },
          outputs: { olat: { kind: olatType, tol: rowTol(olatType, !fast ? 1e-5 : exact ? 6e-3 : 2e-2) } },
          launch: (gpu) => pkg.sparseAttnLaunch(tb.rows, { heads: s.H, kvLora: s.kL, rope: s.rope, selWidth: W, kvDtype }, gpu.defaultStream, gpu.device.computeCapability),
        });
      }
    }
  }
  return out;
}

// ---- the suite --------------------------------------------------------------------------------

describe.skipIf(!device.available)('DSA kernels: device vs CPU twin', () => {
  let gpu: GpuBackend;
  let CpuBackend: typeof import('@metrale/cpu-backend').CpuBackend;
  const fat = new Map<string, AnyKernel>();
  const files: Record<string, string> = {
    'dsa.mla_append': 'dsa-append', 'dsa.index_append': 'dsa-append', 'dsa.pool_append': 'dsa-append', 'dsa.ring_store': 'dsa-append',
    'dsa.q_rope': 'dsa-append', 'dsa.index_score': 'dsa-index', 'dsa.topk': 'dsa-topk', 'dsa.sparse_attn': 'dsa-attn',
  };

  beforeAll(async () => {
    ({ CpuBackend } = await import('@metrale/cpu-backend'));
    gpu = device.create();
  }, 300_000);
  afterAll(() => {
    printTable();
    gpu?.dispose();
  });

  function check(c: Case, seed: number): void {
    const k = device.real ? (fat.get(c.kernel.name) ?? withFatbin(c.kernel, files[c.kernel.name]!)) : c.kernel;
    fat.set(c.kernel.name, k);
    const buffers = c.build(rng(seed));
    const got = runOn(gpu, { ...c, kernel: k }, buffers);
    const cpu = new CpuBackend({ memoryLimit: 2 ** 32 });
    let ref: Record<string, Uint8Array>;
    try {
      ref = runOn(cpu, c, buffers);
    } finally {
      cpu.dispose();
    }
    for (const [name, spec] of Object.entries(c.outputs)) {
      const rowLen = spec.scales ? (c.scalars.dI as number) : undefined;
      const gs = spec.scales ? new Float32Array(got[spec.scales]!.slice().buffer) : undefined;
      const rs = spec.scales ? new Float32Array(ref[spec.scales]!.slice().buffer) : undefined;
      compare(c.name, name, spec.kind, decode(spec.kind, got[name]!, gs, rowLen), decode(spec.kind, ref[name]!, rs, rowLen), spec.tol ?? 0);
    }
  }

  const groups: [string, () => Case[]][] = [
    ['append kernels', appendCases], ['index scores', scoreCases], ['top-k', topkCases], ['sparse attention', attnCases],
  ];
  for (const [group, make] of groups) {
    describe(group, () => {
      for (const c of make()) {
        const seed = nextSeed();
        it(c.name, () => check(c, seed));
      }
    });
  }
});
