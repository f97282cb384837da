import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { exports as resolveExports } from 'resolve.exports';
import { PluginError } from '../errors.js';
import { validatePlugin, type MetralePlugin, type PluginOrigin } from './define-plugin.js';

/** A package on disk as a plugin loader needs it. */
export interface PluginPackage {
  readonly dir: string;
  /** `name` of its package.json. */
  readonly name: string;
  /** `version` of its package.json, when it has one. */
  readonly version?: string;
  /** The ESM entry file, through `exports` (or `module`/`main`, else index.js). */
  readonly entry: string;
}

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

/** Reads the package in `dir` (its package.json and ESM entry); `id` names it in errors (default: the directory). */
export function readPluginPackage(dir: string, id: string = dir): PluginPackage {
  let manifest: Record<string, unknown>;
  try {
    manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Record<string, unknown>;
  } catch (cause) {
    throw new PluginError(id, `cannot read ${join(dir, 'package.json')}: ${(cause as Error).message}`, { cause });
  }
  let entry: string | undefined;
  if (manifest.exports !== undefined) {
    try {
      entry = resolveExports(manifest, '.', { conditions: ['import', 'node'] })?.[0];
    } catch (cause) {
      throw new PluginError(id, `its package.json exports no '.' entry for import (${(cause as Error).message})`, { cause });
    }
  } else {
    entry = (manifest.module as string | undefined) ?? (manifest.main as string | undefined) ?? 'index.js';
  }
  if (!entry) throw new PluginError(id, `its package.json exports no '.' entry for import`);
  return {
    dir,
    name: typeof manifest.name === 'string' ? manifest.name : id,
    ...(typeof manifest.version === 'string' ? { version: manifest.version } : {}),
    entry: join(dir, entry),
  };
}

/** The ESM entry file of an installed package, through its `exports` (or `module`/`main`). */
export function resolvePackageEntry(name: string, fromDir: string): string {
  return readPluginPackage(installedPackageDir(name, fromDir), name).entry;
}

function installedPackageDir(name: string, fromDir: string): string {
  const dir = findPackageDir(name, fromDir);
  if (!dir) throw new PluginError(name, `package not found from ${fromDir}; install it (npm install ${name})`);
  return dir;
}

/**
 * Imports a plugin module file and checks its default export (or its `plugin` export); `id`
 * names it in errors. A package's version comes in through `origin`.
 */
export async function importPlugin(file: string, id: string, origin: PluginOrigin = {}): Promise<MetralePlugin> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (cause) {
    throw new PluginError(id, `failed to import ${file}: ${(cause as Error).message}`, { cause });
  }
  const candidate = mod.default ?? mod.plugin;
  if (candidate === undefined) throw new PluginError(id, `exports no plugin: export the result of definePlugin() as default or as 'plugin'`);
  return validatePlugin(candidate, id, origin);
}

/** Imports the plugin of a package read by `readPluginPackage`, its version from its package.json. */
export function importPluginPackage(pkg: PluginPackage, id: string = pkg.name): Promise<MetralePlugin> {
  return importPlugin(pkg.entry, id, pkg.version !== undefined ? { packageVersion: pkg.version } : {});
}

/**
 * Imports a plugin package by name, resolved from `fromDir` (default: the working directory),
 * and checks it. The package exports the plugin as its default export or as `plugin`; its
 * version is its package.json's.
 */
export async function loadPlugin(name: string, options: { fromDir?: string } = {}): Promise<MetralePlugin> {
  return importPluginPackage(readPluginPackage(installedPackageDir(name, options.fromDir ?? process.cwd()), name));
}
