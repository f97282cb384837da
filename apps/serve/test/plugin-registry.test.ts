import { PluginError, SPECIFICATION_VERSION, definePlugin, type MetralePlugin, type ModelAdapter, type TransformerLayer } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { UsageError } from '../src/errors/cli-errors.js';
import { ADAPTERS } from '../src/models/index.js';
import { BUNDLED_ADAPTERS_PROVIDER, buildRegistry, type ServingRegistry } from '../src/plugins/build-registry.js';
import type { DiscoveredPlugin, PluginSource } from '../src/plugins/discover-plugins.js';

const adapter = (modelType: string): ModelAdapter => ({ modelType, build: () => { throw new Error('not built in these tests'); } });
const layer = (type: string): TransformerLayer =>
  ({ type, inputRowBytes: 4, outputRowBytes: 4, openState: (slot: number) => ({ slot }), closeState() {}, forward() {}, dispose() {} }) as TransformerLayer;

function found(name: string, offers: { layerTypes?: string[]; architectures?: string[] }, source: PluginSource = 'node_modules', bundled = false): DiscoveredPlugin {
  const plugin = definePlugin({
    name, specificationVersion: SPECIFICATION_VERSION, ...(offers.layerTypes ? { layerTypes: offers.layerTypes, create: (c) => layer(`${name}:${c.layerType}`) } : {}),
    architectures: (offers.architectures ?? []).map(adapter),
  });
  return { id: name, source, bundled, location: `/nm/${name}`, plugin };
}

const gdn = found('@metrale/layer-gdn', { layerTypes: ['gdn'] }, 'node_modules', true);
const std = found('@metrale/layer-std', { layerTypes: ['mlp', 'attention'] }, 'first-party', true);

const provider = (r: ServingRegistry, kind: 'layerTypes' | 'modelTypes', name: string) => r[kind].find((p) => p.name === name);

