// The golden fixtures (docs/fixtures.md, metrale-layer-fixture/1) on the CPU reference backend:
// every directory under packages/layer-gdn/fixtures/ (or $METRALE_GDN_FIXTURES_DIR), read by
// core's reader and run through the step driver by core's runner (graphs, write-on-accept), must
// pass every step at case.json's tolerance. No fixtures is a failure, not a pass: they come from
// tools/fixtures/gdn.py.
import { basename } from 'node:path';
import { checkLayerFixture, fixtureDirectories } from '@metrale/core/testing';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin from '@metrale/layer-gdn';
import { describe, expect, it } from 'vitest';

const fixtures = fixtureDirectories(new URL('../fixtures', import.meta.url), {
  envVar: 'METRALE_GDN_FIXTURES_DIR', generator: 'tools/fixtures/gdn.py', out: 'packages/layer-gdn/fixtures',
});

describe('golden fixtures from Hugging Face on the CPU reference backend', () => {
  it('has fixtures to check', () => {
    expect(fixtures.dirs.length, fixtures.missing).toBeGreaterThan(0);
  });

  for (const dir of fixtures.dirs) {
    it(`${basename(dir)}: every step matches the Hugging Face module`, () => {
      const { fixture, runs } = checkLayerFixture(dir, { plugins: [plugin], backend: () => new CpuBackend() });
      expect(fixture.family).toBe('gdn');
      for (const { report, over } of runs) {
        expect(over).toEqual([]);
        expect(report.steps).toHaveLength(fixture.steps.length);
        expect(report.pass).toBe(true);
      }
    });
  }
});
