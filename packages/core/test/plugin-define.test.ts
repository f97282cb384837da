import { describe, expect, it } from 'vitest';
import {
  definePlugin,
  PluginError,
  pluginLabel,
  SPECIFICATION_VERSION,
  SpecificationVersionError,
  validatePlugin,
  type CreateLayerContext,
  type ModelAdapter,
  type PluginDefinition,
  type TransformerLayer,
} from '../src/index.js';
import { expectThrow } from './support/driver-rig.js';

const create = (): TransformerLayer => {
  throw new Error('not built in these tests');
};

const adapter = (modelType: string): ModelAdapter => ({ modelType, build: () => { throw new Error('not built in these tests'); } });

const good: PluginDefinition = {
  name: '@acme/layer-swa',
  version: '1.2.3',
  specificationVersion: SPECIFICATION_VERSION,
  layerTypes: ['sliding-window'],
  modelTypes: ['mistral'],
  create,
};

describe('definePlugin', () => {
  it('returns a frozen, branded copy of a valid definition', () => {
    const plugin = definePlugin(good);
    expect(plugin).toMatchObject({ name: '@acme/layer-swa', version: '1.2.3', layerTypes: ['sliding-window'], __metralePlugin: true });
    expect(plugin.create).toBe(create);
    expect(Object.isFrozen(plugin)).toBe(true);
    expect(plugin).not.toBe(good);
    // Any minor or patch of the same contract major is accepted; modelTypes is optional.
    const { modelTypes: _omit, ...noModelTypes } = good;
    expect(definePlugin({ ...noModelTypes, specificationVersion: `${SPECIFICATION_VERSION.split('.')[0]}.9.4` }).name).toBe('@acme/layer-swa');
  });

  it.each([
    ['name', { name: '' }, /plugin definePlugin: 'name' must be a non-empty string/],
    ['name', { name: 42 }, /'name' must be a non-empty string/],
    ['version', { version: 'one' }, /plugin @acme\/layer-swa: 'version' must be a semver version, got "one"/],
    ['specificationVersion', { specificationVersion: '1' }, /'specificationVersion' must be a semver version of the layer contract, got "1"/],
    ['layerTypes', { layerTypes: [] }, /'layerTypes' must list at least one layer type name, or 'architectures' at least one architecture/],
    ['layerTypes', { layerTypes: undefined }, /'layerTypes' must list at least one layer type name/],
    ['layerTypes', { layerTypes: ['ok', ''] }, /'layerTypes'/],
    ['layerTypes', { layerTypes: 'sliding-window' }, /'layerTypes'/],
    ['layerTypes', { layerTypes: ['swa', 'swa'] }, /plugin @acme\/layer-swa: 'layerTypes' lists 'swa' twice/],
    ['modelTypes', { modelTypes: ['mistral', 7] }, /'modelTypes' must be a list of Hugging Face model_type names/],
    ['modelTypes', { modelTypes: 'mistral' }, /'modelTypes'/],
    ['create', { create: 'new Layer()' }, /'create' must be a function returning a layer/],
    ['create', { create: undefined }, /'create' must be a function returning a layer \(the plugin lists layer types\)/],
    ['architectures', { architectures: adapter('mistral') }, /'architectures' must be a list of model adapters/],
    ['architectures', { architectures: [{ build: () => undefined }] }, /'architectures\[0\]' must be a model adapter with a 'modelType'/],
    ['architectures', { architectures: [{ modelType: 'mistral' }] }, /architecture 'mistral' must have a build\(context\) function/],
    ['architectures', { architectures: [adapter('mistral'), adapter('mistral')] }, /plugin @acme\/layer-swa: registers model_type 'mistral' twice; keep one adapter per model_type/],
  ])('names a bad %s', (_field, patch, pattern) => {
    const e = expectThrow(() => definePlugin({ ...good, ...patch } as unknown as PluginDefinition), PluginError, pattern);
    expect(e).not.toBeInstanceOf(SpecificationVersionError);
  });

  it('takes architectures, with or without layer types; a plugin without layer types has no layer to create', () => {
    const withBoth = definePlugin({ ...good, architectures: [adapter('mistral_swa')] });
    expect(withBoth.architectures.map((a) => a.modelType)).toEqual(['mistral_swa']);
    expect(definePlugin(good).architectures).toEqual([]);
    const { layerTypes: _l, create: _c, ...bare } = good;
    const only = definePlugin({ ...bare, architectures: [adapter('mistral_swa'), adapter('mistral_swa_moe')] });
    expect(only.layerTypes).toEqual([]);
    expectThrow(() => only.create({} as CreateLayerContext), PluginError, /plugin @acme\/layer-swa: has no layer types, only architectures \(mistral_swa, mistral_swa_moe\)/);
  });

  it('needs no version: loaders take the package.json one and refuse a definition that states another', () => {
    const { version: _v, ...unversioned } = good;
    expect(definePlugin(unversioned).version).toBeUndefined();
    expect(validatePlugin(unversioned, 'pkg', { packageVersion: '3.1.4' }).version).toBe('3.1.4');
    expect(validatePlugin(good, 'pkg', { packageVersion: '1.2.3' }).version).toBe('1.2.3');
    expectThrow(
      () => validatePlugin(good, 'pkg', { packageVersion: '1.3.0' }),
      PluginError,
      /plugin @acme\/layer-swa: 'version' is 1\.2\.3 but its package\.json says 1\.3\.0; leave 'version' out of definePlugin/,
    );
    expect(pluginLabel(definePlugin(good))).toBe('@acme/layer-swa@1.2.3');
    expect(pluginLabel(definePlugin(unversioned))).toBe('@acme/layer-swa');
  });

  it('refuses a plugin for another contract major, naming both versions', () => {
    const e = expectThrow(() => definePlugin({ ...good, specificationVersion: '2.0.0' }), SpecificationVersionError);
    expect(e).toBeInstanceOf(PluginError);
    expect(e.pluginVersion).toBe('2.0.0');
    expect(e.coreVersion).toBe(SPECIFICATION_VERSION);
    expect(e.plugin).toBe('@acme/layer-swa');
    expect(e.message).toContain('2.0.0');
    expect(e.message).toContain(SPECIFICATION_VERSION);
    expect(e.message).toMatch(/install a version of @acme\/layer-swa built for contract 1\.x/);
    expectThrow(() => definePlugin({ ...good, specificationVersion: '0.9.0' }), SpecificationVersionError, /0\.9\.0/);
  });
});

describe('validatePlugin', () => {
  it('names the source of a value that is not a plugin', () => {
    expectThrow(() => validatePlugin(null, 'pkg-a'), PluginError, /plugin pkg-a: expected a plugin object, got null/);
    expectThrow(() => validatePlugin(42, 'pkg-b'), PluginError, /plugin pkg-b: expected a plugin object, got number/);
    expectThrow(() => validatePlugin({ ...good, name: '' }, 'pkg-c'), PluginError, /plugin pkg-c: 'name'/);
    const e = expectThrow(() => validatePlugin(undefined), PluginError, /got undefined/);
    expect(e.plugin).toBe('definePlugin');
  });

  it('accepts a plain object (a package need not call definePlugin) and brands it', () => {
    const plugin = validatePlugin({ ...good }, 'pkg');
    expect(plugin.__metralePlugin).toBe(true);
    expect(Object.isFrozen(plugin)).toBe(true);
  });
});
