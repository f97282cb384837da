// The tests run the built CLI, so build it first when dist is missing or older than the sources
// (turbo's test-after-build ordering makes this a no-op in CI; it matters for `vitest` run by hand).
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

function newestMtime(path: string): number {
  const s = statSync(path);
  if (!s.isDirectory()) return s.mtimeMs;
  return Math.max(0, ...readdirSync(path).map((e) => newestMtime(join(path, e))));
}

export default function setup(): void {
  const cli = join(root, 'dist', 'cli.js');
  const sources = Math.max(newestMtime(join(root, 'src')), newestMtime(join(root, 'tsup.config.ts')), newestMtime(join(root, 'package.json')));
  if (existsSync(cli) && statSync(cli).mtimeMs >= sources) return;
  const r = spawnSync('npx', ['tsup'], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) throw new Error(`building @metrale/serve for the CLI tests failed (tsup exit code ${r.status})`);
}
