// Gemma 3n's AltUp (stream init, predict, correct, unembedding) and Laurel layers against float64
// references written from Hugging Face's Gemma3nTextAltUp / Gemma3nTextLaurelBlock / Gemma3nTextModel
// (docs/models/gemma3n-text.md, steps 3, 5 and 7), through a one-layer driver on the CPU backend.
import { CpuBackend } from '@metrale/cpu-backend';
import { FLOAT_DTYPE_CODE, MemoryWeightSource, SeededRandom, StepDriver, roundTo, tensorOf, type FloatDtype, type LayerLimits, type TransformerLayer, relativeL2Error } from '@metrale/core';
import { decodeRows, encodeRows, runKernelOn } from '@metrale/core/testing';
import { AltUpCorrectLayer, AltUpPredictLayer, AltUpStreamsIn, AltUpStreamsOut, LaurelLayer, altupPredictKernel, rowLaunch } from '@metrale/layer-ple';
import { describe, expect, it } from 'vitest';

const [H, N, K, R, ROWS, EPS] = [12, 4, 1, 5, 3, 1e-6];
const LIMITS: LayerLimits = { maxSeqs: 1, maxSeqLen: 16, maxBatch: 1, maxK: 1, maxRows: 8 };
const rnd = new SeededRandom(11);
const values = new Map<string, Float32Array>();
const tensors = [
  ['router_norm.weight', [H], 0.3, 1], ['modality_router.weight', [N, H], 0.5, 0], ['prediction_coefs.weight', [N * N, N], 0.4, 0],
  ['correction_coefs.weight', [N, N], 0.4, 0], ['linear_left.weight', [R, H], 0.4, 0], ['linear_right.weight', [H, R], 0.4, 0],
  ['post_laurel_norm.weight', [H], 0.3, 1],
  ...Array.from({ length: N - 1 }, (_, i) => [`altup_projections.${i}.weight`, [H, H], 0.3, 0]),
  ...Array.from({ length: N - 1 }, (_, i) => [`altup_unembed_projections.${i}.weight`, [H, H], 0.3, 0]),
].map(([name, shape, scale, offset]) => {
  const n = (shape as number[]).reduce((a, b) => a * b, 1);
  const v = Float32Array.from({ length: n }, () => (offset as number) + (scale as number) * rnd.normal());
  values.set(name as string, v);
  return tensorOf(name as string, v, shape as number[]);
});
const weights = new MemoryWeightSource('altup test', tensors);
const w = (name: string) => values.get(name)!;

function run(make: (gpu: CpuBackend) => TransformerLayer, input: Float32Array): Float32Array {
  const gpu = new CpuBackend();
  const layer = make(gpu);
  const driver = new StepDriver({ gpu, layers: [layer], limits: LIMITS });
  try {
    return driver.readOutputF32(driver.prefill({ seqs: [driver.open()], lengths: [ROWS], input }));
  } finally {
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  }
}

const matvec = (m: Float32Array, x: ArrayLike<number>, out: number, inp: number) =>
  Float64Array.from({ length: out }, (_, o) => Array.from({ length: inp }, (_, i) => m[o * inp + i]! * x[i]!).reduce((a, b) => a + b, 0));
const rms = (x: ArrayLike<number>) => Math.sqrt(Array.from(x).reduce((a, v) => a + v * v, 0) / x.length);
const normed = (x: ArrayLike<number>, wt: ArrayLike<number>) => {
  const inv = 1 / Math.sqrt(rms(x) ** 2 + EPS);
  return Float64Array.from(x, (v, i) => v * inv * wt[i]!);
};
const modalities = (x: ArrayLike<number>) => matvec(w('modality_router.weight'), normed(x, w('router_norm.weight')).map((v) => v / H), N, H).map(Math.tanh);
const altup = { hidden: H, streams: N, active: K, eps: EPS };

