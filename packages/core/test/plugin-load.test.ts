import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  importPlugin, importPluginPackage, loadPlugin, PluginError, readPluginPackage, resolvePackageEntry, SPECIFICATION_VERSION, SpecificationVersionError,
} from '../src/index.js';
import { expectThrow } from './support/driver-rig.js';

// Packages written into a temporary node_modules, one fresh root per test (ESM caches by URL).
const roots: string[] = [];
afterAll(() => {
  for (const r of roots) rmSync(r, { recursive: true, force: true });
});

function freshRoot(): string {
  const root = mkdtempSync(join(tmpdir(), 'metrale-load-plugin-'));
  roots.push(root);
  return root;
}

function writePackage(root: string, name: string, manifest: Record<string, unknown>, files: Record<string, string>): string {
  const dir = join(root, 'node_modules', ...name.split('/'));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name, version: '1.0.0', type: 'module', ...manifest }));
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), text);
  }
  return dir;
}

/** A plugin module's source; a plain object, as a package built against core's types would export. */
function pluginModule(name: string, exportAs: 'default' | 'plugin', spec = SPECIFICATION_VERSION, stated = ''): string {
  const body = `{ name: ${JSON.stringify(name)},${stated ? ` version: ${JSON.stringify(stated)},` : ''} specificationVersion: ${JSON.stringify(spec)}, layerTypes: ['swa'], create() { return null; } }`;
  return exportAs === 'default' ? `export default ${body};\n` : `export const plugin = ${body};\nexport const other = 1;\n`;
}

const conditionalExports = { '.': { types: './dist/index.d.ts', import: './dist/index.js', require: './dist/index.cjs' }, './package.json': './package.json' };

