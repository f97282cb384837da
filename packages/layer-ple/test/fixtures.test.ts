// The golden fixtures (docs/fixtures.md, metrale-layer-fixture/1) on the CPU reference backend:
// every directory under packages/layer-ple/fixtures/ (or $METRALE_PLE_FIXTURES_DIR), read by
// core's reader and run through the step driver by core's runner (graphs on), must pass every
// step at case.json's tolerance. No fixtures is a failure, not a pass: they come from
// tools/fixtures/ple.py. Each fixture also runs with the smallest slot cache its steps allow, so
// its rows go through evictions as well.
import { basename } from 'node:path';
import { PluginRegistry, fixtureLimits, readLayerFixture, runLayerFixture } from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin, { plePlugin } from '@metrale/layer-ple';
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
      expect(fixture.family).toBe('ple');
      const limits = fixtureLimits(fixture);
      for (const p of [plugin, plePlugin({ slotCapacity: limits.maxBatch * limits.maxK })]) {
        const registry = new PluginRegistry();
        registry.register(p);
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
      }
    });
  }
});
