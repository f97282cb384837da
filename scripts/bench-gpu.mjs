#!/usr/bin/env node
// The GPU benchmarks: every package's `bench:gpu` script (packages/*, apps/*, examples/*), run in
// its package directory with its JSON going to bench-results/<package directory>.json (override
// the folder with METRALE_BENCH_DIR; the bench reads METRALE_BENCH_OUT). Without a GPU each
// benchmark says so and exits 0. Exits non-zero when any benchmark fails.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const outDir = process.env.METRALE_BENCH_DIR ?? join(root, 'bench-results');

/** Each package directory with a `bench:gpu` script, and that script. */
function gpuBenches() {
  const found = [];
  for (const group of ['packages', 'apps', 'examples']) {
    const parent = join(root, group);
    if (!existsSync(parent)) continue;
    for (const name of readdirSync(parent).sort()) {
      const manifest = join(parent, name, 'package.json');
      if (!existsSync(manifest)) continue;
      const pkg = JSON.parse(readFileSync(manifest, 'utf8'));
      const command = pkg.scripts?.['bench:gpu'];
      if (command) found.push({ dir: join(parent, name), name: pkg.name ?? name, command });
    }
  }
  return found;
}

const results = [];
for (const { dir, name, command } of gpuBenches()) {
  const out = join(outDir, `${basename(dir)}.json`);
  console.log(`\n=== ${name}: ${command} -> ${relative(root, out)} ===`);
  const run = spawnSync(command, { cwd: dir, shell: true, stdio: 'inherit', env: { ...process.env, METRALE_BENCH_OUT: out } });
  results.push({ label: `${name} (${command})`, ok: !run.error && run.status === 0, status: run.error ? run.error.message : `exit ${run.status ?? run.signal}` });
}
console.log('\nGPU benchmark summary');
for (const r of results) console.log(`  ${r.ok ? 'ok    ' : 'FAILED'}  ${r.label}${r.ok ? '' : ` (${r.status})`}`);
process.exit(results.every((r) => r.ok) ? 0 : 1);
