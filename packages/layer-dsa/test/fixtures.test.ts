// The golden fixtures (docs/fixtures.md, metrale-layer-fixture/1) on the CPU reference backend:
// every directory under packages/layer-dsa/fixtures/ (or $METRALE_DSA_FIXTURES_DIR), read by
// core's reader and run through the step driver by core's runner (graphs on), must pass every
// step at case.json's tolerance. No fixtures is a failure, not a pass: they come from
// tools/fixtures/dsa.py (GlmMoeDsaAttention and Glm5NextTextAttention of transformers).
import { basename } from 'node:path';
import { PluginRegistry, readLayerFixture, runLayerFixture } from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { fixtureDirs, MISSING_FIXTURES, stepsOver, summaryLine } from './fixture-dirs.js';

const dirs = fixtureDirs();

describe('golden fixtures from Hugging Face on the CPU reference backend', () => {
  it('has fixtures to check', () => {
    expect(dirs.length, MISSING_FIXTURES).toBeGreaterThan(0);
  });

  for (const dir of dirs) {
    it(`${basename(dir)}: every step matches the Hugging Face module`, () => {
      const fixture = readLayerFixture(dir);
      expect(fixture.family).toBe('dsa');
      // The generator guarantees a selection that no tie or rounding can flip (docs/fixtures.md).
      expect(fixture.minTopkGap, 'case.json min_topk_gap').toBeGreaterThanOrEqual(1e-5);
      const registry = new PluginRegistry();
      registry.register(plugin);
      const gpu = new CpuBackend();
      try {
        const report = runLayerFixture(fixture, { registry, gpu });
        console.log(summaryLine(report, report.tolerance));
        expect(stepsOver(report, report.tolerance)).toEqual([]);
        expect(report.steps).toHaveLength(fixture.steps.length);
        expect(report.steps.some((s) => s.path === 'replay')).toBe(true);
        expect(report.pass).toBe(true);
      } finally {
        gpu.dispose();
      }
    });
  }
});