describe('AltUp and Laurel layers against float64 references', () => {
  it('predict: pred_j = s_j + Σ_i prediction_coefs(m)[j·n + i] s_i, m from the active stream (index 1)', () => {
    const s = rnd.normals(ROWS * N * H);
    const got = run((gpu) => new AltUpPredictLayer(gpu, weights, LIMITS, altup), s);
    const want = new Float64Array(ROWS * N * H);
    for (let r = 0; r < ROWS; r++) {
      const st = (j: number) => s.subarray((r * N + j) * H, (r * N + j + 1) * H);
      const coefs = matvec(w('prediction_coefs.weight'), modalities(st(K)), N * N, N);
      for (let j = 0; j < N; j++) for (let h = 0; h < H; h++) {
        want[(r * N + j) * H + h] = st(j)[h]! + Array.from({ length: N }, (_, i) => coefs[j * N + i]! * st(i)[h]!).reduce((a, b) => a + b, 0);
      }
    }
    expect(relativeL2Error(got, want)).toBeLessThan(1e-6);
  });

  it('correct: corr_j = pred_j + (correction_coefs(m′)_j + 1)(o − pred_k), m′ from o', () => {
    const x = rnd.normals(ROWS * (N + 1) * H);
    const got = run((gpu) => new AltUpCorrectLayer(gpu, weights, LIMITS, altup), x);
    const want = new Float64Array(ROWS * N * H);
    for (let r = 0; r < ROWS; r++) {
      const row = x.subarray(r * (N + 1) * H, (r + 1) * (N + 1) * H);
      const o = row.subarray(N * H);
      const c = matvec(w('correction_coefs.weight'), modalities(o), N, N);
      for (let j = 0; j < N; j++) for (let h = 0; h < H; h++) want[(r * N + j) * H + h] = row[j * H + h]! + (c[j]! + 1) * (o[h]! - row[K * H + h]!);
    }
    expect(relativeL2Error(got, want)).toBeLessThan(1e-6);
  });

  it('streams in and out: projections rescaled to stream 0\'s RMS (no ε), then their mean', () => {
    const x0 = rnd.normals(ROWS * H);
    const streams = run((gpu) => new AltUpStreamsIn(gpu, weights, LIMITS, { hidden: H, streams: N }), x0);
    const wantIn = new Float64Array(ROWS * N * H);
    const rescaled = (y: Float64Array, target: ArrayLike<number>) => y.map((v) => (v * rms(target)) / Math.sqrt(Math.max(rms(y) ** 2, 1e-5)));
    for (let r = 0; r < ROWS; r++) {
      const x = x0.subarray(r * H, (r + 1) * H);
      wantIn.set(x, r * N * H);
      for (let i = 1; i < N; i++) wantIn.set(rescaled(matvec(w(`altup_projections.${i - 1}.weight`), x, H, H), x), (r * N + i) * H);
    }
    expect(relativeL2Error(streams, wantIn)).toBeLessThan(1e-6);
    const out = run((gpu) => new AltUpStreamsOut(gpu, weights, LIMITS, { hidden: H, streams: N }), streams);
    const wantOut = new Float64Array(ROWS * H);
    for (let r = 0; r < ROWS; r++) {
      const st = (j: number) => streams.subarray((r * N + j) * H, (r * N + j + 1) * H);
      const us = [Float64Array.from(st(0)), ...Array.from({ length: N - 1 }, (_, i) => rescaled(matvec(w(`altup_unembed_projections.${i}.weight`), st(i + 1), H, H), st(0)))];
      for (let h = 0; h < H; h++) wantOut[r * H + h] = us.reduce((a, u) => a + u[h]!, 0) / N;
    }
    expect(relativeL2Error(out, wantOut)).toBeLessThan(1e-6);
  });

  it('Laurel: x + post_laurel_norm(linear_right(linear_left(x)))', () => {
    const x = rnd.normals(ROWS * H);
    const got = run((gpu) => new LaurelLayer(gpu, weights, LIMITS, { hidden: H, rank: R, eps: EPS }), x);
    const want = new Float64Array(ROWS * H);
    for (let r = 0; r < ROWS; r++) {
      const xr = x.subarray(r * H, (r + 1) * H);
      const t = normed(matvec(w('linear_right.weight'), matvec(w('linear_left.weight'), xr, R, H), H, R), w('post_laurel_norm.weight'));
      for (let h = 0; h < H; h++) want[r * H + h] = xr[h]! + t[h]!;
    }
    expect(relativeL2Error(got, want)).toBeLessThan(1e-6);
  });

  it('refuses an active index outside the streams, naming the field', () => {
    expect(() => run((gpu) => new AltUpPredictLayer(gpu, weights, LIMITS, { ...altup, active: N }), new Float32Array(ROWS * N * H))).toThrow(/altup_active_idx/);
  });
});

describe('AltUp\'s router in bf16 / f16 rounds where Hugging Face holds the row type', () => {
  // H = 12: 1 / H is not a row-type value, so router_input_scale (a bf16 buffer in HF) differs from it.
  for (const dtype of ['bf16', 'f16'] as const satisfies readonly FloatDtype[]) {
    it(`${dtype}: router_norm(x) rounded once, × the row type's 1 / H, rounded; the router's output rounded before the tanh`, () => {
      const R = (v: number) => roundTo(dtype, v);
      expect(R(1 / H)).not.toBe(Math.fround(1 / H));
      const rv = (name: string) => Float32Array.from(w(name), R);
      const [norm, router, coefs] = [rv('router_norm.weight'), rv('modality_router.weight'), rv('prediction_coefs.weight')];
      const s = Float32Array.from(rnd.normals(ROWS * N * H), R);
      const cpu = new CpuBackend();
      try {
        const out = runKernelOn(cpu, { streams: encodeRows(s, dtype), pred: encodeRows(new Float32Array(ROWS * N * H), dtype), coefs, norm, router }, (gpu, p) =>
          gpu.launch(altupPredictKernel, rowLaunch(ROWS, H, gpu.defaultStream), {
            streams: p.streams!, pred: p.pred!, coefs: p.coefs!, routerNorm: p.norm!, router: p.router!, rows: ROWS, hidden: H, n: N, active: K, eps: EPS, dtype: FLOAT_DTYPE_CODE[dtype],
          }), ['pred']);
        const want = new Float64Array(ROWS * N * H);
        for (let r = 0; r < ROWS; r++) {
          const st = (j: number) => s.subarray((r * N + j) * H, (r * N + j + 1) * H);
          const input = normed(st(K), norm).map((v) => R(R(v) * R(1 / H)));
          const m = matvec(router, input, N, H).map((v) => R(Math.tanh(R(v))));
          const c = matvec(coefs, m, N * N, N).map(R);
          for (let j = 0; j < N; j++) for (let h = 0; h < H; h++) {
            want[(r * N + j) * H + h] = R(st(j)[h]! + Array.from({ length: N }, (_, i) => c[j * N + i]! * st(i)[h]!).reduce((a, b) => a + b, 0));
          }
        }
        expect(relativeL2Error(decodeRows(out.pred!, dtype), want)).toBeLessThan(1e-6);
      } finally {
        cpu.dispose();
      }
    });
  }
});
