import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { probe } from '@metrale/cuda-backend';
import { describe, expect, it } from 'vitest';
import { metrale } from '../support/run-cli.js';

// `metrale check-layer --backend cuda` on every committed plugin fixture.
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');
const cuda = probe();
if (!cuda.available) console.warn(`[serve gpu] skipped: ${cuda.reason}`);

const fixtureDirs = ['layer-gdn', 'layer-dsa', 'layer-ple'].flatMap((pkg) => {
  const dir = join(root, 'packages', pkg, 'fixtures');
  try {
    return readdirSync(dir).sort().map((name) => ({ pkg, name, path: join(dir, name) }));
  } catch {
    return [];
  }
});

describe.skipIf(!cuda.available)('metrale check-layer --backend cuda', () => {
  for (const f of fixtureDirs) {
    it(`${f.pkg}/${f.name} passes`, () => {
      const r = metrale(['check-layer', f.path, '--backend', 'cuda']);
      console.log(r.lines.at(-1));
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(JSON.parse(r.lines.at(-1)!)).toMatchObject({ backend: 'cuda', pass: true });
    });
  }
});
