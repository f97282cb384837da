import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BROKEN_PLUGINS, LAYER_EXAMPLE_DIR, pluginSource, writePluginProject } from './support/plugin-projects.js';
import { AFFINE_PLUGIN, metrale } from './support/run-cli.js';

interface Provision {
  name: string;
  provider: string;
  bundled: boolean;
  shadowed: string[];
}

interface DoctorJson {
  backends: { name: string; available: boolean; reason: string; devices: { name: string }[] }[];
  plugins: { name: string; source: string; version?: string; specificationVersion?: string; layerTypes?: string[]; architectures?: string[]; problem?: string }[];
  core: { version: string; specificationVersion: string };
  architectures: Provision[];
  layerTypes: Provision[];
}

function doctorJson(args: string[] = [], cwd?: string): DoctorJson {
  const r = metrale(['doctor', '--json', ...args], cwd ? { cwd } : {});
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as DoctorJson;
}

const projects: string[] = [];
afterAll(() => {
  for (const dir of projects) rmSync(dir, { recursive: true, force: true });
});

/** A project directory with these packages installed (see writePluginProject). */
function projectWith(packages: Parameters<typeof writePluginProject>[1]): string {
  const dir = mkdtempSync(join(tmpdir(), 'metrale-doctor-'));
  projects.push(dir);
  return writePluginProject(dir, packages);
}

/** A project directory whose node_modules holds plugin packages of its own. */
function projectWithPackages(): string {
  return projectWith({
    // A plugin needs no import of its own: a plain object with the plugin fields validates.
    '@acme/layer-rwkv': [
      "export default { name: '@acme/layer-rwkv', version: '2.3.4', specificationVersion: '1.2.0',",
      "  layerTypes: ['rwkv7'], modelTypes: ['rwkv7'], create() { throw new Error('not in this test'); } };",
    ].join('\n'),
    'acme-skeleton': 'export {};\n',
    'not-a-plugin': { source: 'export default 42;\n', plugin: false },
  });
}

