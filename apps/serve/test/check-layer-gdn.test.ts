import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { metrale } from './support/run-cli.js';

// The Gated DeltaNet plugin is a dependency of the CLI, so it is found without --plugin, and its
// committed Hugging Face fixtures must pass through `metrale check-layer` on the CPU backend.
const fixtures = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'packages', 'layer-gdn', 'fixtures');

describe('metrale check-layer on the committed Gated DeltaNet fixtures', () => {
  const dirs = readdirSync(fixtures).sort();

  it('finds the fixtures', () => {
    expect(dirs.length).toBeGreaterThanOrEqual(4);
  });

  for (const name of dirs) {
    it(`${name}: every step passes on the CPU backend`, () => {
      const r = metrale(['check-layer', join(fixtures, name), '--backend', 'cpu']);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      const summary = JSON.parse(r.lines.at(-1)!) as { backend: string; pass: boolean; worst_rel: number; steps: number };
      expect(summary).toMatchObject({ backend: 'cpu', pass: true });
      expect(summary.worst_rel).toBeLessThan(1e-4);
      expect(r.lines).toHaveLength(summary.steps + 1);
    });
  }
});
