#!/usr/bin/env node
// The GPU benchmarks: cuda-backend's bench/*.bench.mjs and every package's bench/*.gpu.bench.mjs
// or bench/*cuda*.bench.mjs, each run with plain `node` in its package directory, its JSON going
// to bench-results/<package>.json (<package>-<bench>.json when a package has several; override
// the folder with METRALE_BENCH_DIR). Without a
// GPU each benchmark says so and exits 0. Exits non-zero when any benchmark fails.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const outDir = process.env.METRALE_BENCH_DIR ?? join(root, 'bench-results');

function packageDirs() {
  const dirs = [];
  for (const group of ['packages', 'apps', 'examples']) {
    const parent = join(root, group);
    if (!existsSync(parent)) continue;
    for (const name of readdirSync(parent).sort()) {
      if (existsSync(join(parent, name, 'package.json'))) dirs.push(join(parent, name));
    }
  }
  return dirs;
}

function gpuBenches(dir) {
  const bench = join(dir, 'bench');
  if (!existsSync(bench)) return [];
  const isCudaBackend = basename(dir) === 'cuda-backend';
  return readdirSync(bench)
    .filter((f) => f.endsWith('.bench.mjs') && (isCudaBackend || /\.gpu\.bench\.mjs$|cuda/i.test(f)))
    .sort()
    .map((f) => join(bench, f));
}

const results = [];
for (const dir of packageDirs()) {
  const name = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).name ?? basename(dir);
  const benches = gpuBenches(dir);
  for (const file of benches) {
    const label = `${name} ${basename(file)}`;
    const suffix = benches.length > 1 ? `-${basename(file, '.bench.mjs').replace(/\.gpu$/, '')}` : '';
    const out = join(outDir, `${basename(dir)}${suffix}.json`);
    console.log(`\n=== ${label} -> ${relative(root, out)} ===`);
    const run = spawnSync(process.execPath, [file], { cwd: dir, stdio: 'inherit', env: { ...process.env, METRALE_BENCH_OUT: out } });
    results.push({ label, ok: !run.error && run.status === 0, status: run.error ? run.error.message : `exit ${run.status ?? run.signal}` });
  }
}
console.log('\nGPU benchmark summary');
for (const r of results) console.log(`  ${r.ok ? 'ok    ' : 'FAILED'}  ${r.label}${r.ok ? '' : ` (${r.status})`}`);
process.exit(results.every((r) => r.ok) ? 0 : 1);
