// The programmatic API of @metrale/serve: the CLI's pieces, for embedding and tests. The
// executable is dist/cli.js (`metrale`).

export type { CliContext } from './cli-context.js';
export { createProgram, runCli } from './program.js';
export type { BackendChoice, BackendName, BackendReport } from './backends/select-backend.js';
export { BACKEND_CHOICES, probeBackend, probeBackends, selectBackend } from './backends/select-backend.js';
export type { DiscoverOptions, DiscoveredPlugin, PluginSource } from './plugins/discover-plugins.js';
export { discoverPlugins, FIRST_PARTY_PLUGINS } from './plugins/discover-plugins.js';
export type { PluginWarning, Provision, RegistryOptions, ServingRegistry } from './plugins/build-registry.js';
export { buildRegistry, BUNDLED_ADAPTERS_PROVIDER } from './plugins/build-registry.js';
export type { RegistrySetup } from './plugins/load-registry.js';
export { loadRegistry } from './plugins/load-registry.js';
export { BackendUnavailableError, UsageError } from './errors/cli-errors.js';
export { EXIT_FAILURE, EXIT_USAGE, reportError } from './errors/report-error.js';
export {
  registerModels, ADAPTERS, qwen3NextAdapter, qwen3NextLayerTypes, qwen3NextIsMoe, glmMoeDsaAdapter, glmMlpLayerTypes,
  qwen35Adapter, qwen35TextAdapter, qwen35MoeAdapter, qwen35MoeTextAdapter, textConfigOf,
} from './models/index.js';
export { TextCodec } from './generate/text-codec.js';
export { generateLimits } from './generate/generate-limits.js';
export { PrefillLastRowsHead } from './engine/prefill-head.js';
export type { Engine, EngineSetup } from './engine/build-engine.js';
export { kvMemory, servedModelLen, servingLimits, startEngine } from './engine/build-engine.js';
export type { PlannedTensor, Qwen3NextShape } from './embedded/qwen3-next-tensor-plan.js';
export { qwen3NextTensorPlan } from './embedded/qwen3-next-tensor-plan.js';
export { EMBEDDED_MODEL_NAME, ensureEmbeddedModel } from './embedded/embedded-model.js';
