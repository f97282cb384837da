import { MemoryWeightSource } from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-gdn';
import { describe, expect, it } from 'vitest';
import { configOf, randomWeights, SMALL } from './gdn-setup.js';

describe('@metrale/layer-gdn conformance on the CPU reference backend', () => {
  it('passes every check of the kit at k = 4, carried state included', () => {
    const { tensors } = randomWeights(SMALL, 3);
    const report = runLayerConformance(plugin, {
      backend: () => new CpuBackend(),
      config: configOf(SMALL),
      weights: new MemoryWeightSource('conformance weights', tensors),
      k: 4,
    });
    const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(report.passed).toBe(true);
    for (const check of [
      'default-hooks', 'replay-equals-eager', 'failed-capture-rearm', 'verify-accept-equals-decode',
      'rejected-rows-leave-no-trace', 'carried-equals-write-on-accept', 'slot-reuse-starts-clean', 'prefix-resume-equals-prefill',
    ]) {
      expect(status[check], check).toBe('pass');
    }
    // The state has no length bound: there is no host-tracked cache to run out of.
    expect(status['room-check-before-write']).toBe('n/a');
  });
});
