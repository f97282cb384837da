import { CpuBackend } from '@metrale/cpu-backend';
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-example';
import { describe, expect, it } from 'vitest';
import { exampleSetup } from './example-weights.js';

describe('@metrale/layer-example conformance on the CPU reference backend', () => {
  it('passes every check of the kit', () => {
    const report = runLayerConformance(plugin, { backend: () => new CpuBackend(), ...exampleSetup() });
    const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(report.passed).toBe(true);
    // The checks that matter for a host-tracked cache actually ran.
    expect(status['room-check-before-write']).toBe('pass');
    expect(status['replay-equals-eager']).toBe('pass');
    expect(status['verify-accept-equals-decode']).toBe('pass');
    expect(status['rejected-rows-leave-no-trace']).toBe('pass');
  });
});
