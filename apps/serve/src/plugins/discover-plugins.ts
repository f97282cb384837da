import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { PluginError, resolvePackageEntry, validatePlugin, type MetralePlugin } from '@metrale/core';
import { UsageError } from '../errors/cli-errors.js';

/** metrale's own layer packages: looked up by name even when their manifest is not scanned. */
export const FIRST_PARTY_PLUGINS = ['@metrale/layer-std', '@metrale/layer-gdn', '@metrale/layer-dsa', '@metrale/layer-ple'] as const;

export type PluginSource = 'node_modules' | 'first-party' | '--plugin';

export interface DiscoveredPlugin {
  /** The package name, or the module path given to --plugin. */
  readonly id: string;
  readonly source: PluginSource;
  /** The package directory or the module file. */
  readonly location: string;
  /** From the package's package.json. */
  readonly version?: string;
  /** The plugin, when it loaded and passed validation. */
  readonly plugin?: MetralePlugin;
  /** Why there is no plugin: "no plugin exported", an import failure, a validation error. */
  readonly problem?: string;
}

export interface DiscoverOptions {
  /** The working directory: its node_modules (and those above it) are searched first. */
  readonly cwd: string;
  /** The serve package's own directory: the plugins installed beside the CLI. */
  readonly packageDir: string;
  /** --plugin values: package names or module paths. A failure to load one of these is an error. */
  readonly explicit?: readonly string[];
}

/**
 * Finds the installed plugins: every package in a node_modules directory visible from the working
 * directory or from the serve package whose package.json says `"metrale": {"plugin": true}`, the
 * first-party layer packages when resolvable, and the --plugin packages or files. Each is imported;
 * one that exports no plugin, or fails to import, is listed with the problem instead of a plugin.
 */
export async function discoverPlugins(options: DiscoverOptions): Promise<DiscoveredPlugin[]> {
  const roots = [...new Set([resolve(options.cwd), resolve(options.packageDir)])];
  const found: DiscoveredPlugin[] = [];
  const seen = new Set<string>();
  for (const spec of options.explicit ?? []) {
    const p = await loadExplicit(spec, roots);
    found.push(p);
    seen.add(p.id);
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

async function loadExplicit(spec: string, roots: readonly string[]): Promise<DiscoveredPlugin> {
  if (looksLikePath(spec)) {
    const file = resolve(roots[0]!, spec);
    if (!existsSync(file) || !statSync(file).isFile()) throw new UsageError(`--plugin ${spec}: no such file (${file})`);
    const loaded = await importPlugin(spec, file);
    if (loaded.problem) throw new PluginError(spec, loaded.problem);
    return { id: spec, source: '--plugin', location: file, plugin: loaded.plugin! };
  }
  const dir = findPackage(spec, roots);
  if (!dir) throw new UsageError(`--plugin ${spec}: package not found in the node_modules visible from ${roots.join(' or ')}; install it or give a module path`);
  const p = await loadPackage(spec, dir, '--plugin');
  if (p.problem) throw new PluginError(spec, p.problem);
  return p;
}

async function loadPackage(name: string, dir: string, source: PluginSource): Promise<DiscoveredPlugin> {
  const version = readManifest(dir)?.version;
  const base = { id: name, source, location: dir, ...(typeof version === 'string' ? { version } : {}) };
  let entry: string;
  try {
    entry = resolvePackageEntry(name, holderOf(dir, name));
  } catch (error) {
    return { ...base, problem: (error as Error).message };
  }
  return { ...base, ...(await importPlugin(name, entry)) };
}

/** Imports a module and takes its default or `plugin` export. Never throws: failures become the problem. */
async function importPlugin(id: string, file: string): Promise<{ plugin?: MetralePlugin; problem?: string }> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    return { problem: `cannot import ${file}: ${(error as Error).message.split('\n')[0]}` };
  }
  const candidate = mod.default ?? mod.plugin;
  if (candidate === undefined) return { problem: 'no plugin exported' };
  try {
    return { plugin: validatePlugin(candidate, id) };
  } catch (error) {
    return { problem: (error as Error).message };
  }
}

/** X for X/node_modules/<name>: resolving from there finds exactly the package in `dir`. */
function holderOf(dir: string, name: string): string {
  let d = dir;
  for (const _ of name.split('/')) d = dirname(d);
  return dirname(d);
}

function looksLikePath(spec: string): boolean {
  return spec.startsWith('.') || isAbsolute(spec) || /\.(m?js|cjs)$/.test(spec);
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
