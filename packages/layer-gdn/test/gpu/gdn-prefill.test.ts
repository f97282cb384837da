// GPU tests of the chunked prefill (kernels/gdn-chunk.cu: gdn_prefill_wy, gdn_prefill_scan,
// gdn_prefill_norm, launched as gdn-prefill-launch.ts does): on random data, against the CPU
// reference (the row-by-row `gdn.chunk`, chunkCpu, float64) and against the row-by-row CUDA
// oracle (gdn-chunk-rowwise.cu); y, state and ring compared by relative L2 error, outputs
// poisoned with NaN first. Lengths 1, 63, 64, 65, 200, ragged batches with padding, sequences
// continuing with history and with pending carried rows, H_v/H_k 1, 2, 3, 4, d_k ≠ d_v, d_v > 128
// (the unfused norm), and the Qwen3-Next-80B shape at 8192 rows and 4 × 2048 rows (against the
// CUDA oracle). Both builds: exact (bound EXACT_TOL) and fast (bf16 operands, bound FAST_TOL).
// On sm_90 both the fused norm (clusters) and the separate norm kernel run.
//
// Run: node ../../node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts test/gpu/gdn-prefill.test.ts
// Kernels: METRALE_GDN_FATBIN_DIR/<file>.fatbin when set (bench/gdn-prefill-check.sh builds them),
// else compiled here from kernels/*.cu with nvcc for this device only. Without a GPU the suite
// skips. METRALE_GDN_SEED=n repeats a run; METRALE_GDN_DEVICE_MODULE=/path.mjs (development only)
// replaces the CUDA backend (e.g. a CPU emulator of the kernels; the 80B cases then need
// METRALE_GDN_BIG=1).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { defineKernelModule, type GpuBackend, type Kernel, type KernelParams } from '@metrale/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chunkKernel as chunkDecl } from '../../src/gdn-kernels.js';
import { prefillKernels as prefillDecls } from '../../src/gdn-prefill-kernels.js';
import type { PrefillKernels } from '../../src/gdn-prefill-launch.js';
import { diff, layoutOf, OUTPUTS, randomHost, rng, runChunked, runRowwise, type OutputName, type PShape } from '../prefill-harness.js';

const here = dirname(fileURLToPath(import.meta.url));
const pkgDir = join(here, '..', '..');

interface DeviceChoice {
  readonly available: boolean;
  readonly reason: string;
  readonly real: boolean;
  readonly create?: () => GpuBackend;
}

async function chooseDevice(): Promise<DeviceChoice> {
  const hook = process.env.METRALE_GDN_DEVICE_MODULE;
  if (hook) {
    const m = (await import(pathToFileURL(hook).href)) as { createDevice: () => GpuBackend; reason?: string };
    return { available: true, reason: m.reason ?? hook, real: false, create: () => m.createDevice() };
  }
  let cb: typeof import('@metrale/cuda-backend');
  try {
    cb = await import('@metrale/cuda-backend');
  } catch (error) {
    return { available: false, real: true, reason: `@metrale/cuda-backend could not be loaded (${(error as Error).message}); build the workspace first` };
  }
  const p = cb.probe();
  if (!p.available) return { available: false, real: true, reason: p.reason };
  return { available: true, real: true, reason: p.reason, create: () => cb.CudaBackend.create() };
}

function findNvcc(): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/local/cuda/bin']) {
    if (dir && existsSync(join(dir, 'nvcc'))) return join(dir, 'nvcc');
  }
  return undefined;
}

/**
 * The fatbin of kernels/<file>.cu: METRALE_GDN_FATBIN_DIR's, else the package build's (dist/kernels,
 * sm_80 + sm_90a + PTX), else compiled now for compute capability cc (minutes for gdn-chunk.cu).
 */
