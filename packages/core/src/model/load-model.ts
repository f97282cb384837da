import type { LayerLimits } from '../contract/layer.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import type { PluginRegistry } from '../plugin/registry.js';
import { architectures, type ArchitectureRegistry } from './architecture-registry.js';
import { Checkpoint } from './checkpoint.js';
import type { ModelAdapter, ModelStack } from './model-adapter.js';

export interface LoadModelOptions {
  readonly gpu: GpuBackend;
  readonly limits: LayerLimits;
  /** Where adapters are looked up (default: the process-wide `registerArchitecture` registry). */
  readonly architectures?: ArchitectureRegistry;
  readonly plugins?: PluginRegistry;
}

export interface LoadedModel {
  readonly checkpoint: Checkpoint;
  readonly adapter: ModelAdapter;
  readonly stack: ModelStack;
}

/**
 * Opens a checkpoint directory, finds the adapter for its `model_type` (an unsupported one is an
 * `UnsupportedArchitectureError` naming the supported ones, before any tensor is read) and builds
 * the layer stack. Tensors are read one at a time as layers upload them.
 */
export function loadModel(dirOrCheckpoint: string | Checkpoint, options: LoadModelOptions): LoadedModel {
  const checkpoint = typeof dirOrCheckpoint === 'string' ? Checkpoint.open(dirOrCheckpoint) : dirOrCheckpoint;
  try {
    const adapter = (options.architectures ?? architectures).forConfig(checkpoint.config, `${checkpoint.dir}/config.json`);
    const stack = adapter.build({
      gpu: options.gpu,
      config: checkpoint.config,
      weights: checkpoint.weights,
      limits: options.limits,
      ...(options.plugins ? { plugins: options.plugins } : {}),
    });
    return { checkpoint, adapter, stack };
  } finally {
    // Every tensor has been uploaded; reads after this reopen the shard.
    checkpoint.close();
  }
}
