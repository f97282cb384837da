// The conformance kit of @metrale/core over the plugin's Gemma 3n layer types (AltUp predict and
// correct, Laurel, the AltUp streams in and out) on the CPU reference backend. They keep no state
// of their own: every hook at its default, verify rows leaving no trace by design.
import { CpuBackend } from '@metrale/cpu-backend';
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-ple';
import { describe, expect, it } from 'vitest';
import { gemma3nSetup } from './gemma3n-setup.js';

const TYPES = ['altup-predict', 'altup-correct', 'laurel', 'altup-streams-in', 'altup-streams-out'];
const MUST_PASS = ['default-hooks', 'replay-equals-eager', 'failed-capture-rearm', 'verify-accept-equals-decode', 'rejected-rows-leave-no-trace', 'slot-reuse-starts-clean'];

describe('@metrale/layer-ple Gemma 3n layers: conformance on the CPU reference backend', () => {
  it('lists the Gemma 3n layer types besides ple', () => {
    expect(plugin.layerTypes).toEqual(['ple', ...TYPES]);
  });

  for (const layerType of TYPES) {
    it(`${layerType} passes every check of the kit`, () => {
      const setup = gemma3nSetup(5);
      const report = runLayerConformance(plugin, { backend: () => new CpuBackend(), layerType, config: setup.config, layerIndex: setup.layerIndex, weights: setup.weights, tolerance: 1e-6 });
      const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
      expect(report.passed).toBe(true);
      for (const check of MUST_PASS) expect(status[check], `${check}: ${report.checks.find((c) => c.check === check)?.detail}`).toBe('pass');
    });
  }

  it('refuses a layer type it does not have, naming the ones it has', () => {
    const setup = gemma3nSetup(5);
    const limits = { maxSeqs: 1, maxSeqLen: 8, maxBatch: 1, maxK: 1, maxRows: 8 };
    const gpu = new CpuBackend();
    try {
      expect(() => plugin.create({ gpu, layerType: 'altup', config: setup.config, layerIndex: 1, weights: setup.weights, limits })).toThrow(/no layer type 'altup'.*altup-predict/);
    } finally {
      gpu.dispose();
    }
  });
});
