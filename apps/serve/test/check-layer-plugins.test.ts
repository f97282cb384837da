import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { metrale } from './support/run-cli.js';

// The first-party plugins are dependencies of the CLI, so they are found without --plugin, and
// their committed Hugging Face fixtures must pass through `metrale check-layer` on the CPU.
const packages = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'packages');

for (const pkg of ['layer-gdn', 'layer-dsa', 'layer-ple']) {
  describe(`metrale check-layer on the committed ${pkg} fixtures`, () => {
    const dir = join(packages, pkg, 'fixtures');
    const names = readdirSync(dir).sort();

    it('finds the fixtures', () => {
      expect(names.length).toBeGreaterThanOrEqual(3);
    });

    for (const name of names) {
      it(`${name}: every step passes on the CPU backend`, () => {
        const r = metrale(['check-layer', join(dir, name), '--backend', 'cpu']);
        expect(r.stderr).toBe('');
        expect(r.code).toBe(0);
        const summary = JSON.parse(r.lines.at(-1)!) as { backend: string; pass: boolean; worst_rel: number; steps: number };
        expect(summary).toMatchObject({ backend: 'cpu', pass: true });
        expect(summary.worst_rel).toBeLessThan(1e-4);
        expect(r.lines).toHaveLength(summary.steps + 1);
      });
    }
  });
}
