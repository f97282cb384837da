import { describe, expect, it } from 'vitest';
import {
  definePlugin,
  PluginError,
  SPECIFICATION_VERSION,
  SpecificationVersionError,
  validatePlugin,
  type PluginDefinition,
  type TransformerLayer,
} from '../src/index.js';
import { expectThrow } from './support/driver-rig.js';

const create = (): TransformerLayer => {
  throw new Error('not built in these tests');
};

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
    ['version', { version: undefined }, /'version' must be a semver version, got undefined/],
    ['specificationVersion', { specificationVersion: '1' }, /'specificationVersion' must be a semver version of the layer contract, got "1"/],
    ['layerTypes', { layerTypes: [] }, /'layerTypes' must list at least one layer type name/],
    ['layerTypes', { layerTypes: ['ok', ''] }, /'layerTypes'/],
    ['layerTypes', { layerTypes: 'sliding-window' }, /'layerTypes'/],
    ['modelTypes', { modelTypes: ['mistral', 7] }, /'modelTypes' must be a list of Hugging Face model_type names/],
    ['modelTypes', { modelTypes: 'mistral' }, /'modelTypes'/],
    ['create', { create: 'new Layer()' }, /'create' must be a function returning a layer/],
  ])('names a bad %s', (_field, patch, pattern) => {
    const e = expectThrow(() => definePlugin({ ...good, ...patch } as unknown as PluginDefinition), PluginError, pattern);
    expect(e).not.toBeInstanceOf(SpecificationVersionError);
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
