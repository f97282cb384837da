import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { exports as resolveExports } from 'resolve.exports';
import { PluginError } from '../errors.js';
import { validatePlugin, type MetralePlugin } from './define-plugin.js';

/** Finds `node_modules/<name>` walking up from `fromDir`, as Node's resolver does. */
function findPackageDir(name: string, fromDir: string): string | undefined {
  let dir = resolve(fromDir);
  for (;;) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

/** The ESM entry file of an installed package, through its `exports` (or `module`/`main`). */
export function resolvePackageEntry(name: string, fromDir: string): string {
  const dir = findPackageDir(name, fromDir);
  if (!dir) throw new PluginError(name, `package not found from ${fromDir}; install it (npm install ${name})`);
  let manifest: Record<string, unknown>;
  try {
    manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Record<string, unknown>;
  } catch (cause) {
    throw new PluginError(name, `cannot read ${join(dir, 'package.json')}: ${(cause as Error).message}`, { cause });
  }
  let entry: string | undefined;
  if (manifest.exports !== undefined) {
    try {
      entry = resolveExports(manifest, '.', { conditions: ['import', 'node'] })?.[0];
    } catch (cause) {
      throw new PluginError(name, `its package.json exports no '.' entry for import (${(cause as Error).message})`, { cause });
    }
  } else {
    entry = (manifest.module as string | undefined) ?? (manifest.main as string | undefined) ?? 'index.js';
  }
  if (!entry) throw new PluginError(name, `its package.json exports no '.' entry for import`);
  return join(dir, entry);
}

/**
 * Imports a plugin package by name, resolved from `fromDir` (default: the working directory),
 * and checks it. The package exports the plugin as its default export or as `plugin`.
 */
export async function loadPlugin(name: string, options: { fromDir?: string } = {}): Promise<MetralePlugin> {
  const entry = resolvePackageEntry(name, options.fromDir ?? process.cwd());
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(entry).href)) as Record<string, unknown>;
  } catch (cause) {
    throw new PluginError(name, `failed to import ${entry}: ${(cause as Error).message}`, { cause });
  }
  const candidate = mod.default ?? mod.plugin;
  if (candidate === undefined) throw new PluginError(name, `exports no plugin: export the result of definePlugin() as default or as 'plugin'`);
  return validatePlugin(candidate, name);
}
