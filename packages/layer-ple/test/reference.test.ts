// The layer against an independent float64 reference of Hugging Face's math (test/ple-reference.ts),
// through the step driver with graph capture and replay, for f32, bf16 and f16 storage of the
// table and the embedding, a non-zero layer index, and token ids past the per-layer table.
import { CpuBackend } from '@metrale/cpu-backend';
import { PleLayer } from '@metrale/layer-ple';
import { describe, expect, it } from 'vitest';
import { runAgainstReference, SCENARIO } from './run-steps.js';
import { LIMITS, pleSetup, SMALL } from './ple-setup.js';

describe('PLE layer against the float64 reference (CPU backend)', () => {
  for (const [table, embed] of [['f32', 'f32'], ['bf16', 'bf16'], ['f16', 'f32'], ['bf16', 'f32']] as const) {
    it(`matches every step with a ${table} table and a ${embed} embedding`, () => {
      const setup = pleSetup(3, SMALL, { table, embed });
      const steps = runAgainstReference(setup, 3, SCENARIO);
      for (const s of steps) expect(s.rel, `${s.op} (${s.path})`).toBeLessThan(1e-5);
      // The decode and verify graphs were captured and then replayed.
      expect(steps.filter((s) => s.path === 'replay').length).toBeGreaterThanOrEqual(4);
      // Tokens at or past vocab_size_per_layer_input (40..47) occurred and matched too.
      expect(steps.some((s) => s.tokens.some((t) => t >= SMALL.tableVocab))).toBe(true);
    });
  }

  it('matches with layer 0, the last layer, and P not a multiple of 32', () => {
    for (const layerIndex of [0, 4]) {
      const dims = { hidden: 40, perLayer: 12, layers: 5, vocab: 30, tableVocab: 30, layerIndex, eps: 1e-5 };
      const steps = runAgainstReference(pleSetup(9, dims, { table: 'bf16' }), 3, SCENARIO);
      for (const s of steps) expect(s.rel, `layer ${layerIndex} ${s.op}`).toBeLessThan(1e-5);
    }
  });

  it('holds its scalars in float32 with f32 rows, whatever the checkpoint stores the table and the embedding in', () => {
    // HF's f32 (or f64) model has upcast a bf16 checkpoint on load, so its sqrt(P) is float32:
    // at P = 10, 3.1623, not bf16's 3.15625 (which moved gemma3n-tiny's logits by 5e-2).
    const dims = { hidden: 48, perLayer: 10, layers: 3, vocab: 30, tableVocab: 28, layerIndex: 2, eps: 1e-6 };
    const setup = pleSetup(11, dims, { table: 'bf16', embed: 'bf16', weights: 'bf16' });
    const gpu = new CpuBackend();
    try {
      const layer = new PleLayer({ gpu, layerType: 'ple', config: setup.config, layerIndex: dims.layerIndex, weights: setup.weights, limits: LIMITS });
      expect(layer.scales).toEqual({
        embed: Math.fround(Math.sqrt(48)), projection: Math.fround(48 ** -0.5), table: Math.fround(Math.sqrt(10)), input: Math.fround(Math.SQRT1_2),
      });
      layer.dispose();
    } finally {
      gpu.dispose();
    }
    const steps = runAgainstReference(setup, 3, SCENARIO);
    for (const s of steps) expect(s.rel, `${s.op} (${s.path})`).toBeLessThan(1e-5);
  });

  it('computes the same rows eagerly (graphs off)', () => {
    const steps = runAgainstReference(pleSetup(4), 3, SCENARIO, { graphs: false });
    for (const s of steps) expect(s.rel).toBeLessThan(1e-5);
    expect(steps.every((s) => s.path === 'eager' || s.path === 'prefill')).toBe(true);
  });
});
