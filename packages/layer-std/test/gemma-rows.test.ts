// Gemma 3n's MLP and head features on the std layers, against float64 references: GELU-tanh with
// activation sparsity (Gemma3nTextMLP._gaussian_topk) and final logit soft-capping.
import { SeededRandom, WeightsError, relativeL2Error } from '@metrale/core';
import { LmHeadLayer, MlpLayer, geluTanh, normalQuantile, sparsityCutoff } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { LIMITS, matvec, runRows, Weights } from './setup.js';

const [D, I, V, ROWS] = [16, 40, 24, 5];

/** HF's MLP of one row: down(gelu_tanh(g') · up(x)), g' = relu(g − (mean + std · c)) with sparsity. */
function mlpRef(w: Weights, x: Float32Array, cutoff: number | undefined): Float64Array {
  const v = (n: string) => w.values.get(n)!;
  const g = matvec(v('gate_proj.weight'), x, I, D);
  const u = matvec(v('up_proj.weight'), x, I, D);
  if (cutoff !== undefined) {
    const mean = g.reduce((a, b) => a + b, 0) / I;
    const std = Math.sqrt(g.reduce((a, b) => a + (b - mean) ** 2, 0) / I);
    for (let i = 0; i < I; i++) g[i] = Math.max(0, g[i]! - (mean + std * cutoff));
  }
  const h = g.map((gi, i) => geluTanh(gi) * u[i]!);
  return matvec(v('down_proj.weight'), h, D, I);
}

function mlpWeights(): Weights {
  const w = new Weights(new SeededRandom(5));
  w.add('gate_proj.weight', [I, D], 1 / Math.sqrt(D));
  w.add('up_proj.weight', [I, D], 1 / Math.sqrt(D));
  w.add('down_proj.weight', [D, I], 1 / Math.sqrt(I));
  return w;
}

describe('MlpLayer with GELU-tanh and activation sparsity', () => {
  const w = mlpWeights();
  const x = new SeededRandom(6).normals(ROWS * D);
  const rowsOf = (c: number | undefined) => Float64Array.from(Array.from({ length: ROWS }, (_, r) => [...mlpRef(w, x.subarray(r * D, (r + 1) * D), c)]).flat());
  const run = (cutoff?: number) =>
    runRows((gpu) => new MlpLayer(gpu, w.source(), LIMITS, { hidden: D, inter: I, activation: { kind: 'gelu_tanh', ...(cutoff !== undefined ? { cutoff } : {}) } }), x);

  it('without sparsity: down(gelu_tanh(gate) · up)', () => {
    expect(relativeL2Error(run(), rowsOf(undefined))).toBeLessThan(1e-5);
  });
  it('with sparsity 0.95: the gate cut at mean + std · Φ⁻¹(0.95), which changes the result', () => {
    const c = sparsityCutoff(0.95)!;
    expect(c).toBe(1.6448535919189453); // HF's f32 icdf(0.95)
    const got = run(c);
    expect(relativeL2Error(got, rowsOf(c))).toBeLessThan(1e-5);
    expect(relativeL2Error(got, rowsOf(undefined))).toBeGreaterThan(1e-2);
  });
  it('the normal quantile and the cut-off field', () => {
    expect(normalQuantile(0.5)).toBeCloseTo(0, 12);
    expect(normalQuantile(0.975)).toBeCloseTo(1.959963984540054, 8);
    expect(normalQuantile(0.01)).toBeCloseTo(-2.3263478740408408, 8);
    expect(sparsityCutoff(0)).toBeUndefined();
    expect(() => sparsityCutoff(1)).toThrow(WeightsError);
  });
});

describe('LmHeadLayer with final logit soft-capping', () => {
  it('logits = cap · tanh(x·Wᵀ / cap)', () => {
    const w = new Weights(new SeededRandom(7));
    const wt = w.add('weight', [V, D], 3);
    const x = new SeededRandom(8).normals(ROWS * D);
    const cap = 5;
    const got = runRows((gpu) => new LmHeadLayer(gpu, w.source(), LIMITS, { hidden: D, vocab: V, softcap: cap }), x);
    const plain = Float64Array.from(Array.from({ length: ROWS }, (_, r) => [...matvec(wt, x, V, D, r * D)]).flat());
    expect(relativeL2Error(got, plain.map((v) => cap * Math.tanh(v / cap)))).toBeLessThan(1e-6);
    // The logits are large enough for the cap to bite.
    expect(relativeL2Error(got, plain)).toBeGreaterThan(0.1);
  });
  it('refuses a cap that is not a positive number', () => {
    const w = new Weights(new SeededRandom(7));
    w.add('weight', [V, D], 1);
    expect(() => runRows((gpu) => new LmHeadLayer(gpu, w.source(), LIMITS, { hidden: D, vocab: V, softcap: 0 }), new Float32Array(D))).toThrow(/softcap/);
  });
});
