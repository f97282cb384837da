import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const PACKAGE_DIR = fileURLToPath(new URL('../..', import.meta.url));
export const CLI = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
export const AFFINE_PLUGIN = fileURLToPath(new URL('./affine-plugin.mjs', import.meta.url));

export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  /** stdout split into non-empty lines. */
  readonly lines: string[];
}

/** Runs the built `metrale` executable as a child process. */
export function metrale(args: readonly string[], options: { cwd?: string } = {}): CliRun {
  const r = spawnSync(process.execPath, [CLI, ...args], { cwd: options.cwd ?? PACKAGE_DIR, encoding: 'utf8', timeout: 60_000 });
  if (r.error) throw r.error;
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, lines: r.stdout.split('\n').filter(Boolean) };
}
