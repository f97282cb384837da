import { InvalidArgumentError, UnsupportedArchitectureError } from '../errors.js';
import type { ModelAdapter } from './model-adapter.js';

/** The adapters an application has registered, keyed by Hugging Face `model_type`. */
export class ArchitectureRegistry {
  readonly #adapters = new Map<string, ModelAdapter>();

  register(modelType: string, adapter: ModelAdapter): void {
    if (typeof modelType !== 'string' || !modelType) throw new InvalidArgumentError(`registerArchitecture: model_type must be a non-empty string, got ${JSON.stringify(modelType)}`);
    if (typeof adapter?.build !== 'function') throw new InvalidArgumentError(`registerArchitecture(${modelType}): the adapter must have a build(context) method`);
    const existing = this.#adapters.get(modelType);
    if (existing && existing !== adapter) throw new InvalidArgumentError(`registerArchitecture: model_type '${modelType}' is already registered`);
    this.#adapters.set(modelType, adapter);
  }

  has(modelType: string): boolean {
    return this.#adapters.has(modelType);
  }

  modelTypes(): readonly string[] {
    return [...this.#adapters.keys()].sort();
  }

  /** The adapter for a model_type; `UnsupportedArchitectureError` naming the supported ones otherwise. */
  get(modelType: string, where?: string): ModelAdapter {
    const adapter = this.#adapters.get(modelType);
    if (!adapter) throw new UnsupportedArchitectureError(modelType, this.modelTypes(), where);
    return adapter;
  }

  /** The adapter for a config.json (its `model_type`). */
  forConfig(config: Readonly<Record<string, unknown>>, where = 'config.json'): ModelAdapter {
    const modelType = config.model_type;
    if (typeof modelType !== 'string' || !modelType) {
      throw new UnsupportedArchitectureError(String(modelType), this.modelTypes(), `${where} has no model_type`);
    }
    return this.get(modelType, where);
  }
}

/** The process-wide registry `registerArchitecture` fills. */
export const architectures = new ArchitectureRegistry();

/** Registers an adapter in the process-wide registry. */
export function registerArchitecture(modelType: string, adapter: ModelAdapter): void {
  architectures.register(modelType, adapter);
}
