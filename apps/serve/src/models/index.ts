import { architectures, type ArchitectureRegistry } from '@metrale/core';
import { glmMoeDsaAdapter } from './glm-moe-dsa.js';
import { qwen3NextAdapter } from './qwen3-next.js';

/** Every architecture this app ships an adapter for, one file each. */
export const ADAPTERS = [qwen3NextAdapter, glmMoeDsaAdapter] as const;

/** Registers the shipped adapters (idempotent) in `registry` (default: core's process-wide one). */
export function registerModels(registry: ArchitectureRegistry = architectures): ArchitectureRegistry {
  for (const adapter of ADAPTERS) if (!registry.has(adapter.modelType)) registry.register(adapter.modelType, adapter);
  return registry;
}

export { qwen3NextAdapter, qwen3NextLayerTypes, qwen3NextIsMoe } from './qwen3-next.js';
export { glmMoeDsaAdapter, glmMlpLayerTypes, type GlmMlpType } from './glm-moe-dsa.js';