function fatbinFor(file: string, cc: readonly [number, number]): string {
  const dir = process.env.METRALE_GDN_FATBIN_DIR;
  if (dir && existsSync(join(dir, `${file}.fatbin`))) return join(dir, `${file}.fatbin`);
  const built = join(pkgDir, 'dist', 'kernels', `${file}.fatbin`);
  if (existsSync(built)) return built;
  const nvcc = findNvcc();
  if (!nvcc) throw new Error(`no METRALE_GDN_FATBIN_DIR/${file}.fatbin and no nvcc to compile kernels/${file}.cu`);
  const out = join(tmpdir(), `metrale-gdn-prefill-${process.pid}`);
  mkdirSync(out, { recursive: true });
  const path = join(out, `${file}.fatbin`);
  const arch = `${cc[0]}${cc[1]}${cc[0] === 9 ? 'a' : ''}`;
  execFileSync(nvcc, ['-fatbin', '-O3', '-std=c++17', `-gencode=arch=compute_${arch},code=sm_${arch}`, '-o', path, join(pkgDir, 'kernels', `${file}.cu`)], { stdio: 'inherit' });
  return path;
}

function withModule<K extends { readonly cuda?: { readonly module: { readonly name: string }; readonly symbol: string } }>(
  k: K, file: string, cc: readonly [number, number],
): K {
  const cuda = k.cuda!;
  return Object.freeze({ ...k, cuda: { module: defineKernelModule(cuda.module.name, fatbinFor(file, cc)), symbol: cuda.symbol } }) as K;
}

const device = await chooseDevice();
if (!device.available) console.warn(`[layer-gdn gpu] prefill suite skipped: ${device.reason}`);

const baseSeed = Number(process.env.METRALE_GDN_SEED ?? Date.now() % 1_000_000_007);
/** Bounds: exact build (bf16 hi/lo pairs) and fast build (bf16 operands). */
const EXACT_TOL = 1e-4;
const FAST_TOL = 3e-2;

const SHAPES: readonly PShape[] = [
  { name: 'r1 dk64 dv64', hk: 1, hv: 1, dk: 64, dv: 64, K: 4, maxK: 4, maxSeqs: 5 },
  { name: 'r2 dk128 dv128', hk: 2, hv: 4, dk: 128, dv: 128, K: 4, maxK: 4, maxSeqs: 5 },
  { name: 'r4 dk64 dv128', hk: 1, hv: 4, dk: 64, dv: 128, K: 4, maxK: 5, maxSeqs: 4 },
  { name: 'r2 dk128 dv64', hk: 2, hv: 4, dk: 128, dv: 64, K: 4, maxK: 4, maxSeqs: 4 },
  { name: 'r3 dk48 dv40 K3', hk: 2, hv: 6, dk: 48, dv: 40, K: 3, maxK: 6, maxSeqs: 4 },
  { name: 'r2 dk6 dv5', hk: 2, hv: 4, dk: 6, dv: 5, K: 4, maxK: 4, maxSeqs: 4 },
  { name: 'r2 dk64 dv192 (norm kernel)', hk: 1, hv: 2, dk: 64, dv: 192, K: 4, maxK: 4, maxSeqs: 4 },
];

interface Case {
  readonly name: string;
  readonly seqs: readonly { rows: number; len: number; pending?: number }[];
  readonly carried?: boolean;
}
const CASES: readonly Case[] = [
  { name: '1 row', seqs: [{ rows: 1, len: 0 }] },
  { name: '63 rows, history', seqs: [{ rows: 63, len: 7 }] },
  { name: '64 rows', seqs: [{ rows: 64, len: 0 }] },
  { name: '65 rows, history 2', seqs: [{ rows: 65, len: 2 }] },
  { name: '200 rows + padding + 1 row', seqs: [{ rows: 200, len: 0 }, { rows: -3, len: 0 }, { rows: 1, len: 30 }] },
  { name: 'ragged 70/5/129/1, history', seqs: [{ rows: 70, len: 3 }, { rows: 5, len: 0 }, { rows: 129, len: 41 }, { rows: 1, len: 1 }] },
  { name: 'carried: 90 rows pending 3, 2 rows pending 1, 0 rows pending 2', seqs: [{ rows: 90, len: 11, pending: 3 }, { rows: 2, len: 4, pending: 1 }, { rows: 0, len: 5, pending: 2 }], carried: true },
];

