import { architectures, type ArchitectureRegistry } from '@metrale/core';
import { gemma3nAdapter, gemma3nTextAdapter } from './gemma3n.js';
import { glmMoeDsaAdapter } from './glm-moe-dsa.js';
import { qwen35Adapter, qwen35TextAdapter } from './qwen3-5.js';
import { qwen35MoeAdapter, qwen35MoeTextAdapter } from './qwen3-5-moe.js';
import { qwen3NextAdapter } from './qwen3-next.js';

/** Every architecture this app ships an adapter for, one file each (a published and a text-only form of one model together). */
export const ADAPTERS = [qwen3NextAdapter, glmMoeDsaAdapter, qwen35Adapter, qwen35TextAdapter, qwen35MoeAdapter, qwen35MoeTextAdapter, gemma3nAdapter, gemma3nTextAdapter] as const;

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
export { gemma3nAdapter, gemma3nTextAdapter } from './gemma3n.js';
export { gemma3nText, kvSourceOf, type Gemma3nText, type Gemma3nLayerType } from './gemma3n-config.js';
export { gemma3nTextWeights, gemma3nUnreadTensor } from './gemma3n-weights.js';
