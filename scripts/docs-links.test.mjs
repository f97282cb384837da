// Every docs link and cited docs path in the repository resolves inside it (scripts/docs-links.mjs),
// and the check fails on a fixture tree with broken ones. Run by `npm test` (`npm run test:repo`).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { commentText, describeBroken, findBrokenDocRefs } from './docs-links.mjs';

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..');

const temps = [];
afterAll(() => {
  for (const t of temps) rmSync(t, { recursive: true, force: true });
});

/** A fixture tree: `files` maps a path under the root to its text. Returns the root. */
function tree(files) {
  const outer = mkdtempSync(join(tmpdir(), 'metrale-docs-links-'));
  temps.push(outer);
  const root = join(outer, 'repo');
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

describe('the repository', () => {
  it('has no broken docs link and no cited docs path that is missing or outside it', () => {
    const broken = findBrokenDocRefs(repoRoot);
    expect(broken.map(describeBroken)).toEqual([]);
  });
});

describe('findBrokenDocRefs', () => {
  it('passes links and cited paths that resolve', () => {
    const root = tree({
      'README.md': 'See [the design](docs/architecture.md#layers), docs/layers/gdn.md and <https://example.com/x.md>.\n',
      'docs/architecture.md': '# Architecture\n[back](../README.md) and [gdn](layers/gdn.md).\n',
      'docs/layers/gdn.md': '# GDN\nKernels: packages/layer-gdn/KERNELS.md.\n',
      'packages/layer-gdn/KERNELS.md': 'Math: docs/layers/gdn.md. Globs like kernels/*.md are not paths.\n',
      'packages/layer-gdn/src/layer.ts': '// Layouts: KERNELS.md; math: docs/layers/gdn.md.\nconst s = "not a comment: // gone.md";\n',
      'packages/layer-gdn/kernels/k.cu': '// Layouts: ../KERNELS.md\n/* and docs/layers/gdn.md */\n',
      'tools/gen.py': '"""Writes fixtures (docs/layers/gdn.md)."""\nx = "# gone.md"  # see README.md\n',
    });
    expect(findBrokenDocRefs(root)).toEqual([]);
  });

  it('fails on a broken link, a missing cited path, and a path outside the repository', () => {
    const root = tree({
      'README.md': 'Intro.\nSee [the fixtures](docs/fixtures.md) and docs/performance.md.\n',
      'docs/architecture.md': 'Measured figures: ../../shared/docs/benchmarks.md.\n',
      'packages/core/src/fixture/index.ts': 'export {};\n// Format: docs/fixtures.md\n',
      'packages/layer-dsa/kernels/k.cu': '/* Layouts:\n   KERNELS.md */\n',
    });
    // The outside file exists on this machine: still broken, it is not in the repository.
    mkdirSync(join(root, '..', 'shared', 'docs'), { recursive: true });
    writeFileSync(join(root, '..', 'shared', 'docs', 'benchmarks.md'), '# elsewhere\n');

    const broken = findBrokenDocRefs(root);
    expect(broken.map((b) => [b.file, b.line, b.kind, b.ref])).toEqual([
      ['README.md', 2, 'link', 'docs/fixtures.md'],
      ['README.md', 2, 'cited', 'docs/performance.md'],
      ['docs/architecture.md', 1, 'cited', '../../shared/docs/benchmarks.md'],
      ['packages/core/src/fixture/index.ts', 2, 'cited', 'docs/fixtures.md'],
      ['packages/layer-dsa/kernels/k.cu', 2, 'cited', 'KERNELS.md'],
    ]);
    expect(broken[2].why).toBe('outside the repository');
    expect(describeBroken(broken[0])).toBe('README.md:2: link docs/fixtures.md: no such file');
  });

  it('leaves out installs and build outputs', () => {
    const root = tree({
      'README.md': 'ok\n',
      'node_modules/x/README.md': '[gone](gone.md)\n',
      'packages/a/dist/index.js': '// see gone.md\n',
    });
    expect(findBrokenDocRefs(root)).toEqual([]);
  });
});

describe('commentText', () => {
  it('keeps the comments of a source file, and its line breaks, and blanks the code', () => {
    const text = 'const a = "x.md"; // y.md\n/* z.md\n   w.md */ f();\n';
    const kept = commentText(text, '.ts');
    expect(kept.split('\n')).toHaveLength(text.split('\n').length);
    expect(kept).toContain('// y.md');
    expect(kept).toContain('/* z.md\n   w.md */');
    expect(kept).not.toContain('x.md');
    expect(kept).not.toContain('f()');
  });
});
