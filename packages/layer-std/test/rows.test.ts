import { SeededRandom, relativeL2Error } from '@metrale/core';
import { EmbeddingLayer, LayerNormLayer, LmHeadLayer, MlpLayer, RmsNormLayer } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { LIMITS, matvec, rmsNorm, runRows, silu, Weights } from './setup.js';

const D = 24;
const rows = (n: number, seed = 5) => new SeededRandom(seed).normals(n * D, 2);

describe('row layers against float64 references', () => {
  it('embedding, plain and scaled (Gemma-style sqrt(hidden))', () => {
    const w = new Weights();
    const table = w.add('weight', [40, D], 1);
    const tokens = Int32Array.from([3, 0, 39, 3, 17]);
    for (const scale of [1, Math.sqrt(D)]) {
      const out = runRows((gpu) => new EmbeddingLayer(gpu, w.source(), LIMITS, { vocab: 40, hidden: D, scale }), new Float32Array(0), tokens, tokens.length);
      const want = Float64Array.from(Array.from(tokens).flatMap((t) => Array.from(table.subarray(t * D, (t + 1) * D), (v) => v * scale)));
      expect(relativeL2Error(out, want)).toBeLessThan(1e-6);
    }
  });

  for (const offset of [0, 1] as const) {
    it(`RMSNorm with ${offset ? '1 + w (Qwen3-Next)' : 'w (Llama, GLM)'}`, () => {
      const w = new Weights();
      const weight = w.add('weight', [D], 0.3, offset ? 0 : 1);
      const x = rows(6);
      const out = runRows((gpu) => new RmsNormLayer(gpu, w.source(), LIMITS, { hidden: D, eps: 1e-6, offset }), x);
      for (let r = 0; r < 6; r++) {
        expect(relativeL2Error(out.subarray(r * D, (r + 1) * D), rmsNorm(x.subarray(r * D, (r + 1) * D), weight, 1e-6, offset))).toBeLessThan(1e-6);
      }
    });
  }

  for (const bias of [true, false]) {
    it(`LayerNorm ${bias ? 'with' : 'without'} bias`, () => {
      const w = new Weights();
      const weight = w.add('weight', [D], 0.2, 1);
      const b = bias ? w.add('bias', [D], 0.5) : undefined;
      const x = rows(4);
      const out = runRows((gpu) => new LayerNormLayer(gpu, w.source(), LIMITS, { hidden: D, eps: 1e-5 }), x);
      for (let r = 0; r < 4; r++) {
        const row = x.subarray(r * D, (r + 1) * D);
        const mean = row.reduce((a, v) => a + v, 0) / D;
        const variance = row.reduce((a, v) => a + (v - mean) ** 2, 0) / D;
        const want = Array.from(row, (v, i) => ((v - mean) / Math.sqrt(variance + 1e-5)) * weight[i]! + (b ? b[i]! : 0));
        expect(relativeL2Error(out.subarray(r * D, (r + 1) * D), want)).toBeLessThan(1e-6);
      }
    });
  }

  it('SwiGLU MLP', () => {
    const I = 40;
    const w = new Weights();
    const g = w.add('gate_proj.weight', [I, D], 1 / Math.sqrt(D));
    const u = w.add('up_proj.weight', [I, D], 1 / Math.sqrt(D));
    const dn = w.add('down_proj.weight', [D, I], 1 / Math.sqrt(I));
    const x = rows(7);
    const out = runRows((gpu) => new MlpLayer(gpu, w.source(), LIMITS, { hidden: D, inter: I }), x);
    for (let r = 0; r < 7; r++) {
      const gv = matvec(g, x, I, D, r * D);
      const uv = matvec(u, x, I, D, r * D);
      const h = gv.map((v, i) => silu(v) * uv[i]!);
      expect(relativeL2Error(out.subarray(r * D, (r + 1) * D), matvec(dn, h, D, I))).toBeLessThan(1e-5);
    }
  });

  it('lm head', () => {
    const V = 50;
    const w = new Weights();
    const head = w.add('weight', [V, D], 0.5);
    const x = rows(3);
    const out = runRows((gpu) => new LmHeadLayer(gpu, w.source(), LIMITS, { hidden: D, vocab: V }), x);
    for (let r = 0; r < 3; r++) expect(relativeL2Error(out.subarray(r * V, (r + 1) * V), matvec(head, x, V, D, r * D))).toBeLessThan(1e-6);
  });
});
