import type { LayerLimits } from '../contract/layer.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { DeviceError, ModelFitError } from '../errors.js';
import type { ShardRule } from '../parallel/sharded-weights.js';
import type { PluginRegistry } from '../plugin/registry.js';
import { architectures, type ArchitectureRegistry } from './architecture-registry.js';
import { Checkpoint } from './checkpoint.js';
import { checkFp8Tensors, gib, weightBytes, type WeightBytes } from './checkpoint-precision.js';
import type { ModelAdapter, ModelBuildContext, ModelStack } from './model-adapter.js';
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
 * cannot fit the device in `precision` (each device's share of them under tensor parallelism):
 * more than its memory, or than what is free of it where the backend says (`memoryInfo`: another
 * process may hold some). Returns the bytes one device takes. `unread` (the adapter's
 * `unreadTensors`) names tensors no layer reads: they take no device memory.
 */
export function checkModelFits(checkpoint: Checkpoint, gpu: GpuBackend, precision: Precision, parallel?: FitParallel, unread?: (name: string) => boolean): WeightBytes {
  checkFp8Tensors(checkpoint.weights);
  const size = parallel?.size ?? 1;
  const rule = parallel?.rule ?? (() => undefined);
  const split = (name: string): boolean => name === 'lm_head.weight' || rule(name) !== undefined;
  const share = (name: string): number => (size > 1 && (split(name) || (name.endsWith('_scale_inv') && split(name.slice(0, -'_scale_inv'.length)))) ? 1 / size : 1);
  const bytes = weightBytes(checkpoint.weights, precision, unread, share);
  const device = gpu.device.totalMemory;
  const free = Math.min(device, gpu.memoryInfo?.().free ?? device);
  if (bytes.total > free) {
    const room = free < device ? `the ${gib(free)} free of ${gpu.device.name}'s ${gib(device)}` : `${gpu.device.name}'s ${gib(device)}`;
    throw new ModelFitError(
      `${checkpoint.dir}: its weights take ${gib(bytes.total)} on ${size > 1 ? `each of ${size} devices` : 'the device'} in ${describePrecision(precision)} ` +
        `(${gib(bytes.float)} float${bytes.fp8 ? ` + ${gib(bytes.fp8)} FP8` : ''}), more than ${room}; ` +
        `use a lower precision (--dtype bf16, or the FP8 release of the model) or a device with more memory`,
      bytes.total,
      free,
    );
  }
  return bytes;
}

/**
 * `adapter.build(context)`, where the device running out of memory during the build (the weights
 * fit, but not with what the layers keep beside them for `context.limits`: recurrent state, caches,
 * scratch) is a ModelFitError that says so and what to lower, in place of the driver's
 * out-of-memory error (its cause). The adapter has freed what it made before the failure.
 * `source`: the checkpoint's directory and, where known, the bytes its weights take on the device.
 */
export function buildModelStack(adapter: ModelAdapter, context: ModelBuildContext, source: { readonly dir: string; readonly weightBytes?: WeightBytes }): ModelStack {
  const { gpu, limits } = context;
  const free = gpu.memoryInfo?.().free;
  try {
    return adapter.build(context);
  } catch (error) {
    if (!(error instanceof DeviceError) || error.code !== 'CUDA_ERROR_OUT_OF_MEMORY') throw error;
    const weights = source.weightBytes ? `its weights take ${gib(source.weightBytes.total)}${context.parallel ? ' on each device' : ''}, and ` : '';
    const had = free === undefined ? `${gib(gpu.device.totalMemory)}` : `${gib(free)} free of ${gib(gpu.device.totalMemory)}`;
    throw new ModelFitError(
      `${source.dir}: ${gpu.device.name} ran out of memory building the ${adapter.modelType} model in ${describePrecision(context.precision ?? F32_PRECISION)}: ` +
        `${weights}the device had ${had} before the build; the weights did not fit beside what the layers keep for ` +
        `${limits.maxSeqs} sequences of up to ${limits.maxSeqLen} tokens and steps of up to ${limits.maxRows} rows (recurrent state, caches, scratch). ` +
        `Serve fewer sequences or shorter ones (--max-batch, --max-model-len), use a lower precision (--dtype bf16, or the FP8 release), ` +
        `or spread the model over more devices (--tensor-parallel-size)`,
      source.weightBytes?.total ?? 0,
      free ?? gpu.device.totalMemory,
      { cause: error },
    );
  }
}

/**
 * Opens a checkpoint directory, finds the adapter for its `model_type` (an unsupported one is an
 * \`UnsupportedArchitectureError\` naming the supported ones, before any tensor is read), checks
 * that its weights fit the device, and builds the layer stack (`buildModelStack`). Tensors are read one at a time as
 * layers upload them.
 */
export function loadModel(dirOrCheckpoint: string | Checkpoint, options: LoadModelOptions): LoadedModel {
  const checkpoint = typeof dirOrCheckpoint === 'string' ? Checkpoint.open(dirOrCheckpoint) : dirOrCheckpoint;
  const precision = options.precision ?? F32_PRECISION;
  try {
    const adapter = (options.architectures ?? architectures).forConfig(checkpoint.config, `${checkpoint.dir}/config.json`);
    const bytes = checkModelFits(checkpoint, options.gpu, precision, undefined, adapter.unreadTensors?.(checkpoint.config));
    const stack = buildModelStack(adapter, {
      gpu: options.gpu,
      config: checkpoint.config,
      weights: checkpoint.weights,
      limits: options.limits,
      precision,
      ...(options.plugins ? { plugins: options.plugins } : {}),
    }, { dir: checkpoint.dir, weightBytes: bytes });
    return { checkpoint, adapter, stack, precision, weightBytes: bytes };
  } finally {
    // Every tensor has been uploaded; reads after this reopen the shard.
    checkpoint.close();
  }
}
