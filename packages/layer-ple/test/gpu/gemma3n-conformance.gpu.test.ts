// The plugin's Gemma 3n layer types (AltUp predict and correct, Laurel, the AltUp streams in and
// out) through the conformance kit on CUDA: their kernels (kernels/altup.cu, kernels/gemma3n-rows.cu)
// and the backend's GEMM under graph capture, replay and a failed capture. Without a GPU the suite
// skips and says why.
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-ple';
import { beforeAll, describe, expect, it } from 'vitest';
import { gemma3nSetup } from '../gemma3n-setup.js';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

const cuda = await cudaAvailable();
if (!cuda.available) console.warn(`[layer-ple gpu] Gemma 3n conformance skipped: ${cuda.reason}`);

describe.skipIf(!cuda.available)('@metrale/layer-ple Gemma 3n layers on CUDA', () => {
  beforeAll(() => ensureFatbins());

  for (const layerType of ['altup-predict', 'altup-correct', 'laurel', 'altup-streams-in', 'altup-streams-out']) {
    it(`${layerType} passes every check of the conformance kit`, () => {
      const setup = gemma3nSetup(5);
      const report = runLayerConformance(plugin, { backend: cuda.create!, layerType, config: setup.config, layerIndex: setup.layerIndex, weights: setup.weights, tolerance: 1e-5 });
      console.log(`[layer-ple gpu] ${layerType}:\n  ${report.checks.map((c) => `${c.check}: ${c.status} — ${c.detail}`).join('\n  ')}`);
      expect(report.passed).toBe(true);
      expect(report.checks.find((c) => c.check === 'replay-equals-eager')!.status).toBe('pass');
      expect(report.checks.find((c) => c.check === 'failed-capture-rearm')!.status).toBe('pass');
    });
  }
});
