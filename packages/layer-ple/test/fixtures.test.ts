// The golden fixtures (docs/fixtures.md, metrale-layer-fixture/1) on the CPU reference backend:
// every directory under packages/layer-ple/fixtures/ (or $METRALE_PLE_FIXTURES_DIR), read by
// core's reader and run through the step driver by core's runner (graphs on), must pass every
// step at case.json's tolerance. No fixtures is a failure, not a pass: they come from
// tools/fixtures/ple.py. Each fixture also runs with the smallest slot cache its steps allow, so
// its rows go through evictions as well.
import { basename } from 'node:path';
import { fixtureLimits } from '@metrale/core';
import { checkLayerFixture, fixtureDirectories } from '@metrale/core/testing';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin, { plePlugin } from '@metrale/layer-ple';
import { describe, expect, it } from 'vitest';

const fixtures = fixtureDirectories(new URL('../fixtures', import.meta.url), {
  envVar: 'METRALE_PLE_FIXTURES_DIR', generator: 'tools/fixtures/ple.py', out: 'packages/layer-ple/fixtures',
});

describe('golden fixtures from Hugging Face on the CPU reference backend', () => {
  it('has fixtures to check', () => {
    expect(fixtures.dirs.length, fixtures.missing).toBeGreaterThan(0);
  });

  for (const dir of fixtures.dirs) {
    it(`${basename(dir)}: every step matches the Hugging Face module`, () => {
      const { fixture, runs } = checkLayerFixture(dir, {
        plugins: (f) => {
          const limits = fixtureLimits(f);
          return [plugin, plePlugin({ slotCapacity: limits.maxBatch * limits.maxK })];
        },
        backend: () => new CpuBackend(),
      });
      expect(fixture.family).toBe('ple');
      expect(runs).toHaveLength(2);
      for (const { report, over } of runs) {
        expect(over).toEqual([]);
        expect(report.steps).toHaveLength(fixture.steps.length);
        expect(report.steps.some((s) => s.path === 'replay')).toBe(true);
        expect(report.pass).toBe(true);
      }
    });
  }
});