interface Row {
  readonly name: string;
  readonly vs: string;
  readonly buffer: OutputName;
  readonly rel: number;
  readonly nan: number;
  readonly tol: number;
}
const table: Row[] = [];

function compare(name: string, vs: string, got: Record<OutputName, Float32Array>, ref: Record<OutputName, Float32Array>, tol: number): void {
  for (const b of OUTPUTS) {
    const d = diff(got[b], ref[b]);
    table.push({ name, vs, buffer: b, rel: d.rel, nan: d.nanMismatch, tol });
    expect(d.nanMismatch, `${name} vs ${vs}, ${b}: written on one side only`).toBe(0);
    expect(d.rel, `${name} vs ${vs}, ${b}: relative L2 error`).toBeLessThanOrEqual(tol);
    expect(Number.isFinite(d.rel)).toBe(true);
  }
}

describe.skipIf(!device.available)('chunked prefill on CUDA vs the CPU reference and the row-by-row oracle', () => {
  let gpu: GpuBackend;
  let CpuBackend: typeof import('@metrale/cpu-backend').CpuBackend;
  let kernels: PrefillKernels;
  let rowwise: Kernel<KernelParams>;
  let clusters = false;

  beforeAll(async () => {
    ({ CpuBackend } = await import('@metrale/cpu-backend'));
    gpu = device.create!();
    const cc = gpu.device.computeCapability;
    clusters = cc[0] >= 9;
    if (device.real) {
      kernels = {
        wy: withModule(prefillDecls.wy, 'gdn-chunk', cc),
        wyExact: withModule(prefillDecls.wyExact, 'gdn-chunk', cc),
        scan: withModule(prefillDecls.scan, 'gdn-chunk', cc),
        scanExact: withModule(prefillDecls.scanExact, 'gdn-chunk', cc),
        scanC4: withModule(prefillDecls.scanC4, 'gdn-chunk', cc),
        scanC4Exact: withModule(prefillDecls.scanC4Exact, 'gdn-chunk', cc),
        norm: withModule(prefillDecls.norm, 'gdn-chunk', cc),
      };
      rowwise = withModule(chunkDecl as unknown as Kernel<KernelParams>, 'gdn-chunk-rowwise', cc);
    } else {
      kernels = prefillDecls;
      rowwise = chunkDecl as unknown as Kernel<KernelParams>;
    }
  }, 600_000);
  afterAll(() => {
    if (table.length) {
      const w = Math.max(...table.map((r) => r.name.length));
      const lines = table.map((r) => `${r.name.padEnd(w)}  ${r.vs.padEnd(9)}  ${r.buffer.padEnd(8)}  ${r.rel.toExponential(2).padStart(9)}  ${String(r.nan).padStart(3)}  ${r.rel <= r.tol && r.nan === 0 ? 'ok' : 'FAIL'}`);
      console.log(`chunked prefill, CUDA vs references (seed ${baseSeed}, device: ${device.reason})\n${lines.join('\n')}`);
    }
    gpu?.dispose();
  });

  let caseNo = 0;
  for (const s of SHAPES) {
    for (const c of CASES) {
      const seed = baseSeed + 7919 * caseNo++;
      it(`${s.name} | ${c.name}`, () => {
        const R = rng(seed);
        const layout = layoutOf(s, R, c.seqs);
        const host = randomHost(s, layout, R);
        const carried = c.carried === true;
        const cpu = new CpuBackend({ memoryLimit: 2 ** 31 });
        let ref;
        try {
          ref = runRowwise(cpu, chunkDecl as never, s, host, carried);
        } finally {
          cpu.dispose();
        }
        // The row-by-row kernel is the oracle at every shape (d_v ≤ 256). Its reported disagreement
        // at d_v = 192 was the harness's: that shape had 3 slots for the 4-sequence ragged case, so
        // two positions shared a slot (layoutOf now refuses that); on the H200 it agrees to ~2e-7.
        const oracle = runRowwise(gpu, rowwise, s, host, carried);
        compare(`${s.name} | ${c.name} | oracle`, 'cpu', oracle, ref, 1e-4);
        const variants = [
          ...(clusters ? [{ fuse: true, cluster: 2 as const }, { fuse: true, cluster: 4 as const }] : []),
          { fuse: false, cluster: 2 as const },
          { fuse: false, cluster: 4 as const },
        ];
        for (const exact of [true, false]) {
          for (const { fuse, cluster } of variants) {
            const got = runChunked(gpu, kernels, s, host, carried, { exact, clusters: fuse, cluster });
            const name = `${s.name} | ${c.name} | ${exact ? 'exact' : 'fast'}${fuse ? ' fused' : ''} c${cluster}`;
            compare(name, 'cpu', got, ref, exact ? EXACT_TOL : FAST_TOL);
            compare(name, 'oracle', got, oracle, exact ? EXACT_TOL : FAST_TOL);
          }
        }
      });
    }
  }

  const big: PShape = { name: '80B', hk: 16, hv: 32, dk: 128, dv: 128, K: 4, maxK: 4, maxSeqs: 6 };
  it.skipIf(!device.real && !process.env.METRALE_GDN_BIG)('80B shape, 2 × 150 rows (fresh and with history): vs the CPU reference', () => {
    const R = rng(baseSeed + 41);
    const layout = layoutOf(big, R, [{ rows: 150, len: 0 }, { rows: 150, len: 37 }]);
    const host = randomHost(big, layout, R);
    const cpu = new CpuBackend({ memoryLimit: 2 ** 31 });
    let ref;
    try {
      ref = runRowwise(cpu, chunkDecl as never, big, host, false);
    } finally {
      cpu.dispose();
    }
    for (const exact of [true, false]) {
      for (const [fuse, cluster] of [[clusters, 2], [clusters, 4], [false, 2]] as const) {
        const got = runChunked(gpu, kernels, big, host, false, { exact, clusters: fuse, cluster });
        compare(`80B 2×150 | ${exact ? 'exact' : 'fast'}${fuse ? ' fused' : ''} c${cluster}`, 'cpu', got, ref, exact ? EXACT_TOL : FAST_TOL);
      }
    }
  });

  for (const [label, seqs] of [
    ['8192 rows, 1 sequence', [{ rows: 8192, len: 0 }]],
    ['4 × 2048 rows, history, carried', [{ rows: 2048, len: 100, pending: 2 }, { rows: 2048, len: 0 }, { rows: 2048, len: 3, pending: 3 }, { rows: 2048, len: 5000 }]],
  ] as const) {
    it.skipIf(!device.real && !process.env.METRALE_GDN_BIG)(`80B shape, ${label}: vs the row-by-row CUDA oracle`, () => {
      const R = rng(baseSeed + 43 + label.length);
      const layout = layoutOf(big, R, seqs);
      const host = randomHost(big, layout, R);
      const carried = label.includes('carried');
      const oracle = runRowwise(gpu, rowwise, big, host, carried);
      for (const exact of [true, false]) {
        for (const [fuse, cluster] of [[clusters, 2], [clusters, 4], [false, 2]] as const) {
          const got = runChunked(gpu, kernels, big, host, carried, { exact, clusters: fuse, cluster });
          compare(`80B ${label} | ${exact ? 'exact' : 'fast'}${fuse ? ' fused' : ''} c${cluster}`, 'oracle', got, oracle, exact ? EXACT_TOL : FAST_TOL);
        }
      }
    });
  }
});
