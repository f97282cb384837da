#!/usr/bin/env node
// `npm start` / `npm test` on a fresh clone with only Node and npm: fetch the pinned pnpm through
// npx, install, build, then serve or test. Every step's failure stops the run with its exit code.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const PNPM = 'pnpm@12.4.2';
const npx = process.platform === 'win32' ? 'npx.cmd' : 'npx';

function pnpm(args, env = process.env) {
  const result = spawnSync(npx, ['-y', PNPM, ...args], { cwd: root, stdio: 'inherit', env });
  if (result.error) throw result.error;
  if (result.status !== 0) {
    console.error(`metrale: 'pnpm ${args.join(' ')}' failed with exit code ${result.status}`);
    process.exit(result.status ?? 1);
  }
}

const command = process.argv[2];
const lockfile = existsSync(join(root, 'pnpm-lock.yaml'));
pnpm(['install', lockfile ? '--frozen-lockfile' : '--no-frozen-lockfile']);
/** An NVIDIA driver is loaded (Linux), or WSL's libcuda is there, or the loader knows libcuda.so.1. */
function hasNvidiaDriver() {
  if (existsSync('/proc/driver/nvidia/version') || existsSync('/usr/lib/wsl/lib/libcuda.so.1')) return true;
  try {
    return /libcuda\.so\.1/.test(execFileSync('ldconfig', ['-p'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
  } catch {
    return false;
  }
}

// `npm start` without a GPU serves on the CPU: compiling the CUDA kernels (most of the build's
// time) would only delay the first answer. `npm test` always compiles them: CI checks they build.
let buildEnv = process.env;
if (command === 'start' && process.env.METRALE_KERNELS === undefined && !hasNvidiaDriver()) {
  console.log('metrale: no NVIDIA driver here: building without the CUDA kernels (set METRALE_KERNELS=build to compile them anyway)');
  buildEnv = { ...process.env, METRALE_KERNELS: 'skip' };
}
pnpm(['run', 'build'], buildEnv);
if (command === 'test') {
  pnpm(['run', 'test:unit']);
  pnpm(['run', 'test:repo']);
  pnpm(['run', 'lint:package']);
  pnpm(['run', 'test:gpu']);
} else if (command === 'start') {
  pnpm(['--filter', '@metrale/serve', 'run', 'start', ...process.argv.slice(3)]);
} else {
  console.error(`usage: node scripts/bootstrap.mjs start|test`);
  process.exit(2);
}
