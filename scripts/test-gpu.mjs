#!/usr/bin/env node
// The GPU test lane: for every workspace package with a vitest.gpu.config.ts, runs
// `node <root>/node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts` in that package
// and prints a summary. Needs only `node` on the PATH (no pnpm), and the packages built.
// Without a GPU it says so first; the suites then skip, each printing why. Exits non-zero when
// any package's run fails.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const vitest = join(root, 'node_modules', 'vitest', 'vitest.mjs');

/** Package directories from pnpm-workspace.yaml's `packages:` globs (dir/* and plain dirs). */
function workspacePackages() {
  const yaml = readFileSync(join(root, 'pnpm-workspace.yaml'), 'utf8');
  const globs = [];
  let inPackages = false;
  for (const line of yaml.split('\n')) {
    if (/^packages:\s*$/.test(line)) inPackages = true;
    else if (inPackages && /^\s+-\s+/.test(line)) globs.push(line.replace(/^\s+-\s+/, '').replace(/['"]/g, '').trim());
    else if (inPackages && /^\S/.test(line)) inPackages = false;
  }
  const dirs = [];
  for (const glob of globs) {
    if (glob.endsWith('/*')) {
      const parent = join(root, glob.slice(0, -2));
      if (!existsSync(parent)) continue;
      for (const entry of readdirSync(parent, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
        if (entry.isDirectory() && existsSync(join(parent, entry.name, 'package.json'))) dirs.push(join(parent, entry.name));
      }
    } else if (existsSync(join(root, glob, 'package.json'))) {
      dirs.push(join(root, glob));
    }
  }
  return dirs;
}

async function printProbe() {
  const dist = join(root, 'packages', 'cuda-backend', 'dist', 'index.js');
  if (!existsSync(dist)) {
    console.log(`CUDA: unknown (${relative(root, dist)} is not built; build the workspace first)`);
    return;
  }
  try {
    const { probe, selfCheck } = await import(pathToFileURL(dist).href);
    const found = probe();
    if (found.available) {
      console.log(`CUDA: available: ${found.reason}`);
      const check = selfCheck();
      console.log(`CUDA addon self-check: ${check.ok ? 'ok' : 'PROBLEMS'} (${check.checked} values checked)${check.problems.length ? `\n  ${check.problems.join('\n  ')}` : ''}`);
    } else {
      console.log(`CUDA: not available: ${found.reason}`);
      console.log('No GPU here: the GPU suites will skip, each saying why.');
    }
  } catch (error) {
    console.log(`CUDA: probe failed to load: ${error.message}`);
  }
}

async function main() {
  if (!existsSync(vitest)) {
    console.error(`test-gpu: ${relative(root, vitest)} not found; install the workspace's dependencies first`);
    return 2;
  }
  await printProbe();
  const packages = workspacePackages().filter((dir) => existsSync(join(dir, 'vitest.gpu.config.ts')));
  if (packages.length === 0) {
    console.log('test-gpu: no package has a vitest.gpu.config.ts');
    return 0;
  }
  const results = [];
  for (const dir of packages) {
    const name = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).name ?? relative(root, dir);
    console.log(`\n=== ${name} (${relative(root, dir)}) ===`);
    const started = Date.now();
    const run = spawnSync(process.execPath, [vitest, 'run', '--config', 'vitest.gpu.config.ts'], { cwd: dir, stdio: 'inherit', env: process.env });
    const status = run.error ? `could not start: ${run.error.message}` : run.status === 0 ? 'passed' : `FAILED (exit ${run.status ?? run.signal})`;
    results.push({ name, status, ok: !run.error && run.status === 0, seconds: (Date.now() - started) / 1000 });
  }
  console.log('\nGPU test summary');
  const width = Math.max(...results.map((r) => r.name.length));
  for (const r of results) console.log(`  ${r.name.padEnd(width)}  ${r.status}  (${r.seconds.toFixed(1)} s)`);
  const failed = results.filter((r) => !r.ok).length;
  console.log(failed ? `${failed} of ${results.length} package(s) failed` : `all ${results.length} package(s) passed`);
  return failed ? 1 : 0;
}

process.exit(await main());
