import type { LayerLimits } from '../contract/layer.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { ModelFitError } from '../errors.js';
import type { ShardRule } from '../parallel/sharded-weights.js';
import type { PluginRegistry } from '../plugin/registry.js';
import { architectures, type ArchitectureRegistry } from './architecture-registry.js';
import { Checkpoint } from './checkpoint.js';
import { checkFp8Tensors, gib, weightBytes, type WeightBytes } from './checkpoint-precision.js';
import type { ModelAdapter, ModelStack } from './model-adapter.js';
import { F32_PRECISION, describePrecision, type Precision } from './precision.js';

export interface LoadModelOptions {
  readonly gpu: GpuBackend;
  readonly limits: LayerLimits;
  /** The data path (default: F32_PRECISION, the reference). */
  readonly precision?: Precision;
  /** Where adapters are looked up (default: the process-wide `registerArchitecture` registry). */
  readonly architectures?: ArchitectureRegistry;
  readonly plugins?: PluginRegistry;
}

export interface LoadedModel {
  readonly checkpoint: Checkpoint;
  readonly adapter: ModelAdapter;
  readonly stack: ModelStack;
  readonly precision: Precision;
  /** The weights' device bytes, estimated from the headers before the upload. */
  readonly weightBytes: WeightBytes;
}

/** A tensor-parallel group the weights are split over: its size and which tensors split (the lm head always does). */
export interface FitParallel {
  readonly size: number;
  /** The adapter's `shardRule` (default: nothing but the lm head splits). */
  readonly rule?: ShardRule;
}

/**
 * Refuses, from the headers alone, a checkpoint whose FP8 tensors are malformed or whose weights
 * cannot fit the device in `precision` (each device's share of them under tensor parallelism);
 * returns the bytes one device takes. `unread` (the adapter's `unreadTensors`) names tensors no
 * layer reads: they take no device memory.
 */
export function checkModelFits(checkpoint: Checkpoint, gpu: GpuBackend, precision: Precision, parallel?: FitParallel, unread?: (name: string) => boolean): WeightBytes {
  checkFp8Tensors(checkpoint.weights);
  const size = parallel?.size ?? 1;
  const rule = parallel?.rule ?? (() => undefined);
  const split = (name: string): boolean => name === 'lm_head.weight' || rule(name) !== undefined;
  const share = (name: string): number => (size > 1 && (split(name) || (name.endsWith('_scale_inv') && split(name.slice(0, -'_scale_inv'.length)))) ? 1 / size : 1);
  const bytes = weightBytes(checkpoint.weights, precision, unread, share);
  const device = gpu.device.totalMemory;
  if (bytes.total > device) {
    throw new ModelFitError(
      `${checkpoint.dir}: its weights take ${gib(bytes.total)} on ${size > 1 ? `each of ${size} devices` : 'the device'} in ${describePrecision(precision)} ` +
        `(${gib(bytes.float)} float${bytes.fp8 ? ` + ${gib(bytes.fp8)} FP8` : ''}), more than ${gpu.device.name}'s ${gib(device)}; ` +
        `use a lower precision (--dtype bf16, or the FP8 release of the model) or a device with more memory`,
      bytes.total,
      device,
    );
  }
  return bytes;
}

/**
 * Opens a checkpoint directory, finds the adapter for its `model_type` (an unsupported one is an
 * \`UnsupportedArchitectureError\` naming the supported ones, before any tensor is read), checks
 * that its weights fit the device, and builds the layer stack. Tensors are read one at a time as
 * layers upload them.
 */
export function loadModel(dirOrCheckpoint: string | Checkpoint, options: LoadModelOptions): LoadedModel {
  const checkpoint = typeof dirOrCheckpoint === 'string' ? Checkpoint.open(dirOrCheckpoint) : dirOrCheckpoint;
  const precision = options.precision ?? F32_PRECISION;
  try {
    const adapter = (options.architectures ?? architectures).forConfig(checkpoint.config, `${checkpoint.dir}/config.json`);
    const bytes = checkModelFits(checkpoint, options.gpu, precision, undefined, adapter.unreadTensors?.(checkpoint.config));
    const stack = adapter.build({
      gpu: options.gpu,
      config: checkpoint.config,
      weights: checkpoint.weights,
      limits: options.limits,
      precision,
      ...(options.plugins ? { plugins: options.plugins } : {}),
    });
    return { checkpoint, adapter, stack, precision, weightBytes: bytes };
  } finally {
    // Every tensor has been uploaded; reads after this reopen the shard.
    checkpoint.close();
  }
}
