import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root. */
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');

/** Where each workspace package lives. */
export const PACKAGE_DIRS: Record<string, string> = {
  '@metrale/core': 'packages/core',
  '@metrale/cpu-backend': 'packages/cpu-backend',
  '@metrale/cuda-backend': 'packages/cuda-backend',
  '@metrale/layer-std': 'packages/layer-std',
  '@metrale/layer-gdn': 'packages/layer-gdn',
  '@metrale/layer-dsa': 'packages/layer-dsa',
  '@metrale/layer-ple': 'packages/layer-ple',
  '@metrale/layer-example': 'examples/layer-example',
  '@metrale/serve': 'apps/serve',
};

/**
 * Packs a workspace package into `out` as the registry would serve it (`pnpm pack` rewrites
 * workspace: ranges to versions) and returns the tarball's path. The package must be built.
 */
export function pack(name: string, out: string): string {
  const dir = PACKAGE_DIRS[name];
  if (!dir) throw new Error(`${name} is not a workspace package (${Object.keys(PACKAGE_DIRS).join(', ')})`);
  // A tarball without dist installs and then fails far from here.
  if (!existsSync(join(ROOT, dir, 'dist'))) throw new Error(`${name} is not built (no ${dir}/dist): run the build first (npx -y pnpm@12.4.2 run build)`);
  mkdirSync(out, { recursive: true });
  execFileSync('npx', ['-y', 'pnpm@12.4.2', 'pack', '--pack-destination', out], { cwd: join(ROOT, dir), stdio: 'pipe' });
  const file = readdirSync(out).find((f) => f.startsWith(`metrale-${dir.split('/').pop()}-`) && f.endsWith('.tgz'));
  if (!file) throw new Error(`no tarball for ${name} in ${readdirSync(out).join(', ')}`);
  return join(out, file);
}

/** The @metrale/* packages `name` depends on, directly or not (its own name excluded). */
export function workspaceDependencies(name: string): string[] {
  const seen = new Set<string>();
  const visit = (n: string) => {
    const manifest = JSON.parse(readFileSync(join(ROOT, PACKAGE_DIRS[n]!, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
    for (const dep of Object.keys(manifest.dependencies ?? {})) {
      if (dep.startsWith('@metrale/') && !seen.has(dep)) {
        seen.add(dep);
        visit(dep);
      }
    }
  };
  visit(name);
  return [...seen];
}
