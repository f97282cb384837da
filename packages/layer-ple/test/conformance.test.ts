// The conformance kit of @metrale/core on the CPU reference backend: with the default slot cache,
// and with the smallest one the kit's limits allow (maxBatch 4 × k 3 = 12 slots for up to 48
// distinct tokens), so that its failed-capture check runs through steps with misses and evictions;
// and with bf16 rows.
import type { MetralePlugin, Precision } from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import { runLayerConformance } from '@metrale/core/testing';
import plugin, { plePlugin } from '@metrale/layer-ple';
import { describe, expect, it } from 'vitest';
import { pleSetup } from './ple-setup.js';

const MUST_PASS = ['default-hooks', 'replay-equals-eager', 'failed-capture-rearm', 'verify-accept-equals-decode', 'rejected-rows-leave-no-trace', 'slot-reuse-starts-clean'];

describe('@metrale/layer-ple conformance on the CPU reference backend', () => {
  for (const [label, p] of [['default slot cache', plugin], ['12-slot cache (evictions)', plePlugin({ slotCapacity: 12 })]] as const) {
    it(`passes every check of the kit with the ${label}`, () => {
      const setup = pleSetup(7);
      const report = runLayerConformance(p, { backend: () => new CpuBackend(), config: setup.config, layerIndex: setup.layerIndex, weights: setup.weights, tolerance: 1e-6 });
      const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
      expect(report.passed).toBe(true);
      for (const check of MUST_PASS) expect(status[check], `${check}: ${report.checks.find((c) => c.check === check)?.detail}`).toBe('pass');
      // No length-bounded cache, no write-on-accept state: these do not apply.
      expect(status['room-check-before-write']).toBe('n/a');
      expect(status['carried-equals-write-on-accept']).toBe('n/a');
    });
  }

  it('passes every check of the kit with bf16 rows (precision.rows bf16, as a bf16 model creates it)', () => {
    const setup = pleSetup(7, undefined, { table: 'bf16', embed: 'bf16', weights: 'bf16' });
    const precision: Precision = { rows: 'bf16', fp8Weights: false };
    const bf16: MetralePlugin = { ...plugin, create: (context) => plugin.create({ ...context, precision }) };
    const report = runLayerConformance(bf16, { backend: () => new CpuBackend(), config: setup.config, layerIndex: setup.layerIndex, weights: setup.weights, rowDtype: 'bf16' });
    const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(report.passed).toBe(true);
    for (const check of MUST_PASS) expect(status[check], `${check}: ${report.checks.find((c) => c.check === check)?.detail}`).toBe('pass');
  });
});