describe('loadPlugin', () => {
  it("imports a package's default export through its exports map", async () => {
    const root = freshRoot();
    const dir = writePackage(root, 'metrale-layer-swa', { exports: conditionalExports }, {
      'dist/index.js': pluginModule('metrale-layer-swa', 'default'),
      'dist/index.cjs': 'throw new Error("the require entry must not be used");',
    });
    expect(resolvePackageEntry('metrale-layer-swa', root)).toBe(join(dir, 'dist/index.js'));
    const plugin = await loadPlugin('metrale-layer-swa', { fromDir: root });
    // The version is the package.json's: the module states none.
    expect(plugin).toMatchObject({ name: 'metrale-layer-swa', version: '1.0.0', layerTypes: ['swa'], __metralePlugin: true });
    expect(Object.isFrozen(plugin)).toBe(true);
  });

  it("imports a scoped package's named `plugin` export, found walking up from a nested directory", async () => {
    const root = freshRoot();
    writePackage(root, '@acme/layer-swa', { exports: './lib/main.js' }, { 'lib/main.js': pluginModule('@acme/layer-swa', 'plugin') });
    const nested = join(root, 'apps', 'serve', 'src');
    mkdirSync(nested, { recursive: true });
    const plugin = await loadPlugin('@acme/layer-swa', { fromDir: nested });
    expect(plugin.name).toBe('@acme/layer-swa');
  });

  it('falls back to `main`, then index.js, when there is no exports map', async () => {
    const root = freshRoot();
    const withMain = writePackage(root, 'with-main', { main: 'entry.js' }, { 'entry.js': pluginModule('with-main', 'default') });
    const bare = writePackage(root, 'bare', {}, { 'index.js': pluginModule('bare', 'plugin') });
    expect(resolvePackageEntry('with-main', root)).toBe(join(withMain, 'entry.js'));
    expect(resolvePackageEntry('bare', root)).toBe(join(bare, 'index.js'));
    expect((await loadPlugin('with-main', { fromDir: root })).name).toBe('with-main');
    expect((await loadPlugin('bare', { fromDir: root })).name).toBe('bare');
  });

  it("takes the version from the package's package.json and refuses a plugin that states another", async () => {
    const root = freshRoot();
    writePackage(root, 'versioned', { version: '4.5.6' }, { 'index.js': pluginModule('versioned', 'default') });
    expect((await loadPlugin('versioned', { fromDir: root })).version).toBe('4.5.6');
    writePackage(root, 'stale-version', { version: '2.0.0' }, { 'index.js': pluginModule('stale-version', 'default', SPECIFICATION_VERSION, '1.9.0') });
    const e = await loadPlugin('stale-version', { fromDir: root }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PluginError);
    expect((e as PluginError).message).toMatch(/plugin stale-version: 'version' is 1\.9\.0 but its package\.json says 2\.0\.0/);
  });

  it('reads a package from its directory (a checkout, not installed) and imports its plugin', async () => {
    const root = freshRoot();
    const dir = writePackage(root, '@acme/layer-dir', { version: '0.3.0', exports: conditionalExports }, { 'dist/index.js': pluginModule('@acme/layer-dir', 'plugin') });
    const pkg = readPluginPackage(dir);
    expect(pkg).toEqual({ dir, name: '@acme/layer-dir', version: '0.3.0', entry: join(dir, 'dist/index.js') });
    expect(await importPluginPackage(pkg)).toMatchObject({ name: '@acme/layer-dir', version: '0.3.0', layerTypes: ['swa'] });
    expectThrow(() => readPluginPackage(join(root, 'nowhere')), PluginError, /plugin .*nowhere: cannot read .*nowhere\/package\.json/);
    const e = await importPlugin(join(dir, 'missing.js'), 'by-file').catch((x: unknown) => x);
    expect((e as PluginError).message).toMatch(/^plugin by-file: failed to import .*missing\.js/);
  });

  it('refuses a package that exports no plugin', async () => {
    const root = freshRoot();
    writePackage(root, 'not-a-plugin', { exports: { '.': './index.js' } }, { 'index.js': 'export const helper = 1;\n' });
    const e = await loadPlugin('not-a-plugin', { fromDir: root }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PluginError);
    expect((e as PluginError).message).toMatch(/plugin not-a-plugin: exports no plugin: export the result of definePlugin\(\) as default or as 'plugin'/);
  });

  it('refuses a package built for another contract version, naming both', async () => {
    const root = freshRoot();
    writePackage(root, 'future-layer', { exports: conditionalExports }, { 'dist/index.js': pluginModule('future-layer', 'default', '2.1.0') });
    const e = await loadPlugin('future-layer', { fromDir: root }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(SpecificationVersionError);
    expect((e as SpecificationVersionError).message).toContain('2.1.0');
    expect((e as SpecificationVersionError).message).toContain(SPECIFICATION_VERSION);
    expect((e as SpecificationVersionError).plugin).toBe('future-layer');
  });

  it('refuses a malformed plugin, naming the package', async () => {
    const root = freshRoot();
    writePackage(root, 'half-plugin', {}, { 'index.js': 'export default { name: "half-plugin" };\n' });
    const e = await loadPlugin('half-plugin', { fromDir: root }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PluginError);
    expect((e as PluginError).message).toMatch(/plugin half-plugin: 'specificationVersion'/);
  });

  it('says how to install a package it cannot find', async () => {
    const root = freshRoot();
    const e = await loadPlugin('@acme/missing', { fromDir: root }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PluginError);
    expect((e as PluginError).message).toContain(`package not found from ${root}; install it (npm install @acme/missing)`);
  });

  it('wraps a module that fails to import', async () => {
    const root = freshRoot();
    writePackage(root, 'broken-syntax', {}, { 'index.js': 'export default {\n' });
    const e = await loadPlugin('broken-syntax', { fromDir: root }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PluginError);
    expect((e as PluginError).message).toMatch(/plugin broken-syntax: failed to import .*index\.js/);
    expect((e as PluginError).cause).toBeDefined();
  });

  it('refuses, with a PluginError, a package whose exports have no entry for import', async () => {
    const root = freshRoot();
    writePackage(root, 'cjs-only', { exports: { '.': { require: './index.cjs' } } }, { 'index.cjs': 'module.exports = {};\n' });
    const e = await loadPlugin('cjs-only', { fromDir: root }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(PluginError);
    expect((e as PluginError).message).toMatch(/plugin cjs-only: .*no '\.' entry for import/);
  });
});
