// Gemma 3n's decoder layer (layer-ple's Gemma3nDecoderLayer: AltUp predict / correct, Laurel,
// layer-std's norms, sliding or full attention and sparse GELU MLP, and the PLE path with its
// decode prestage) through the conformance kit on the CPU backend, built as the adapter builds it
// from the gemma3n-text-tiny fixture: a sliding layer with activation sparsity and a full one.
import { F32_PRECISION, InvalidArgumentError, type Precision } from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import { runLayerConformance } from '@metrale/core/testing';
import { plugin as ple } from '@metrale/layer-ple';
import { describe, expect, it } from 'vitest';
import { gemma3nDecoderPlugin } from './support/gemma3n-decoder-plugin.js';

const BF16: Precision = { rows: 'bf16', fp8Weights: false };

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

  it('passes the kit with bf16 rows, its PLE part included (the model built with --dtype bf16)', () => {
    const { plugin, config, weights } = gemma3nDecoderPlugin(BF16);
    const report = runLayerConformance(plugin, { backend: () => new CpuBackend(), config, layerIndex: 2, weights, k: 3, rowDtype: 'bf16' });
    const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(report.passed).toBe(true);
    for (const check of MUST_PASS) expect(status[check], `${check}: ${report.checks.find((c) => c.check === check)?.detail}`).toBe('pass');
  });

  it('refuses a PLE part whose rows are not the model\'s row type, naming it and the row sizes', () => {
    // A 'ple' provider that ignores the model's precision: f32 rows in a bf16 model.
    const f32Ple = { ...ple, create: (context: Parameters<typeof ple.create>[0]) => ple.create({ ...context, precision: F32_PRECISION }) };
    const { plugin, config, weights } = gemma3nDecoderPlugin(BF16, f32Ple);
    const gpu = new CpuBackend();
    const H = config.hidden_size as number;
    try {
      const create = () => plugin.create({ gpu, layerType: 'gemma3n-decoder', config, layerIndex: 0, weights, limits: { maxSeqs: 1, maxSeqLen: 8, maxBatch: 1, maxK: 1, maxRows: 8 } });
      expect(create).toThrow(InvalidArgumentError);
      expect(create).toThrow(new RegExp(`ple has ${4 * H} → ${4 * H}, not ${2 * H} → ${2 * H}.*'ple' layer included, with the model's precision \\(rows bf16\\)`));
    } finally {
      gpu.dispose();
    }
  });
});
