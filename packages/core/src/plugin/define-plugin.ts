import semver from 'semver';
import type { TransformerLayer, LayerLimits } from '../contract/layer.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { PluginError, SpecificationVersionError } from '../errors.js';
import type { ModelAdapter } from '../model/model-adapter.js';
import type { WeightSource } from '../weights/weight-source.js';
import type { Precision } from '../model/precision.js';
import { SPECIFICATION_VERSION } from './specification-version.js';

/** Everything a plugin gets to build one layer. */
export interface CreateLayerContext {
  readonly gpu: GpuBackend;
  /** One of the plugin's `layerTypes`. */
  readonly layerType: string;
  /** The model's Hugging Face config (the text config for multimodal models). */
  readonly config: Readonly<Record<string, unknown>>;
  readonly layerIndex: number;
  /** The layer's tensors, named as in the HF module with the layer's prefix removed. */
  readonly weights: WeightSource;
  readonly limits: LayerLimits;
  /**
   * The data path: the type of the rows the layer reads and writes (`inputRowBytes` follows it)
   * and of its weights, and whether block-FP8 weights stay FP8. Absent: `F32_PRECISION`.
   */
  readonly precision?: Precision;
}

export interface PluginDefinition {
  /** The package name (`@metrale/layer-gdn`). */
  readonly name: string;
  /**
   * The package version. Leave it out: loaders read it from the package's package.json (and
   * refuse a plugin that states another one).
   */
  readonly version?: string;
  /** The layer-contract version the plugin implements (semver); its major must equal core's. */
  readonly specificationVersion: string;
  /** The layer types (layer families) `create` builds. */
  readonly layerTypes?: readonly string[];
  /** Hugging Face `model_type`s whose layers the plugin serves, for discovery and error messages. */
  readonly modelTypes?: readonly string[];
  /** Whole architectures: adapters from a Hugging Face `model_type` to a stack of layers. */
  readonly architectures?: readonly ModelAdapter[];
  /** Builds one layer of one of `layerTypes`; required when the plugin lists any. */
  create?(context: CreateLayerContext): TransformerLayer<any>;
}

/** A checked plugin: every list present (maybe empty), the version the package declares if known. */
export interface MetralePlugin extends Omit<PluginDefinition, 'layerTypes' | 'architectures' | 'create'> {
  readonly __metralePlugin: true;
  readonly layerTypes: readonly string[];
  readonly architectures: readonly ModelAdapter[];
  create(context: CreateLayerContext): TransformerLayer<any>;
}

/** Where a checked plugin came from, when a loader knows. */
export interface PluginOrigin {
  /** The `version` of the package's package.json: the plugin's version. */
  readonly packageVersion?: string;
}

/**
 * Declares a plugin. Checks its fields now, so a malformed plugin fails where it is written, and
 * refuses one built for another major version of the contract.
 */
export function definePlugin(definition: PluginDefinition): MetralePlugin {
  return validatePlugin({ ...definition, __metralePlugin: true });
}

/** Checks a value that claims to be a plugin (from `definePlugin` or loaded from a package). */
export function validatePlugin(value: unknown, source?: string, origin: PluginOrigin = {}): MetralePlugin {
  const where = source ?? 'definePlugin';
  if (typeof value !== 'object' || value === null) throw new PluginError(where, `expected a plugin object, got ${value === null ? 'null' : typeof value}`);
  const p = value as Partial<PluginDefinition>;
  if (typeof p.name !== 'string' || !p.name) throw new PluginError(where, `'name' must be a non-empty string (the package name)`);
  const name = p.name;
  const version = checkVersion(name, p.version, origin.packageVersion);
  if (typeof p.specificationVersion !== 'string' || !semver.valid(p.specificationVersion)) {
    throw new PluginError(name, `'specificationVersion' must be a semver version of the layer contract, got ${JSON.stringify(p.specificationVersion)}`);
  }
  if (semver.major(p.specificationVersion) !== semver.major(SPECIFICATION_VERSION)) {
    throw new SpecificationVersionError(name, p.specificationVersion, SPECIFICATION_VERSION);
  }
  const layerTypes = checkLayerTypes(name, p.layerTypes);
  const architectures = checkArchitectures(name, p.architectures);
  if (layerTypes.length === 0 && architectures.length === 0) {
    throw new PluginError(name, `'layerTypes' must list at least one layer type name, or 'architectures' at least one architecture`);
  }
  if (p.modelTypes !== undefined && (!Array.isArray(p.modelTypes) || !p.modelTypes.every((t) => typeof t === 'string'))) {
    throw new PluginError(name, `'modelTypes' must be a list of Hugging Face model_type names`);
  }
  if (p.create !== undefined && typeof p.create !== 'function') throw new PluginError(name, `'create' must be a function returning a layer`);
  if (layerTypes.length > 0 && typeof p.create !== 'function') throw new PluginError(name, `'create' must be a function returning a layer (the plugin lists layer types)`);
  const create = p.create ?? (() => {
    throw new PluginError(name, `has no layer types, only architectures (${architectures.map((a) => a.modelType).join(', ')})`);
  });
  const { version: _stated, ...rest } = p as PluginDefinition;
  return Object.freeze({ ...rest, ...(version !== undefined ? { version } : {}), layerTypes, architectures, create, __metralePlugin: true as const });
}

/** The package.json's version wins; a definition that states another one is out of date. */
function checkVersion(name: string, stated: unknown, packageVersion: string | undefined): string | undefined {
  if (stated !== undefined && (typeof stated !== 'string' || !semver.valid(stated))) {
    throw new PluginError(name, `'version' must be a semver version, got ${JSON.stringify(stated)}; or leave it out: the package.json's is read`);
  }
  if (stated !== undefined && packageVersion !== undefined && stated !== packageVersion) {
    throw new PluginError(name, `'version' is ${stated} but its package.json says ${packageVersion}; leave 'version' out of definePlugin (the package.json's is read)`);
  }
  return packageVersion ?? stated;
}

function checkLayerTypes(name: string, value: unknown): readonly string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || !value.every((t) => typeof t === 'string' && t)) throw new PluginError(name, `'layerTypes' must be a list of layer type names`);
  const twice = value.find((t, i) => value.indexOf(t) !== i);
  if (twice !== undefined) throw new PluginError(name, `'layerTypes' lists '${twice}' twice`);
  return Object.freeze([...value]);
}

function checkArchitectures(name: string, value: unknown): readonly ModelAdapter[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new PluginError(name, `'architectures' must be a list of model adapters ({ modelType, build })`);
  const seen = new Set<string>();
  value.forEach((a: Partial<ModelAdapter> | null, i) => {
    if (typeof a !== 'object' || a === null || typeof a.modelType !== 'string' || !a.modelType) {
      throw new PluginError(name, `'architectures[${i}]' must be a model adapter with a 'modelType' (the Hugging Face model_type it builds)`);
    }
    if (typeof a.build !== 'function') throw new PluginError(name, `architecture '${a.modelType}' must have a build(context) function returning the model's layer stack`);
    if (seen.has(a.modelType)) throw new PluginError(name, `registers model_type '${a.modelType}' twice; keep one adapter per model_type`);
    seen.add(a.modelType);
  });
  return Object.freeze([...(value as ModelAdapter[])]);
}

/** `name@version`, or the name alone when the version is not known. */
export function pluginLabel(plugin: Pick<MetralePlugin, 'name' | 'version'>): string {
  return plugin.version === undefined ? plugin.name : `${plugin.name}@${plugin.version}`;
}
