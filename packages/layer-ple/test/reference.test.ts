// The layer against an independent float64 reference of Hugging Face's math (test/ple-reference.ts),
// through the step driver with graph capture and replay, for f32, bf16 and f16 storage of the
// table and the embedding, a non-zero layer index, and token ids past the per-layer table.
import { describe, expect, it } from 'vitest';
import { runAgainstReference, SCENARIO } from './run-steps.js';
import { pleSetup, SMALL } from './ple-setup.js';

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

  it('computes the same rows eagerly (graphs off)', () => {
    const steps = runAgainstReference(pleSetup(4), 3, SCENARIO, { graphs: false });
    for (const s of steps) expect(s.rel).toBeLessThan(1e-5);
    expect(steps.every((s) => s.path === 'eager' || s.path === 'prefill')).toBe(true);
  });
});
