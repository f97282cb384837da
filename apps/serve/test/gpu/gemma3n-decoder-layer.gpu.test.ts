// Gemma 3n's decoder layer on CUDA through the conformance kit (test/gemma3n-decoder-layer.test.ts
// runs it on the CPU backend): every kernel it launches — layer-std's norms, sliding / full
// attention and sparse GELU MLP, layer-ple's AltUp, Laurel, row and PLE kernels — under graph
// capture and replay, a failed capture whose PLE prestage is re-armed, and verify; in f32 and with
// bf16 rows. Without a GPU it skips and says why (METRALE_SERVE_DEVICE_MODULE=test/gpu/emu/device.mjs
// runs it in the CPU emulator).
import { gpuLaneDevice, runLayerConformance } from '@metrale/core/testing';
import { describe, expect, it } from 'vitest';
import { gemma3nDecoderPlugin } from '../support/gemma3n-decoder-plugin.js';

const device = await gpuLaneDevice({ loadCuda: () => import('@metrale/cuda-backend'), standInEnv: 'METRALE_SERVE_DEVICE_MODULE' });

describe.skipIf(!device.available)(`a gemma3n_text decoder layer on CUDA${device.available ? '' : `: ${device.reason}`}`, () => {
  for (const layerIndex of [0, 2]) {
    it(`layer ${layerIndex} passes the conformance kit, PLE prestage and re-arm included`, () => {
      const { plugin, config, weights } = gemma3nDecoderPlugin();
      const report = runLayerConformance(plugin, { backend: device.create!, config, layerIndex, weights, k: 3, tolerance: 1e-5 });
      console.log(`[serve gpu] gemma3n_text layer ${layerIndex}:\n  ${report.checks.map((c) => `${c.check}: ${c.status} — ${c.detail}`).join('\n  ')}`);
      expect(report.passed).toBe(true);
      for (const check of ['replay-equals-eager', 'failed-capture-rearm', 'verify-accept-equals-decode', 'room-check-before-write']) {
        expect(report.checks.find((c) => c.check === check)!.status, check).toBe('pass');
      }
    });
  }

  it('layer 2 passes the conformance kit with bf16 rows, its PLE part included', () => {
    const { plugin, config, weights } = gemma3nDecoderPlugin({ rows: 'bf16', fp8Weights: false });
    const report = runLayerConformance(plugin, { backend: device.create!, config, layerIndex: 2, weights, k: 3, rowDtype: 'bf16' });
    console.log(`[serve gpu] gemma3n_text layer 2, bf16 rows:\n  ${report.checks.map((c) => `${c.check}: ${c.status} — ${c.detail}`).join('\n  ')}`);
    expect(report.passed).toBe(true);
    for (const check of ['replay-equals-eager', 'failed-capture-rearm', 'verify-accept-equals-decode', 'room-check-before-write']) {
      expect(report.checks.find((c) => c.check === check)!.status, check).toBe('pass');
    }
  });
});
