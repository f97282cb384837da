import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { AFFINE_PLUGIN, metrale } from './support/run-cli.js';

interface DoctorJson {
  backends: { name: string; available: boolean; reason: string; devices: { name: string }[] }[];
  plugins: { name: string; source: string; version?: string; specificationVersion?: string; layerTypes?: string[]; problem?: string }[];
  core: { version: string; specificationVersion: string };
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

/** A project directory whose node_modules holds plugin packages of its own. */
function projectWithPackages(): string {
  const dir = mkdtempSync(join(tmpdir(), 'metrale-doctor-'));
  projects.push(dir);
  const pkg = (name: string, manifest: Record<string, unknown>, source: string) => {
    const at = join(dir, 'node_modules', name);
    mkdirSync(at, { recursive: true });
    writeFileSync(join(at, 'package.json'), JSON.stringify({ name, version: '2.3.4', type: 'module', exports: './index.js', ...manifest }));
    writeFileSync(join(at, 'index.js'), source);
  };
  // A plugin needs no import of its own: a plain object with the plugin fields validates.
  pkg('@acme/layer-rwkv', { metrale: { plugin: true } }, [
    "export default { name: '@acme/layer-rwkv', version: '2.3.4', specificationVersion: '1.2.0',",
    "  layerTypes: ['rwkv7'], modelTypes: ['rwkv7'], create() { throw new Error('not in this test'); } };",
  ].join('\n'));
  pkg('acme-skeleton', { metrale: { plugin: true } }, 'export {};\n');
  pkg('not-a-plugin', {}, 'export default 42;\n');
  return dir;
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
    expect(byName['acme-skeleton']).toMatchObject({ source: 'node_modules', problem: 'no plugin exported' });
    expect(byName['not-a-plugin']).toBeUndefined();
    // Plugins installed beside the CLI are found too, from any working directory.
    expect(byName['@metrale/layer-example']).toBeDefined();

    const text = metrale(['doctor'], { cwd: projectWithPackages() }).stdout;
    expect(text).toMatch(/@acme\/layer-rwkv 2\.3\.4 +contract 1\.2\.0, layer types: rwkv7, model types: rwkv7 +\[node_modules\]/);
    expect(text).toMatch(/acme-skeleton 2\.3\.4 +no plugin exported +\[node_modules\]/);
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
    expect(r.stderr).toMatch(/^error: --plugin \.\/no\/such-plugin\.mjs: no such file \(.*no\/such-plugin\.mjs\)$/m);
  });
});
