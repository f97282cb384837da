import { CpuBackend } from '@metrale/cpu-backend';
import { SeededRandom } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { Weights } from './setup.js';

const D = 16;
const CONFIG = {
  model_type: 'qwen3_next', hidden_size: D, intermediate_size: 24, rms_norm_eps: 1e-6, vocab_size: 40,
  num_experts: 4, num_experts_per_tok: 2, moe_intermediate_size: 8, shared_expert_intermediate_size: 8,
};

function weightsFor(type: string): Weights {
  const w = new Weights(new SeededRandom(2));
  if (type === 'rms-norm') w.add('weight', [D], 0.2);
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
