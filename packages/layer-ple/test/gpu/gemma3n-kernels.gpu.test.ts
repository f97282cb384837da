// Gemma 3n's kernels (kernels/altup.cu, kernels/gemma3n-rows.cu) on CUDA against their CPU twins
// (src/altup.cpu.ts, src/gemma3n-rows.cpu.ts): the same declarations launched on both backends with
// the launch shapes the layers use, over identical random buffers (outputs poisoned with NaN
// first), compared by relative L2 error of the decoded values. In every row type (f32, bf16, f16),
// at the E4B width (H 2048, 4 streams, active 0) and at odd ones (H 40 / 13, 3 / 2 streams, active
// index ≠ 0); a grid smaller than the rows (the row loop's stride), the strided layouts the layers
// use, in-place sums, and copies between row types with and without a scale.
// Bounds (STEP): the GPU computes in f32 where the twin computes in f64, so a bf16 / f16 value can
// round the other way by one step of its type. ROW_STEP: AltUp rounds row-wide scalars to the row
// type (the modalities, the coefficients, the RMS ratio), and one of those rounding the other way
// moves a whole row by up to one step. Without a GPU it skips and says why.
import { CpuBackend } from '@metrale/cpu-backend';
import { FLOAT_DTYPE_CODE, SeededRandom, roundTo, type FloatDtype, type GpuBackend, relativeL2Error } from '@metrale/core';
import {
  decodeRows as decode, encodeRows as encode, runKernelOnBoth, type KernelBuffers as Bufs, type KernelOutputs as Outputs, type KernelPointers as Ptrs,
} from '@metrale/core/testing';
import {
  altupCorrectKernel, altupPredictKernel, copyKernel, flatLaunch, magnitudeKernel, normAddKernel, pleAddKernel, rowLaunch, streamsMeanKernel, sum3Kernel,
} from '@metrale/layer-ple';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {  } from '../ple-reference.js';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

const cuda = await cudaAvailable();
if (!cuda.available) console.warn(`[layer-ple gpu] Gemma 3n kernel tests skipped: ${cuda.reason}`);

const STEP: Readonly<Record<FloatDtype, number>> = { f32: 1e-5, bf16: 2e-3, f16: 5e-4 };
const ROW_STEP: Readonly<Record<FloatDtype, number>> = { f32: 1e-5, bf16: 4e-3, f16: 1e-3 };
const ROW_TYPES: readonly FloatDtype[] = ['f32', 'bf16', 'f16'];
/** [H, n, active]: E4B's width and streams, then odd widths with the active stream inside. */
const SHAPES = [[2048, 4, 0], [40, 3, 2], [13, 2, 1]] as const;
const ROWS = 5;

let cudaGpu: GpuBackend | undefined;
const results: string[] = [];
const random = new SeededRandom(Number(process.env.METRALE_PLE_SEED ?? 2026));

/** Random rows stored as `dtype`. */
const rows = (n: number, dtype: FloatDtype, scale = 1): ArrayBufferView => encode(random.normals(n, scale), dtype);
const poison = (n: number, dtype: FloatDtype): ArrayBufferView => encode(new Float32Array(n).fill(Number.NaN), dtype);
/** f32 weights holding row-type values, as the layers upload them (asRowValues). */
const weights = (n: number, dtype: FloatDtype, scale: number, offset = 0): Float32Array =>
  random.normals(n, scale).map((v) => (dtype === 'f32' ? offset + v : roundTo(dtype, offset + v)));

function compare(label: string, dtype: FloatDtype, out: { cpu: Outputs; cuda: Outputs }, name: string, bound = STEP[dtype]): void {
  const want = decode(out.cpu[name]!, dtype);
  const got = decode(out.cuda[name]!, dtype);
  expect(want.some((v) => Number.isNaN(v)), `${label}: the CPU twin left NaN`).toBe(false);
  expect(got.some((v) => Number.isNaN(v)), `${label}: CUDA left NaN (poison) in the output`).toBe(false);
  const rel = relativeL2Error(got, want);
  const differing = want.reduce((n, v, i) => n + (got[i] !== v ? 1 : 0), 0);
  results.push(`${label.padEnd(60)} rel ${rel.toExponential(2)} (${differing}/${want.length} differ)`);
  expect(rel, label).toBeLessThanOrEqual(bound);
}

