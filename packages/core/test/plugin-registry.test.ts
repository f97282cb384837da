import { describe, expect, it } from 'vitest';
import {
  definePlugin,
  MemoryWeightSource,
  PluginError,
  PluginRegistry,
  SPECIFICATION_VERSION,
  type CreateLayerContext,
  type GpuBackend,
  type TransformerLayer,
} from '../src/index.js';
import { expectThrow, LIMITS } from './support/driver-rig.js';

const layerStub = (type: string): TransformerLayer =>
  ({ type, inputRowBytes: 4, outputRowBytes: 4, openState: (slot: number) => ({ slot }), closeState() {}, forward() {}, dispose() {} }) as TransformerLayer;

function plugin(name: string, version: string, layerTypes: string[], create: (c: CreateLayerContext) => TransformerLayer = (c) => layerStub(c.layerType)) {
  return definePlugin({ name, version, specificationVersion: SPECIFICATION_VERSION, layerTypes, create });
}

const context = (layerType: string): CreateLayerContext => ({
  gpu: {} as GpuBackend,
  layerType,
  config: { hidden_size: 8 },
  layerIndex: 3,
  weights: new MemoryWeightSource('mem', []),
  limits: LIMITS,
});

describe('PluginRegistry', () => {
  it('registers plugins and finds the one providing each layer type', () => {
    const r = new PluginRegistry();
    const gdn = plugin('@metrale/layer-gdn', '0.1.0', ['gdn', 'gdn-carried']);
    const std = plugin('@metrale/layer-std', '0.2.0', ['mlp', 'attention']);
    r.register(gdn);
    r.register(std);
    expect(r.get('gdn-carried')).toBe(gdn);
    expect(r.get('mlp')).toBe(std);
    expect(r.find('attention')).toBe(std);
    expect(r.find('dsa')).toBeUndefined();
    expect(r.plugins()).toEqual([gdn, std]);
    expect(r.layerTypes()).toEqual(['attention', 'gdn', 'gdn-carried', 'mlp']);
  });

  it('ignores the same plugin twice, refuses another version of it and a second provider of a type', () => {
    const r = new PluginRegistry();
    const v1 = plugin('@metrale/layer-gdn', '0.1.0', ['gdn']);
    r.register(v1);
    r.register(plugin('@metrale/layer-gdn', '0.1.0', ['gdn']));
    expect(r.plugins()).toHaveLength(1);
    const e = expectThrow(() => r.register(plugin('@metrale/layer-gdn', '0.2.0', ['gdn'])), PluginError, /version 0\.2\.0 is registered while version 0\.1\.0 already is/);
    expect(e.plugin).toBe('@metrale/layer-gdn');
    expectThrow(
      () => r.register(plugin('@acme/gdn-fork', '1.0.0', ['linear', 'gdn'])),
      PluginError,
      /plugin @acme\/gdn-fork: layer type 'gdn' is already provided by @metrale\/layer-gdn@0\.1\.0/,
    );
    // The refused plugin left nothing behind, not even its other types.
    expect(r.find('linear')).toBeUndefined();
    expect(r.plugins()).toEqual([v1]);
  });

  it('names a plugin without a known version by its name alone', () => {
    const r = new PluginRegistry();
    r.register(definePlugin({ name: '@acme/unversioned', specificationVersion: SPECIFICATION_VERSION, layerTypes: ['swa'], create: (c) => layerStub(c.layerType) }));
    expectThrow(() => r.register(plugin('@acme/other', '1.0.0', ['swa'])), PluginError, /layer type 'swa' is already provided by @acme\/unversioned$/);
  });

  it('names the loaded types when a layer type has no plugin', () => {
    const r = new PluginRegistry();
    expectThrow(() => r.get('dsa'), PluginError, /no loaded plugin provides layer type 'dsa' \(no plugins are loaded\)/);
    r.register(plugin('@metrale/layer-std', '0.2.0', ['mlp', 'attention']));
    expectThrow(() => r.get('dsa'), PluginError, /layer type 'dsa' \(loaded: attention, mlp\); install the plugin package/);
  });

  it('creates layers through the owning plugin and checks what it returns', () => {
    const r = new PluginRegistry();
    const seen: CreateLayerContext[] = [];
    r.register(plugin('@metrale/layer-std', '0.2.0', ['mlp'], (c) => (seen.push(c), layerStub('mlp'))));
    r.register(plugin('@acme/broken', '1.0.0', ['nothing'], () => ({ type: 'nothing' }) as unknown as TransformerLayer));
    const ctx = context('mlp');
    expect(r.createLayer(ctx).type).toBe('mlp');
    expect(seen).toEqual([ctx]);
    expectThrow(() => r.createLayer(context('nothing')), PluginError, /plugin @acme\/broken: create\('nothing'\) did not return a layer/);
    expectThrow(() => r.createLayer(context('dsa')), PluginError, /no loaded plugin provides layer type 'dsa'/);
  });
});
