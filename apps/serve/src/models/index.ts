import { architectures, type ArchitectureRegistry } from '@metrale/core';
import { glmMoeDsaAdapter } from './glm-moe-dsa.js';
import { qwen35Adapter, qwen35TextAdapter } from './qwen3-5.js';
import { qwen35MoeAdapter, qwen35MoeTextAdapter } from './qwen3-5-moe.js';
import { qwen3NextAdapter } from './qwen3-next.js';

/** Every architecture this app ships an adapter for, one file each (a published and a text-only form of one model together). */
export const ADAPTERS = [qwen3NextAdapter, glmMoeDsaAdapter, qwen35Adapter, qwen35TextAdapter, qwen35MoeAdapter, qwen35MoeTextAdapter] as const;

/** Registers the shipped adapters (idempotent) in `registry` (default: core's process-wide one). */
export function registerModels(registry: ArchitectureRegistry = architectures): ArchitectureRegistry {
  for (const adapter of ADAPTERS) if (!registry.has(adapter.modelType)) registry.register(adapter.modelType, adapter);
  return registry;
}

export { qwen3NextAdapter, qwen3NextLayerTypes, qwen3NextIsMoe } from './qwen3-next.js';
export { glmMoeDsaAdapter, glmMlpLayerTypes, type GlmMlpType } from './glm-moe-dsa.js';
export { qwen35Adapter, qwen35TextAdapter } from './qwen3-5.js';
export { qwen35MoeAdapter, qwen35MoeTextAdapter } from './qwen3-5-moe.js';
export { qwen35TextConfig, qwen35LayerTypes, type Qwen35Family, type Qwen35LayerType } from './qwen3-5-config.js';
export { qwen35TextWeights, qwen35UnreadTensor } from './qwen3-5-weights.js';
export { textConfigOf, textOnlyNotice, isMultimodalConfig } from './text-config.js';
