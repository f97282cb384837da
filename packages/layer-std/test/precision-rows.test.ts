// The row layers in bf16 and f16 (FP8 weights for the MLP and the lm head) against the float64
// references of rows.test.ts computed from the f32 inputs and weights (the expected outputs of the
// f32 path). Each bound is stated below and the measured errors are printed; FP8 runs are held to
// the row type's bound against the reference with the dequantized weights (what the FP8 model is),
// and their distance to the unquantized weights' output is printed.
import { F32_PRECISION, SeededRandom, roundTo, type Precision, relativeL2Error } from '@metrale/core';
import { EmbeddingLayer, LayerNormLayer, LmHeadLayer, MlpLayer, RmsNormLayer } from '@metrale/layer-std';
import { afterAll, describe, expect, it } from 'vitest';
import { linearWeights, toFp8 } from './fp8-weights.js';
import { LIMITS, matvec, rmsNorm, ROW_TYPE_BOUND, runRows, silu, Weights } from './setup.js';

const D = 24;
const rows = (n: number, seed = 5) => new SeededRandom(seed).normals(n * D, 2);

const PRECISIONS: readonly { label: string; precision: Precision }[] = [
  { label: 'bf16', precision: { rows: 'bf16', fp8Weights: false } },
  { label: 'f16', precision: { rows: 'f16', fp8Weights: false } },
];
const FP8: Precision = { rows: 'bf16', fp8Weights: true };

const measured: string[] = [];
const record = (label: string, rel: number): number => (measured.push(`${label.padEnd(52)} rel ${rel.toExponential(2)}`), rel);
afterAll(() => console.log(`[layer-std] row layers against the f32 path's f64 references:\n  ${measured.join('\n  ')}`));

describe('row layers in bf16 / f16 against the f32 path’s float64 references', () => {
  for (const { label, precision } of PRECISIONS) {
    const bound = ROW_TYPE_BOUND[precision.rows];
    const types = { rows: precision.rows };

    it(`${label}: embedding, plain and scaled`, () => {
      const w = new Weights();
      const table = w.add('weight', [40, D], 1);
      const tokens = Int32Array.from([3, 0, 39, 3, 17]);
      for (const scale of [1, Math.sqrt(D)]) {
        const out = runRows((gpu) => new EmbeddingLayer(gpu, w.source(), LIMITS, { vocab: 40, hidden: D, scale, precision }), new Float32Array(0), tokens, tokens.length, types);
        const want = Float64Array.from(Array.from(tokens).flatMap((t) => Array.from(table.subarray(t * D, (t + 1) * D), (v) => v * scale)));
        expect(record(`${label} embedding scale ${scale.toFixed(2)}`, relativeL2Error(out, want))).toBeLessThan(bound);
      }
    });

    for (const offset of [0, 1] as const) {
      it(`${label}: RMSNorm with ${offset ? '1 + w' : 'w'}`, () => {
        const w = new Weights();
        const weight = w.add('weight', [D], 0.3, offset ? 0 : 1);
        const x = rows(6);
        const out = runRows((gpu) => new RmsNormLayer(gpu, w.source(), LIMITS, { hidden: D, eps: 1e-6, offset, precision }), x, undefined, undefined, types);
        const want = Float64Array.from({ length: 6 * D }, (_, i) => rmsNorm(x.subarray(Math.floor(i / D) * D, (Math.floor(i / D) + 1) * D), weight, 1e-6, offset)[i % D]!);
        expect(record(`${label} rms-norm offset ${offset}`, relativeL2Error(out, want))).toBeLessThan(bound);
      });
    }

    // HF's norms in the row type, from row-type inputs and weights: Llama / GLM `w · x̂.to(dtype)` (the
    // default with offset 0), Gemma3nRMSNorm `(x̂ · w).type_as(x)` (roundNormalized: false), exactly.
    for (const roundNormalized of [true, false]) {
      it(`${label}: RMSNorm with w, ${roundNormalized ? 'x̂ rounded before the weight (Llama, GLM)' : 'rounded once (Gemma 3n)'}, to the bit`, () => {
        const R = (v: number) => roundTo(precision.rows, v);
        const w = new Weights();
        const weight = w.add('weight', [D], 0.3, 1).map(R);
        const x = rows(6).map(R);
        const out = runRows((gpu) => new RmsNormLayer(gpu, w.source(), LIMITS, { hidden: D, eps: 1e-6, offset: 0, ...(roundNormalized ? {} : { roundNormalized }), precision }), x, undefined, undefined, types);
        const want = Float64Array.from({ length: 6 * D }, (_, i) => {
          const row = x.subarray(Math.floor(i / D) * D, (Math.floor(i / D) + 1) * D);
          const xh = row[i % D]! / Math.sqrt(row.reduce((a, v) => a + v * v, 0) / D + 1e-6);
          return R((roundNormalized ? R(xh) : xh) * weight[i % D]!);
        });
        const rel = relativeL2Error(out, want);
        record(`${label} rms-norm w, roundNormalized ${roundNormalized}`, rel);
        expect(rel).toBeLessThan(1e-6);
      });
    }

    it(`${label}: LayerNorm with bias`, () => {
      const w = new Weights();
      const weight = w.add('weight', [D], 0.2, 1);
      const b = w.add('bias', [D], 0.5);
      const x = rows(4);
      const out = runRows((gpu) => new LayerNormLayer(gpu, w.source(), LIMITS, { hidden: D, eps: 1e-5, precision }), x, undefined, undefined, types);
      const want: number[] = [];
      for (let r = 0; r < 4; r++) {
        const row = x.subarray(r * D, (r + 1) * D);
        const mean = row.reduce((a, v) => a + v, 0) / D;
        const variance = row.reduce((a, v) => a + (v - mean) ** 2, 0) / D;
        want.push(...Array.from(row, (v, i) => ((v - mean) / Math.sqrt(variance + 1e-5)) * weight[i]! + b[i]!));
      }
      expect(record(`${label} layer-norm`, relativeL2Error(out, want))).toBeLessThan(bound);
    });
  }
});

