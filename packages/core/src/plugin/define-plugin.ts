import semver from 'semver';
import type { TransformerLayer, LayerLimits } from '../contract/layer.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { PluginError, SpecificationVersionError } from '../errors.js';
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
  /** The package version. */
  readonly version: string;
  /** The layer-contract version the plugin implements (semver); its major must equal core's. */
  readonly specificationVersion: string;
  /** The layer types (fixture families) the plugin builds. */
  readonly layerTypes: readonly string[];
  /** Hugging Face `model_type`s whose layers the plugin serves, for discovery and error messages. */
  readonly modelTypes?: readonly string[];
  create(context: CreateLayerContext): TransformerLayer<any>;
}

export interface MetralePlugin extends PluginDefinition {
  readonly __metralePlugin: true;
}

/**
 * Declares a plugin. Checks its fields now, so a malformed plugin fails where it is written, and
 * refuses one built for another major version of the contract.
 */
export function definePlugin(definition: PluginDefinition): MetralePlugin {
  return validatePlugin({ ...definition, __metralePlugin: true });
}

/** Checks a value that claims to be a plugin (from `definePlugin` or loaded from a package). */
export function validatePlugin(value: unknown, source?: string): MetralePlugin {
  const where = source ?? 'definePlugin';
  if (typeof value !== 'object' || value === null) throw new PluginError(where, `expected a plugin object, got ${value === null ? 'null' : typeof value}`);
  const p = value as Partial<PluginDefinition>;
  const name = typeof p.name === 'string' && p.name ? p.name : where;
  if (typeof p.name !== 'string' || !p.name) throw new PluginError(where, `'name' must be a non-empty string (the package name)`);
  if (typeof p.version !== 'string' || !semver.valid(p.version)) throw new PluginError(name, `'version' must be a semver version, got ${JSON.stringify(p.version)}`);
  if (typeof p.specificationVersion !== 'string' || !semver.valid(p.specificationVersion)) {
    throw new PluginError(name, `'specificationVersion' must be a semver version of the layer contract, got ${JSON.stringify(p.specificationVersion)}`);
  }
  if (semver.major(p.specificationVersion) !== semver.major(SPECIFICATION_VERSION)) {
    throw new SpecificationVersionError(name, p.specificationVersion, SPECIFICATION_VERSION);
  }
  if (!Array.isArray(p.layerTypes) || p.layerTypes.length === 0 || !p.layerTypes.every((t) => typeof t === 'string' && t)) {
    throw new PluginError(name, `'layerTypes' must list at least one layer type name`);
  }
  if (p.modelTypes !== undefined && (!Array.isArray(p.modelTypes) || !p.modelTypes.every((t) => typeof t === 'string'))) {
    throw new PluginError(name, `'modelTypes' must be a list of Hugging Face model_type names`);
  }
  if (typeof p.create !== 'function') throw new PluginError(name, `'create' must be a function returning a layer`);
  return Object.freeze({ ...(p as PluginDefinition), __metralePlugin: true as const });
}
