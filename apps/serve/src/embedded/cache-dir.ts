import { accessSync, constants, mkdirSync } from 'node:fs';
import { homedir, tmpdir, userInfo } from 'node:os';
import { join, resolve } from 'node:path';

/**
 * Where metrale keeps what it makes on first start (the embedded model): the first of
 * `--cache-dir`, $METRALE_CACHE_DIR, $XDG_CACHE_HOME/metrale, ~/.cache/metrale and
 * <tmpdir>/metrale-<user> that exists or can be created and is writable. An empty or unset HOME
 * still gets one (the temporary directory), so a fresh machine serves without any setup.
 */
export function cacheDirCandidates(explicit?: string, env: NodeJS.ProcessEnv = process.env): string[] {
  const out: string[] = [];
  if (explicit) out.push(resolve(explicit));
  if (env.METRALE_CACHE_DIR) out.push(resolve(env.METRALE_CACHE_DIR));
  if (env.XDG_CACHE_HOME) out.push(join(resolve(env.XDG_CACHE_HOME), 'metrale'));
  let home: string | undefined;
  try {
    home = env.HOME || homedir();
  } catch {
    home = undefined;
  }
  if (home) out.push(join(home, '.cache', 'metrale'));
  let user = 'user';
  try {
    user = userInfo().username || String(process.getuid?.() ?? 'user');
  } catch {
    // No passwd entry (containers): the uid is enough to keep users apart.
    user = String(process.getuid?.() ?? 'user');
  }
  out.push(join(tmpdir(), `metrale-${user}`));
  return out;
}

/** The first usable cache directory (created when missing); an explicit one that fails is an error. */
export function resolveCacheDir(explicit?: string, env: NodeJS.ProcessEnv = process.env): string {
  const candidates = cacheDirCandidates(explicit, env);
  const problems: string[] = [];
  for (const [i, dir] of candidates.entries()) {
    try {
      mkdirSync(dir, { recursive: true });
      accessSync(dir, constants.W_OK);
      return dir;
    } catch (error) {
      if (i === 0 && explicit) throw new Error(`--cache-dir ${dir} cannot be used: ${(error as Error).message}`);
      problems.push(`${dir}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
  }
  throw new Error(`no writable cache directory (tried ${problems.join('; ')}); give one with --cache-dir`);
}