describe('metrale doctor', () => {
  it('reports the CPU backend as available and says why CUDA is or is not', () => {
    const json = doctorJson();
    const cpu = json.backends.find((b) => b.name === 'cpu')!;
    const cuda = json.backends.find((b) => b.name === 'cuda')!;
    expect(cpu.available).toBe(true);
    expect(cpu.devices.length).toBeGreaterThan(0);
    expect(cuda.reason.length).toBeGreaterThan(0);

    const text = metrale(['doctor']);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^ {2}cpu +available +\S/m);
    expect(text.stdout).toMatch(/device 0: /);
    // The CUDA probe's reason is printed verbatim (on a machine without a driver: "libcuda.so.1 not found…").
    const cudaLine = text.stdout.split('\n').find((l) => l.startsWith('  cuda'))!;
    expect(cudaLine).toContain(cuda.available ? 'available' : 'not available');
    expect(cudaLine).toContain(cuda.reason);
    expect(text.stdout).toContain(`layer contract ${json.core.specificationVersion}`);
  });

  it('lists plugins found in node_modules, with version, contract and layer types, and one that exports none', () => {
    const json = doctorJson([], projectWithPackages());
    const byName = Object.fromEntries(json.plugins.map((p) => [p.name, p]));
    expect(byName['@acme/layer-rwkv']).toMatchObject({ source: 'node_modules', version: '2.3.4', specificationVersion: '1.2.0', layerTypes: ['rwkv7'] });
    expect(byName['acme-skeleton']).toMatchObject({ source: 'node_modules', problem: "plugin acme-skeleton: exports no plugin: export the result of definePlugin() as default or as 'plugin'" });
    expect(byName['not-a-plugin']).toBeUndefined();
    // Plugins installed beside the CLI are found too, from any working directory.
    expect(byName['@metrale/layer-example']).toBeDefined();

    const text = metrale(['doctor'], { cwd: projectWithPackages() }).stdout;
    expect(text).toMatch(/@acme\/layer-rwkv 2\.3\.4 +contract 1\.2\.0, layer types: rwkv7, model types: rwkv7 +\[node_modules\]/);
    expect(text).toMatch(/acme-skeleton 2\.3\.4 +plugin acme-skeleton: exports no plugin: .* +\[node_modules\]/);
  });

  it('loads a module file given with --plugin', () => {
    const json = doctorJson(['--plugin', AFFINE_PLUGIN]);
    expect(json.plugins.find((p) => p.source === '--plugin')).toMatchObject({ name: AFFINE_PLUGIN, layerTypes: ['affine'] });
  });

  it('takes --plugin more than once, by path and by package name', () => {
    const json = doctorJson(['--plugin', AFFINE_PLUGIN, '--plugin', '@metrale/layer-example']);
    expect(json.plugins.filter((p) => p.source === '--plugin').map((p) => p.name)).toEqual([AFFINE_PLUGIN, '@metrale/layer-example']);
  });

  it('fails on a --plugin that does not exist, naming it', () => {
    const r = metrale(['doctor', '--plugin', './no/such-plugin.mjs']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^error: --plugin \.\/no\/such-plugin\.mjs: no such file or directory \(.*no\/such-plugin\.mjs\)$/m);
  });

  it('shows which plugin serves each model_type and layer type, a package directory given to --plugin included', () => {
    const json = doctorJson(['--plugin', LAYER_EXAMPLE_DIR]);
    expect(json.plugins.find((p) => p.source === '--plugin')).toMatchObject({ name: '@metrale/layer-example', version: '0.1.0', layerTypes: ['sliding-window'], architectures: ['qwen3_next_sliding'] });
    const byName = (list: Provision[]) => Object.fromEntries(list.map((p) => [p.name, p]));
    expect(byName(json.architectures)).toMatchObject({
      qwen3_next: { provider: '@metrale/serve', bundled: true }, glm_moe_dsa: { provider: '@metrale/serve', bundled: true },
      qwen3_next_sliding: { provider: '@metrale/layer-example', bundled: false, shadowed: [] },
    });
    expect(byName(json.layerTypes)).toMatchObject({ gdn: { provider: '@metrale/layer-gdn', bundled: true }, 'sliding-window': { provider: '@metrale/layer-example', bundled: false } });

    const text = metrale(['doctor', '--plugin', LAYER_EXAMPLE_DIR]).stdout;
    expect(text).toMatch(/@metrale\/layer-example 0\.1\.0 +contract 1\.0\.0, layer types: sliding-window, architectures: qwen3_next_sliding +\[--plugin\]/);
    expect(text).toMatch(/^architectures \(model_type: served by\)\n(?: {2}.*\n)* {2}qwen3_next_sliding +@metrale\/layer-example$/m);
    expect(text).toMatch(/^ {2}qwen3_next +@metrale\/serve \(bundled\)$/m);
    expect(text).toMatch(/^ {2}sliding-window +@metrale\/layer-example$/m);
  });

  it('keeps the bundled gdn and qwen3_next over a plugin that offers them too, unless --prefer-plugin names it', () => {
    const dir = projectWith({ '@acme/gdn-fork': pluginSource('@acme/gdn-fork', { layerTypes: ['gdn'], architectures: ['qwen3_next'] }) });
    const kept = doctorJson([], dir);
    expect(kept.layerTypes.find((p) => p.name === 'gdn')).toEqual({ name: 'gdn', provider: '@metrale/layer-gdn', bundled: true, shadowed: ['@acme/gdn-fork'] });
    expect(kept.architectures.find((p) => p.name === 'qwen3_next')).toEqual({ name: 'qwen3_next', provider: '@metrale/serve', bundled: true, shadowed: ['@acme/gdn-fork'] });
    expect(metrale(['doctor'], { cwd: dir }).stdout).toMatch(/^ {2}gdn +@metrale\/layer-gdn \(bundled\); also offered by @acme\/gdn-fork \(not used\)$/m);

    const preferred = doctorJson(['--prefer-plugin', '@acme/gdn-fork'], dir);
    expect(preferred.layerTypes.find((p) => p.name === 'gdn')).toEqual({ name: 'gdn', provider: '@acme/gdn-fork', bundled: false, shadowed: ['@metrale/layer-gdn'] });
    expect(preferred.architectures.find((p) => p.name === 'qwen3_next')).toMatchObject({ provider: '@acme/gdn-fork', shadowed: ['@metrale/serve'] });
  });

  it('lists a plugin that throws at import, declares another contract major or registers a model_type twice, with what is wrong', () => {
    const json = doctorJson([], projectWith(BROKEN_PLUGINS));
    const problem = (name: string) => json.plugins.find((p) => p.name === name)?.problem;
    expect(problem('acme-throws')).toMatch(/^plugin acme-throws: failed to import .*index\.js: acme-throws cannot start: missing ACME_LICENSE$/);
    expect(problem('acme-future')).toBe('plugin acme-future: implements layer contract 2.0.0, but @metrale/core implements 1.0.0; install a version of acme-future built for contract 1.x');
    expect(problem('acme-twice')).toBe("plugin acme-twice: registers model_type 'llama' twice; keep one adapter per model_type");
  });

  it('fails on such a plugin given with --plugin, naming the package', () => {
    const dir = projectWith(BROKEN_PLUGINS);
    for (const [name, message] of [
      ['acme-throws', /^error: plugin acme-throws: failed to import .*: acme-throws cannot start: missing ACME_LICENSE$/m],
      ['acme-future', /^error: plugin acme-future: implements layer contract 2\.0\.0, but @metrale\/core implements 1\.0\.0; install a version of acme-future built for contract 1\.x$/m],
      ['acme-twice', /^error: plugin acme-twice: registers model_type 'llama' twice; keep one adapter per model_type$/m],
    ] as const) {
      const r = metrale(['doctor', '--plugin', name], { cwd: dir });
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(message);
    }
  });
});