const run = (bufs: Bufs, launch: (gpu: GpuBackend, p: Ptrs) => void, outputs: string[]) => runKernelOnBoth(() => new CpuBackend(), cudaGpu!, bufs, launch, outputs);

describe.skipIf(!cuda.available)('Gemma 3n kernels on CUDA match their CPU twins', () => {
  beforeAll(() => {
    ensureFatbins();
    cudaGpu = cuda.create!();
  });
  afterAll(() => {
    cudaGpu?.dispose();
    console.log(`[layer-ple gpu] Gemma 3n kernels vs CPU twins (${results.length} comparisons):\n  ${results.join('\n  ')}`);
  });

  for (const dtype of ROW_TYPES) {
    const code = FLOAT_DTYPE_CODE[dtype];
    for (const [H, n, active] of SHAPES) {
      const tag = `${dtype} H=${H} n=${n} k=${active}`;
      const router = () => ({ routerNorm: weights(H, dtype, 0.3, 1), router: weights(n * H, dtype, 0.5) });

      it(`${tag}: gemma3n.altup_predict and gemma3n.altup_correct (also with a grid of 2 CTAs)`, () => {
        const w = router();
        const bufs = {
          streams: rows(ROWS * n * H, dtype), pred: poison(ROWS * n * H, dtype), predSmall: poison(ROWS * n * H, dtype), pCoefs: weights(n * n * n, dtype, 0.4),
          input: rows(ROWS * (n + 1) * H, dtype), corr: poison(ROWS * n * H, dtype), cCoefs: weights(n * n, dtype, 0.4), ...w,
        };
        const r = run(bufs, (gpu, p) => {
          const common = { routerNorm: p.routerNorm!, router: p.router!, rows: ROWS, hidden: H, n, active, eps: 1e-6, dtype: code };
          const launch = rowLaunch(ROWS, H, gpu.defaultStream);
          gpu.launch(altupPredictKernel, launch, { streams: p.streams!, pred: p.pred!, coefs: p.pCoefs!, ...common });
          gpu.launch(altupPredictKernel, { ...launch, grid: 2 }, { streams: p.streams!, pred: p.predSmall!, coefs: p.pCoefs!, ...common });
          gpu.launch(altupCorrectKernel, launch, { input: p.input!, corr: p.corr!, coefs: p.cCoefs!, ...common });
        }, ['pred', 'predSmall', 'corr']);
        compare(`${tag} altup_predict`, dtype, r, 'pred', ROW_STEP[dtype]);
        compare(`${tag} altup_predict, grid 2`, dtype, r, 'predSmall', ROW_STEP[dtype]);
        compare(`${tag} altup_correct`, dtype, r, 'corr', ROW_STEP[dtype]);
      });

      it(`${tag}: gemma3n.magnitude into stream i of n (stream init) and gemma3n.streams_mean`, () => {
        // `out` starts random, not poisoned: streams 1 … n − 2 are left as they were on both sides.
        const bufs = { target: rows(ROWS * n * H, dtype, 2), y: rows(ROWS * H, dtype, 0.5), out: rows(ROWS * n * H, dtype), mean: poison(ROWS * H, dtype) };
        const at = BigInt((n - 1) * H * (dtype === 'f32' ? 4 : 2));
        const r = run(bufs, (gpu, p) => {
          const launch = rowLaunch(ROWS, H, gpu.defaultStream);
          gpu.launch(magnitudeKernel, launch, { target: p.target!, targetStride: n * H, y: p.y!, out: p.out!, outStride: n * H, rows: ROWS, hidden: H, dtype: code });
          gpu.launch(magnitudeKernel, launch, { target: p.target!, targetStride: n * H, y: p.y!, out: p.out! + at, outStride: n * H, rows: ROWS, hidden: H, dtype: code });
          gpu.launch(streamsMeanKernel, launch, { streams: p.target!, out: p.mean!, rows: ROWS, hidden: H, n, dtype: code });
        }, ['out', 'mean']);
        compare(`${tag} magnitude into streams 0 and ${n - 1}`, dtype, r, 'out', ROW_STEP[dtype]);
        compare(`${tag} streams_mean`, dtype, r, 'mean');
      });

      it(`${tag}: gemma3n.ple_add and gemma3n.norm_add (Laurel's end)`, () => {
        const bufs = {
          streams: rows(ROWS * n * H, dtype), y: rows(ROWS * H, dtype), x: rows(ROWS * H, dtype), t: rows(ROWS * H, dtype, 3),
          w: weights(H, dtype, 0.3, 1), out: poison(ROWS * H, dtype),
        };
        const r = run(bufs, (gpu, p) => {
          const launch = rowLaunch(ROWS, H, gpu.defaultStream);
          gpu.launch(pleAddKernel, launch, { streams: p.streams!, y: p.y!, rows: ROWS, hidden: H, n, dtype: code });
          gpu.launch(normAddKernel, launch, { x: p.x!, t: p.t!, weight: p.w!, out: p.out!, rows: ROWS, hidden: H, eps: 1e-6, dtype: code });
        }, ['streams', 'out']);
        compare(`${tag} ple_add`, dtype, r, 'streams');
        compare(`${tag} norm_add`, dtype, r, 'out');
      });
    }

    it(`${dtype}: gemma3n.sum3 (with and without c, out aliasing a) over 10 001 values`, () => {
      const count = 10_001;
      const bufs = { a: rows(count, dtype), b: rows(count, dtype), c: rows(count, dtype), out: poison(count, dtype) };
      const r = run(bufs, (gpu, p) => {
        const launch = flatLaunch(count, gpu.defaultStream);
        gpu.launch(sum3Kernel, launch, { a: p.a!, b: p.b!, c: p.c!, out: p.out!, count, scale: Math.SQRT1_2, dtype: code });
        gpu.launch(sum3Kernel, launch, { a: p.a!, b: p.b!, c: 0n, out: p.a!, count, scale: 1, dtype: code });
      }, ['out', 'a']);
      compare(`${dtype} sum3 (a + b + c) / sqrt 2`, dtype, r, 'out');
      compare(`${dtype} sum3 a + b in place`, dtype, r, 'a');
    });

    for (const to of ROW_TYPES) {
      it(`gemma3n.copy ${dtype} → ${to}: a strided stream out of n, with and without a scale`, () => {
        const [H, n, k] = [40, 3, 1];
        const bufs = { src: rows(ROWS * n * H, dtype), scale: random.normals(H), plain: poison(ROWS * H, to), scaled: poison(ROWS * (n + 1) * H, to) };
        const at = BigInt(k * H * (dtype === 'f32' ? 4 : 2));
        const r = run(bufs, (gpu, p) => {
          const base = { srcStride: n * H, rows: ROWS, hidden: H, srcDtype: code, dstDtype: FLOAT_DTYPE_CODE[to] };
          gpu.launch(copyKernel, rowLaunch(ROWS, H, gpu.defaultStream), { ...base, src: p.src! + at, dst: p.plain!, dstStride: H, scale: 0n });
          gpu.launch(copyKernel, rowLaunch(ROWS, n * H, gpu.defaultStream), { ...base, hidden: n * H, src: p.src!, dst: p.scaled!, dstStride: (n + 1) * H, scale: 0n });
          gpu.launch(copyKernel, { ...rowLaunch(ROWS, H, gpu.defaultStream), grid: 2 }, { ...base, src: p.src! + at, dst: p.scaled! + BigInt(n * H * (to === 'f32' ? 4 : 2)), dstStride: (n + 1) * H, scale: p.scale! });
        }, ['plain', 'scaled']);
        compare(`copy ${dtype} → ${to}`, to, r, 'plain');
        compare(`copy ${dtype} → ${to}, n streams then the scaled active one`, to, r, 'scaled');
      });
    }
  }
});
