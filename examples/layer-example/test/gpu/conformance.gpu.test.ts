import { runLayerConformance } from '@metrale/core/testing';
import { CudaBackend, probe } from '@metrale/cuda-backend';
import plugin from '@metrale/layer-example';
import { describe, expect, it } from 'vitest';
import { exampleSetup } from '../example-weights.js';

const cuda = probe();
if (!cuda.available) console.warn(`[layer-example gpu] skipped: ${cuda.reason}`);

describe.skipIf(!cuda.available)('@metrale/layer-example conformance on CUDA', () => {
  it('passes every check of the kit with the CUDA kernels', () => {
    const report = runLayerConformance(plugin, { backend: () => CudaBackend.create(), ...exampleSetup(5, 64, 6), tolerance: 1e-5 });
    console.log(report.checks.map((c) => `${c.check}: ${c.status} — ${c.detail}`).join('\n'));
    expect(report.passed).toBe(true);
  });
});