/** The MLP's f64 output for rows x with the weights' values in `w`. */
function mlpReference(w: Weights, x: Float32Array, n: number, I: number): Float64Array {
  const v = (name: string) => w.values.get(name)!;
  const out = new Float64Array(n * D);
  for (let r = 0; r < n; r++) {
    const g = matvec(v('gate_proj.weight'), x, I, D, r * D);
    const u = matvec(v('up_proj.weight'), x, I, D, r * D);
    out.set(matvec(v('down_proj.weight'), g.map((gv, i) => silu(gv) * u[i]!), D, I), r * D);
  }
  return out;
}

describe('SwiGLU MLP and lm head in bf16 / f16 and with FP8 weights', () => {
  // I = 40: FP8 gate and up are not whole 128-row blocks (two GEMMs); I = 256: stacked, two blocks.
  for (const I of [40, 256]) {
    const w = new Weights();
    w.add('gate_proj.weight', [I, D], 1 / Math.sqrt(D));
    w.add('up_proj.weight', [I, D], 1 / Math.sqrt(D));
    w.add('down_proj.weight', [D, I], 1 / Math.sqrt(I));
    const x = rows(7);
    const want = mlpReference(w, x, 7, I);
    for (const { label, precision } of [...PRECISIONS, { label: 'fp8 + bf16', precision: FP8 }]) {
      it(`${label}: MLP, intermediate ${I}`, () => {
        const src = precision.fp8Weights ? toFp8(w, linearWeights) : w;
        const out = runRows((gpu) => new MlpLayer(gpu, src.source(), LIMITS, { hidden: D, inter: I, precision }), x, undefined, undefined, { rows: precision.rows });
        if (precision.fp8Weights) {
          record(`${label} mlp I=${I} vs the unquantized weights`, relativeL2Error(out, want));
          expect(record(`${label} mlp I=${I} vs the dequantized weights`, relativeL2Error(out, mlpReference(src, x, 7, I)))).toBeLessThan(ROW_TYPE_BOUND.bf16);
        } else {
          expect(record(`${label} mlp I=${I}`, relativeL2Error(out, want))).toBeLessThan(ROW_TYPE_BOUND[precision.rows]);
        }
      });
    }
  }

  for (const { label, precision } of [...PRECISIONS, { label: 'fp8 + bf16', precision: FP8 }]) {
    it(`${label}: lm head (f32 logits)`, () => {
      const V = 150;
      const w = new Weights();
      w.add('weight', [V, D], 0.5);
      const src = precision.fp8Weights ? toFp8(w, linearWeights) : w;
      const x = rows(3);
      const out = runRows((gpu) => new LmHeadLayer(gpu, src.source(), LIMITS, { hidden: D, vocab: V, precision }), x, undefined, undefined, { rows: precision.rows, out: 'f32' });
      const want = (ws: Weights) => Float64Array.from({ length: 3 * V }, (_, i) => matvec(ws.values.get('weight')!, x, V, D, Math.floor(i / V) * D)[i % V]!);
      if (precision.fp8Weights) record(`${label} lm-head vs the unquantized weights`, relativeL2Error(out, want(w)));
      expect(record(`${label} lm-head`, relativeL2Error(out, want(src)))).toBeLessThan(ROW_TYPE_BOUND[precision.rows]);
    });
  }

  it('refuses FP8 weights with f32 rows, and says what to use', () => {
    const w = new Weights();
    w.add('weight', [50, D], 0.5);
    expect(() => runRows((gpu) => new LmHeadLayer(gpu, toFp8(w, linearWeights).source(), LIMITS, { hidden: D, vocab: 50, precision: { rows: 'f32', fp8Weights: true } }), rows(1)))
      .toThrow(/FP8 weights need bf16 or f16 rows/);
    // Dequantized for the f32 path.
    const out = runRows((gpu) => new LmHeadLayer(gpu, toFp8(w, linearWeights).source(), LIMITS, { hidden: D, vocab: 50, precision: F32_PRECISION }), rows(1));
    expect(out.length).toBe(50);
  });
});
