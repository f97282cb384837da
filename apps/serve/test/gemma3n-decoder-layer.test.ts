// Gemma 3n's decoder layer (layer-ple's Gemma3nDecoderLayer: AltUp predict / correct, Laurel,
// layer-std's norms, sliding or full attention and sparse GELU MLP, and the PLE path with its
// decode prestage) through the conformance kit on the CPU backend, built as the adapter builds it
// from the gemma3n-text-tiny fixture: a sliding layer with activation sparsity and a full one.
import { CpuBackend } from '@metrale/cpu-backend';
import { runLayerConformance } from '@metrale/core/testing';
import { describe, expect, it } from 'vitest';
import { gemma3nDecoderPlugin } from './support/gemma3n-decoder-plugin.js';

const MUST_PASS = ['default-hooks', 'replay-equals-eager', 'failed-capture-rearm', 'verify-accept-equals-decode', 'rejected-rows-leave-no-trace', 'slot-reuse-starts-clean', 'room-check-before-write'];

describe('a gemma3n_text decoder layer as one layer', () => {
  for (const layerIndex of [0, 2]) {
    it(`layer ${layerIndex} passes the conformance kit on the CPU backend, PLE prestage and re-arm included`, () => {
      const { plugin, config, weights } = gemma3nDecoderPlugin();
      const report = runLayerConformance(plugin, { backend: () => new CpuBackend(), config, layerIndex, weights, k: 3, tolerance: 1e-5 });
      const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
      expect(report.passed).toBe(true);
      for (const check of MUST_PASS) expect(status[check], `${check}: ${report.checks.find((c) => c.check === check)?.detail}`).toBe('pass');
    });
  }
});
