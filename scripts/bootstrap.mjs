#!/usr/bin/env node
// `npm start` / `npm test` on a fresh clone with only Node and npm: fetch the pinned pnpm through
// npx, install, build, then serve or test. Every step's failure stops the run with its exit code.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const PNPM = 'pnpm@12.4.2';
const npx = process.platform === 'win32' ? 'npx.cmd' : 'npx';

function pnpm(args) {
  const result = spawnSync(npx, ['-y', PNPM, ...args], { cwd: root, stdio: 'inherit', env: process.env });
  if (result.error) throw result.error;
  if (result.status !== 0) {
    console.error(`metrale: 'pnpm ${args.join(' ')}' failed with exit code ${result.status}`);
    process.exit(result.status ?? 1);
  }
}

const command = process.argv[2];
const lockfile = existsSync(join(root, 'pnpm-lock.yaml'));
pnpm(['install', lockfile ? '--frozen-lockfile' : '--no-frozen-lockfile']);
pnpm(['run', 'build']);
if (command === 'test') {
  pnpm(['run', 'test:unit']);
  pnpm(['run', 'lint:package']);
  pnpm(['run', 'test:gpu']);
} else if (command === 'start') {
  pnpm(['--filter', '@metrale/serve', 'run', 'start', ...process.argv.slice(3)]);
} else {
  console.error(`usage: node scripts/bootstrap.mjs start|test`);
  process.exit(2);
}