describe('the serving registry: the shipped adapters and the plugins, with precedence', () => {
  it("serves the shipped adapters and a plugin's own architectures and layer types", () => {
    const r = buildRegistry([gdn, std, found('acme-swa', { layerTypes: ['swa'], architectures: ['mistral_swa'] })], { adapters: ADAPTERS });
    expect(r.architectures.modelTypes()).toEqual(['gemma3n', 'gemma3n_text', 'glm_moe_dsa', 'mistral_swa', 'qwen3_5', 'qwen3_5_moe', 'qwen3_5_moe_text', 'qwen3_5_text', 'qwen3_next']);
    expect(provider(r, 'modelTypes', 'qwen3_next')).toEqual({ name: 'qwen3_next', provider: BUNDLED_ADAPTERS_PROVIDER, bundled: true, shadowed: [] });
    expect(provider(r, 'modelTypes', 'mistral_swa')).toEqual({ name: 'mistral_swa', provider: 'acme-swa', bundled: false, shadowed: [] });
    expect(r.layers.get('swa').name).toBe('acme-swa');
    expect(r.layers.get('gdn').name).toBe('@metrale/layer-gdn');
    expect(r.warnings).toEqual([]);
  });

  it('keeps a bundled layer type or architecture unless the third-party one is preferred', () => {
    const fork = found('@acme/gdn-fork', { layerTypes: ['gdn', 'gdn2'], architectures: ['qwen3_next', 'qwen3_next_fork'] });
    const kept = buildRegistry([gdn, std, fork], { adapters: ADAPTERS });
    expect(kept.layers.get('gdn').name).toBe('@metrale/layer-gdn');
    // The fork's other offers are used: only what clashes stays with the bundled one.
    expect(kept.layers.get('gdn2').name).toBe('@acme/gdn-fork');
    expect(kept.architectures.get('qwen3_next')).toBe(ADAPTERS[0]);
    expect(kept.architectures.get('qwen3_next_fork').modelType).toBe('qwen3_next_fork');
    expect(provider(kept, 'layerTypes', 'gdn')).toMatchObject({ provider: '@metrale/layer-gdn', shadowed: ['@acme/gdn-fork'] });
    expect(kept.warnings).toEqual([
      { plugin: '@acme/gdn-fork', message: "its layer type 'gdn' is not used: @metrale/layer-gdn serves it (--prefer-plugin @acme/gdn-fork uses @acme/gdn-fork's)" },
      { plugin: '@acme/gdn-fork', message: "its model_type 'qwen3_next' is not used: @metrale/serve serves it (--prefer-plugin @acme/gdn-fork uses @acme/gdn-fork's)" },
    ]);

    const preferred = buildRegistry([gdn, std, fork], { adapters: ADAPTERS, prefer: ['@acme/gdn-fork'] });
    expect(preferred.layers.get('gdn').name).toBe('@acme/gdn-fork');
    expect(preferred.architectures.get('qwen3_next')).toBe(fork.plugin!.architectures[0]);
    expect(provider(preferred, 'modelTypes', 'qwen3_next')).toEqual({ name: 'qwen3_next', provider: '@acme/gdn-fork', bundled: false, shadowed: [BUNDLED_ADAPTERS_PROVIDER] });
    expect(preferred.warnings).toEqual([]);
    // The bundled plugin still serves what only it offers, through a registry entry of its own.
    expect(preferred.layers.plugins().map((p) => [p.name, p.layerTypes])).toEqual([
      ['@metrale/layer-std', ['attention', 'mlp']], ['@acme/gdn-fork', ['gdn', 'gdn2']],
    ]);
  });

  it('leaves out, with a warning naming both packages, a discovered plugin that offers what another third-party plugin does', () => {
    const first = found('acme-llama', { architectures: ['llama'] });
    const second = found('other-llama', { layerTypes: ['rope'], architectures: ['llama'] });
    const r = buildRegistry([first, second], { adapters: ADAPTERS });
    expect(r.architectures.get('llama')).toBe(first.plugin!.architectures[0]);
    expect(r.layers.find('rope')).toBeUndefined();
    const skipped = r.plugins.find((p) => p.id === 'other-llama')!;
    expect(skipped.plugin).toBeUndefined();
    expect(skipped.problem).toBe("plugin other-llama: model_type 'llama' is also provided by acme-llama; uninstall one, or choose one with --prefer-plugin other-llama");
    expect(r.warnings).toEqual([{ plugin: 'other-llama', message: `skipped: ${skipped.problem}` }]);
    // Preferring one of them settles it: both load, the preferred one serves llama.
    const settled = buildRegistry([first, second], { adapters: ADAPTERS, prefer: ['other-llama'] });
    expect(settled.architectures.get('llama')).toBe(second.plugin!.architectures[0]);
    expect(settled.layers.get('rope').name).toBe('other-llama');
  });

  it('wins a clash for a --plugin one over a discovered one, and stops on a clash between two --plugin ones', () => {
    const discovered = found('acme-llama', { architectures: ['llama'] });
    const named = found('./my-llama', { architectures: ['llama'] }, '--plugin');
    const r = buildRegistry([discovered, named], { adapters: ADAPTERS });
    expect(provider(r, 'modelTypes', 'llama')!.provider).toBe('./my-llama');
    expect(r.plugins.find((p) => p.id === 'acme-llama')!.problem).toMatch(/also provided by \.\/my-llama/);

    const also = found('./their-llama', { architectures: ['llama'] }, '--plugin');
    const e = (() => { try { buildRegistry([named, also]); } catch (error) { return error; } })();
    expect(e).toBeInstanceOf(PluginError);
    expect((e as PluginError).message).toBe("plugin ./their-llama: model_type 'llama' is also provided by ./my-llama; uninstall one, or choose one with --prefer-plugin ./their-llama");
  });

  it('refuses a --prefer-plugin that names no loaded plugin, or one that failed to load', () => {
    expect(() => buildRegistry([gdn], { prefer: ['@acme/nothing'] })).toThrow(UsageError);
    expect(() => buildRegistry([gdn], { prefer: ['@acme/nothing'] })).toThrow(/--prefer-plugin @acme\/nothing: no plugin of that name is loaded \(loaded: @metrale\/layer-gdn\)/);
    const broken: DiscoveredPlugin = { id: 'acme-broken', source: 'node_modules', bundled: false, location: '/nm/acme-broken', problem: 'plugin acme-broken: failed to import' };
    expect(() => buildRegistry([gdn, broken], { prefer: ['acme-broken'] })).toThrow(/plugin acme-broken: is preferred \(--prefer-plugin\) but did not load: plugin acme-broken: failed to import/);
  });

  it('builds layers through the winner only', () => {
    const fork = found('@acme/gdn-fork', { layerTypes: ['gdn'] });
    const r = buildRegistry([gdn, fork], { prefer: ['@acme/gdn-fork'] });
    const made = r.layers.createLayer({ layerType: 'gdn' } as Parameters<MetralePlugin['create']>[0]);
    expect(made.type).toBe('@acme/gdn-fork:gdn');
  });
});
