import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { importPlugin, importPluginPackage, readPluginPackage, type MetralePlugin } from '@metrale/core';
import { UsageError } from '../errors/cli-errors.js';

/** metrale's own layer packages: looked up by name even when their manifest is not scanned. */
export const FIRST_PARTY_PLUGINS = ['@metrale/layer-std', '@metrale/layer-gdn', '@metrale/layer-dsa', '@metrale/layer-ple'] as const;

export type PluginSource = 'node_modules' | 'first-party' | '--plugin';

export interface DiscoveredPlugin {
  /** The package name, or the path given to --plugin. */
  readonly id: string;
  readonly source: PluginSource;
  /** One of metrale's own layer packages (FIRST_PARTY_PLUGINS): what a third-party plugin replaces only when preferred. */
  readonly bundled: boolean;
  /** The package directory or the module file. */
  readonly location: string;
  /** From the package's package.json. */
  readonly version?: string;
  /** The plugin, when it loaded and passed validation. */
  readonly plugin?: MetralePlugin;
  /** Why there is no plugin: an import failure, a validation error, a clash with another plugin. */
  readonly problem?: string;
}

export interface DiscoverOptions {
  /** The working directory: its node_modules (and those above it) are searched first. */
  readonly cwd: string;
  /** The serve package's own directory: the plugins installed beside the CLI. */
  readonly packageDir: string;
  /**
   * --plugin values: package names, package directories or module files. A failure to load one
   * of these is an error.
   */
  readonly explicit?: readonly string[];
}

/**
 * Finds the installed plugins: every package in a node_modules directory visible from the working
 * directory or from the serve package whose package.json says `"metrale": {"plugin": true}`, the
 * first-party layer packages when resolvable, and the --plugin packages, directories or files.
 * Each is imported; one that exports no plugin, or fails to import, is listed with the problem
 * instead of a plugin.
 */
export async function discoverPlugins(options: DiscoverOptions): Promise<DiscoveredPlugin[]> {
  const roots = [...new Set([resolve(options.cwd), resolve(options.packageDir)])];
  const found: DiscoveredPlugin[] = [];
  const seen = new Set<string>();
  for (const spec of options.explicit ?? []) {
    const p = await loadExplicit(spec, roots);
    // The same package named twice (by name and by path) loads once.
    if (seen.has(p.plugin!.name)) continue;
    found.push(p);
    seen.add(p.id).add(p.plugin!.name);
  }
  const candidates: { name: string; dir: string; source: PluginSource }[] = [];
  for (const nodeModules of roots.flatMap(nodeModulesAbove)) {
    for (const dir of packageDirs(nodeModules)) {
      const manifest = readManifest(dir);
      if (manifest && isPluginManifest(manifest) && typeof manifest.name === 'string') candidates.push({ name: manifest.name, dir, source: 'node_modules' });
    }
  }
  for (const name of FIRST_PARTY_PLUGINS) {
    const dir = findPackage(name, roots);
    if (dir) candidates.push({ name, dir, source: 'first-party' });
  }
  for (const c of candidates) {
    if (seen.has(c.name)) continue;
    seen.add(c.name);
    found.push(await loadPackage(c.name, c.dir, c.source));
  }
  return found;
}

/**
 * A --plugin value: a module file or a package directory by path, else an installed package by
 * name. One that does not load throws: the user asked for it.
 */
async function loadExplicit(spec: string, roots: readonly string[]): Promise<DiscoveredPlugin> {
  const path = resolve(roots[0]!, spec);
  const installed = looksLikePath(spec) ? undefined : findPackage(spec, roots);
  if (installed) return loadPackage(spec, installed, '--plugin');
  if (!existsSync(path)) {
    throw new UsageError(looksLikePath(spec)
      ? `--plugin ${spec}: no such file or directory (${path})`
      : `--plugin ${spec}: package not found in the node_modules visible from ${roots.join(' or ')}; install it or give a path`);
  }
  if (statSync(path).isDirectory()) {
    const name = readManifest(path)?.name;
    if (typeof name !== 'string') throw new UsageError(`--plugin ${spec}: ${path} has no package.json with a name; give the plugin package's directory or its module file`);
    return loadPackage(name, path, '--plugin');
  }
  return { id: spec, source: '--plugin', bundled: false, location: path, plugin: await importPlugin(path, spec) };
}

/** Imports a package's plugin. Only a --plugin one throws; a discovered one that fails carries the problem. */
async function loadPackage(id: string, dir: string, source: PluginSource): Promise<DiscoveredPlugin> {
  const version = readManifest(dir)?.version;
  const base = {
    id, source, location: dir, bundled: (FIRST_PARTY_PLUGINS as readonly string[]).includes(id),
    ...(typeof version === 'string' ? { version } : {}),
  };
  const load = () => importPluginPackage(readPluginPackage(dir, id), id);
  if (source === '--plugin') return { ...base, plugin: await load() };
  try {
    return { ...base, plugin: await load() };
  } catch (error) {
    return { ...base, problem: (error as Error).message };
  }
}

/** `./x`, `/x`, `x.mjs`, or `dir/x` (a package name has a slash only after its @scope). */
function looksLikePath(spec: string): boolean {
  return spec.startsWith('.') || isAbsolute(spec) || /\.(m?js|cjs)$/.test(spec) || (spec.includes('/') && !spec.startsWith('@'));
}

/** node_modules directories from `dir` up to the file-system root, nearest first, as Node searches. */
function nodeModulesAbove(dir: string): string[] {
  const out: string[] = [];
  for (let d = dir; ; d = dirname(d)) {
    const nm = join(d, 'node_modules');
    if (existsSync(nm)) out.push(nm);
    if (dirname(d) === d) return out;
  }
}

/** Package directories directly in a node_modules directory, scoped ones included; dot-entries (.pnpm, .bin) skipped. */
function packageDirs(nodeModules: string): string[] {
  const out: string[] = [];
  for (const entry of safeReaddir(nodeModules)) {
    if (entry.startsWith('.')) continue;
    if (entry.startsWith('@')) for (const sub of safeReaddir(join(nodeModules, entry))) out.push(join(nodeModules, entry, sub));
    else out.push(join(nodeModules, entry));
  }
  return out;
}

function findPackage(name: string, roots: readonly string[]): string | undefined {
  for (const nm of roots.flatMap(nodeModulesAbove)) {
    const dir = join(nm, name);
    if (existsSync(join(dir, 'package.json'))) return dir;
  }
  return undefined;
}

function isPluginManifest(manifest: Record<string, unknown>): boolean {
  const m = manifest.metrale;
  return typeof m === 'object' && m !== null && (m as Record<string, unknown>).plugin === true;
}

function readManifest(dir: string): Record<string, unknown> | undefined {
  try {
    const json = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as unknown;
    return typeof json === 'object' && json !== null ? (json as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function safeReaddir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
