// The conformance kit on the CPU backend for the stateless layers (attention: attention.test.ts),
// then with bf16 rows (and FP8 weights where a layer has Linear weights) for every layer the kit
// drives, attention included: replay ≡ eager, verify-then-accept ≡ decode, rejected rows leave no
// trace, slot reuse, the room check. The kit creates layers without a precision, so the plugin is
// wrapped to pass one (`withPrecision`), as an application passes `CreateLayerContext.precision`.
import { CpuBackend } from '@metrale/cpu-backend';
import { SeededRandom, type Precision } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import plugin, { qwen3NextAttentionOptions } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { attentionWeights, CONFIG as ATTENTION_CONFIG } from './attention-reference.js';
import { linearWeights, toFp8 } from './fp8-weights.js';
import { Weights, withPrecision } from './setup.js';

const D = 16;
const CONFIG = {
  model_type: 'qwen3_next', hidden_size: D, intermediate_size: 24, rms_norm_eps: 1e-6, vocab_size: 40, layer_norm_eps: 1e-5,
  num_experts: 4, num_experts_per_tok: 2, moe_intermediate_size: 8, shared_expert_intermediate_size: 8,
};

function weightsFor(type: string): Weights {
  const w = new Weights(new SeededRandom(2));
  if (type === 'rms-norm') w.add('weight', [D], 0.2);
  if (type === 'layer-norm') (w.add('weight', [D], 0.2, 1), w.add('bias', [D], 0.1));
  if (type === 'mlp') {
    w.add('gate_proj.weight', [24, D], 0.25);
    w.add('up_proj.weight', [24, D], 0.25);
    w.add('down_proj.weight', [D, 24], 0.2);
  }
  if (type === 'moe') {
    w.add('gate.weight', [4, D], 0.7);
    for (let e = 0; e < 4; e++) {
      w.add(`experts.${e}.gate_proj.weight`, [8, D], 0.25);
      w.add(`experts.${e}.up_proj.weight`, [8, D], 0.25);
      w.add(`experts.${e}.down_proj.weight`, [D, 8], 0.35);
    }
    for (const p of ['gate_proj', 'up_proj']) w.add(`shared_expert.${p}.weight`, [8, D], 0.25);
    w.add('shared_expert.down_proj.weight', [D, 8], 0.35);
    w.add('shared_expert_gate.weight', [1, D], 0.25);
  }
  return w;
}

describe('@metrale/layer-std stateless layers pass the conformance kit on the CPU backend', () => {
  for (const type of ['rms-norm', 'mlp', 'moe']) {
    it(type, () => {
      const report = runLayerConformance(plugin, { backend: () => new CpuBackend(), layerType: type, config: CONFIG, weights: weightsFor(type).source(), k: 3 });
      expect(report.passed).toBe(true);
      const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
      // No host-tracked cache, so nothing to refuse; no speculative state either.
      expect(status['room-check-before-write']).toBe('n/a');
      expect(status['carried-equals-write-on-accept']).toBe('n/a');
    });
  }
});

const PATHS = [
  { label: 'bf16', precision: { rows: 'bf16', fp8Weights: false } as Precision, types: ['rms-norm', 'layer-norm', 'mlp', 'moe', 'attention'] },
  { label: 'fp8 + bf16', precision: { rows: 'bf16', fp8Weights: true } as Precision, types: ['mlp', 'moe', 'attention'] },
];

describe('@metrale/layer-std layers pass the conformance kit with bf16 rows on the CPU backend', () => {
  for (const { label, precision, types } of PATHS) {
    for (const type of types) {
      it(`${label}: ${type}`, () => {
        const attention = type === 'attention';
        const base = attention ? attentionWeights(qwen3NextAttentionOptions(ATTENTION_CONFIG)) : weightsFor(type);
        const w = precision.fp8Weights ? toFp8(base, linearWeights) : base;
        const config = attention ? ATTENTION_CONFIG : CONFIG;
        const report = runLayerConformance(withPrecision(plugin, precision), {
          backend: () => new CpuBackend(), layerType: type, config, weights: w.source(), k: 3, rowDtype: 'bf16', kvPageSize: 4,
        });
        if (!report.passed) console.log(report.checks.map((c) => `${c.check}: ${c.status} — ${c.detail}`).join('\n'));
        expect(report.passed).toBe(true);
        const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
        expect(status['replay-equals-eager']).toBe('pass');
        expect(status['verify-accept-equals-decode']).toBe('pass');
        expect(status['room-check-before-write']).toBe(attention ? 'pass' : 'n/a');
        // Every std layer can start a sequence at a cached prefix.
        expect(status['prefix-resume-equals-prefill']).toBe('pass');
      });
    }
  }
});
