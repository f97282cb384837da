import { statSync } from 'node:fs';
import {
  Checkpoint, EngineLoop, NgramProposer, StepDriver, WeightsError, buildModelStack, checkModelFits, describePrecision, eosTokenIds, resolvePrecision,
  type DtypeChoice, type GpuBackend, type KvCacheInfo, type KvMemory, type LayerLimits, type ModelStack, type NgramSpec, type Precision,
  type WeightBytes, type WeightSource,
} from '@metrale/core';
import { DeviceSampler } from '@metrale/layer-std';
import type { BackendChoice } from '../backends/select-backend.js';
import { resolveCacheDir } from '../embedded/cache-dir.js';
import { EMBEDDED_MODEL_NAME, ensureEmbeddedModel } from '../embedded/embedded-model.js';
import type { ServingRegistry } from '../plugins/build-registry.js';
import type { RegistrySetup } from '../plugins/load-registry.js';
import { textConfigOf, textConfigWhere, textOnlyNotice } from '../models/text-config.js';
import { samplingDefaults, type GenerationConfigChoice, type SamplingDefaults } from './generation-defaults.js';
import { PrefillLastRowsHead } from './prefill-head.js';

/** How the engine is set up: the `metrale serve` options the worker needs. */
export interface EngineSetup {
  /** A checkpoint directory; absent: the embedded model. */
  readonly modelDir?: string;
  /** Where the embedded model is written on first start (default: see resolveCacheDir). */
  readonly cacheDir?: string;
  readonly backend: BackendChoice;
  /** Sequences decoded together at most (each holds a cache slot). */
  readonly maxBatch: number;
  /** Prompt + completion tokens per request; default the model's max_position_embeddings. */
  readonly maxModelLen?: number;
  /** Share of the device's memory the server may take; the KV cache gets what is left of it after the weights and buffers (default 0.9 on CUDA). */
  readonly gpuMemoryUtilization?: number;
  /** Bytes of KV cache, instead of sizing it from the utilization (default on the CPU backend: DEFAULT_CPU_KV_CACHE_BYTES). */
  readonly kvCacheMemory?: number;
  /** Tokens per KV page (vLLM's --block-size; default 16). */
  readonly blockSize?: number;
  /** Start requests on cached prefix blocks (default true). */
  readonly prefixCaching?: boolean;
  /** Prompt rows per sequence and prefill step. */
  readonly prefillChunk: number;
  readonly spec?: NgramSpec;
  /** Capture decode and verify steps into graphs. */
  readonly graphs: boolean;
  /** `--no-async-scheduling` gives false: each greedy decode's tokens read before the next launches (default true; `EngineLoopOptions.asyncScheduling`). */
  readonly asyncScheduling?: boolean;
  /** `--dtype`: the data path (default auto: the checkpoint's). */
  readonly dtype?: DtypeChoice;
  /** The plugins the model may be built from (loaded in the engine worker). */
  readonly plugins: RegistrySetup;
  /** `--generation-config`: where the sampling defaults come from (default auto: the checkpoint's generation_config.json). */
  readonly generationConfig?: GenerationConfigChoice;
  /** `--tensor-parallel-size`: ranks the model is split over (default 1: one device). */
  readonly tensorParallelSize?: number;
  /** `--enable-expert-parallel`: whole experts per rank. */
  readonly expertParallel?: boolean;
}

/** What the server learns of the model before its weights load. */
export interface ModelInfo {
  readonly dir: string;
  readonly embedded: boolean;
  /** The embedded model was written by this start (first start). */
  readonly created: boolean;
  readonly createMs: number;
  readonly name: string;
  readonly modelType: string;
  /** The package whose adapter builds the model_type (a plugin, or @metrale/serve). */
  readonly provider: string;
  readonly vocabSize: number;
  readonly eosTokenIds: number[];
  readonly maxModelLen: number;
  /** Bytes of the weight files. */
  readonly weightBytes: number;
  /** The data path the model runs in, and how it reads (`bf16`, `fp8 weights, bf16 rows`). */
  readonly precision: Precision;
  readonly dtype: string;
  /** The sampling defaults of generation_config.json that requests override (generation-defaults.ts). */
  readonly samplingDefaults: SamplingDefaults;
  /** A line to show at load: a multimodal checkpoint is served as text only (`textOnlyNotice`). */
  readonly notice?: string;
}

/** The context of a model whose config names no max_position_embeddings. */
export const DEFAULT_MAX_MODEL_LEN = 4096;
/** The share of a GPU the server takes by default (vLLM's --gpu-memory-utilization). */
export const DEFAULT_GPU_MEMORY_UTILIZATION = 0.9;
/**
 * The CPU backend's device memory is the host's: unless asked for a utilization, the KV cache
 * there takes this much, not most of the machine.
 */
export const DEFAULT_CPU_KV_CACHE_BYTES = 256 * 2 ** 20;

/** Opens the checkpoint (writing the embedded one first when asked) and checks what can be checked without a device. */
export function resolveModel(setup: EngineSetup, registry: ServingRegistry): { info: ModelInfo; checkpoint: Checkpoint } {
  let dir = setup.modelDir;
  let created = false;
  let createMs = 0;
  if (dir === undefined) {
    const made = ensureEmbeddedModel(resolveCacheDir(setup.cacheDir));
    dir = made.dir;
    created = made.created;
    createMs = made.ms;
  }
  const checkpoint = Checkpoint.open(dir);
  const config = checkpoint.config;
  registry.architectures.forConfig(config, `${checkpoint.dir}/config.json`);
  const modelType = String(config.model_type);
  // A multimodal checkpoint's language model: its text_config.
  const text = textConfigOf(config);
  const vocabSize = text.vocab_size;
  if (!Number.isSafeInteger(vocabSize) || (vocabSize as number) < 1) {
    throw new WeightsError(`${textConfigWhere(config)}.vocab_size must be a positive integer, got ${JSON.stringify(vocabSize)}`, `${checkpoint.dir}/config.json`);
  }
  const maxModelLen = servedModelLen(setup, text, `${checkpoint.dir}/config.json`);
  const generation = checkpoint.json('generation_config.json');
  const eos = [...new Set([...eosTokenIds(text), ...(generation ? eosTokenIds(generation) : [])])];
  const weightBytes = checkpoint.weights.files().reduce((a, f) => a + statSync(f).size, 0);
  const precision = resolvePrecision(setup.dtype ?? 'auto', config, `${checkpoint.dir}/config.json`);
  const notice = textOnlyNotice(config);
  const info: ModelInfo = {
    dir: checkpoint.dir,
    embedded: setup.modelDir === undefined,
    created,
    createMs,
    name: setup.modelDir === undefined ? EMBEDDED_MODEL_NAME : checkpoint.dir,
    modelType,
    // forConfig found an adapter: the registry lists who provides it.
    provider: registry.modelTypes.find((m) => m.name === modelType)!.provider,
    vocabSize: vocabSize as number,
    eosTokenIds: eos,
    maxModelLen,
    weightBytes,
    precision,
    dtype: describePrecision(precision),
    samplingDefaults: samplingDefaults(setup.generationConfig ?? 'auto', checkpoint.dir),
    ...(notice ? { notice } : {}),
  };
  return { info, checkpoint };
}

/**
 * Prompt + completion tokens per request: `--max-model-len` (no more than the text config's
 * max_position_embeddings), else max_position_embeddings, else DEFAULT_MAX_MODEL_LEN. `where`
 * names the config for the error.
 */
export function servedModelLen(setup: Pick<EngineSetup, 'maxModelLen'>, text: Readonly<Record<string, unknown>>, where: string): number {
  const positions = typeof text.max_position_embeddings === 'number' ? text.max_position_embeddings : undefined;
  if (setup.maxModelLen !== undefined && positions !== undefined && setup.maxModelLen > positions) {
    throw new WeightsError(`--max-model-len ${setup.maxModelLen} exceeds the model's max_position_embeddings (${positions})`, where);
  }
  return Math.max(2, setup.maxModelLen ?? positions ?? DEFAULT_MAX_MODEL_LEN);
}

/** The driver's limits for serving `setup` with contexts of `maxModelLen` tokens. */
export function servingLimits(setup: EngineSetup, maxModelLen: number): LayerLimits {
  const maxK = setup.spec ? setup.spec.k + 1 : 1;
  return {
    maxSeqs: setup.maxBatch,
    maxBatch: setup.maxBatch,
    maxK,
    // A verify step may reach maxK − 1 rows past the last token a request can hold.
    maxSeqLen: maxModelLen + maxK - 1,
    maxRows: Math.max(setup.prefillChunk, setup.maxBatch * maxK),
  };
}

/** How much memory the KV cache may take on `gpu` for `setup`. */
export function kvMemory(setup: EngineSetup, gpu: GpuBackend): KvMemory {
  if (setup.kvCacheMemory !== undefined) return { bytes: setup.kvCacheMemory };
  if (gpu.kind === 'cpu' && setup.gpuMemoryUtilization === undefined) return { bytes: DEFAULT_CPU_KV_CACHE_BYTES };
  return { utilization: setup.gpuMemoryUtilization ?? DEFAULT_GPU_MEMORY_UTILIZATION };
}

export interface Engine {
  readonly loop: EngineLoop;
  readonly stack: ModelStack;
  readonly limits: LayerLimits;
  /** How the KV cache came out (pages, tokens, bytes), and whether prefix caching runs. */
  readonly kv: KvCacheInfo & { readonly prefixCaching: boolean };
  /** The weights' device bytes (per device under tensor parallelism), from the headers, checked against the device before the upload. */
  readonly deviceWeightBytes: WeightBytes;
  /** Frees the model; a tensor-parallel engine also ends its ranks' threads (the promise). */
  dispose(): void | Promise<void>;
  /** A tensor-parallel engine whose group failed (every later step would fail): why. */
  fault?(): Error | undefined;
}

/**
 * Builds the model on `gpu` with the registry's adapter and layer plugins (tensors read one at a
 * time; `onProgress` sees the bytes read so far against the weight files' size), wraps its lm
 * head for prefill, and starts the engine loop (`startEngine`).
 */
export function buildEngine(
  setup: EngineSetup, info: ModelInfo, checkpoint: Checkpoint, gpu: GpuBackend, registry: ServingRegistry,
  onProgress?: (loaded: number, total: number) => void,
): Engine {
  const limits = servingLimits(setup, info.maxModelLen);
  const adapter = registry.architectures.forConfig(checkpoint.config, `${checkpoint.dir}/config.json`);
  let stack: ModelStack;
  let deviceWeightBytes: WeightBytes;
  try {
    deviceWeightBytes = checkModelFits(checkpoint, gpu, info.precision, undefined, adapter.unreadTensors?.(checkpoint.config));
    stack = buildModelStack(adapter, {
      gpu, config: checkpoint.config, weights: countingWeights(checkpoint.weights, info.weightBytes, onProgress), limits,
      precision: info.precision, plugins: registry.layers,
    }, { dir: checkpoint.dir, weightBytes: deviceWeightBytes });
  } finally {
    checkpoint.close();
  }
  return startEngine(setup, gpu, stack, limits, deviceWeightBytes);
}

/**
 * The serving engine over a built model (`stack`, built for `limits`: `servingLimits`): the step
 * driver with the served prefill head, its KV page pool sized now from `kvMemory` (so after the
 * weights), state snapshots and prefix caching as `setup` asks, the device sampler and the engine
 * loop. The engine owns `stack` from here: its `dispose` (or a failure here) frees it.
 */
export function startEngine(setup: EngineSetup, gpu: GpuBackend, stack: ModelStack, limits: LayerLimits, deviceWeightBytes: WeightBytes): Engine {
  let driver: StepDriver | undefined;
  let picker: DeviceSampler | undefined;
  try {
    // A request that asks for its prompt's logprobs needs every prompt row from the head.
    let everyRow: (slot: number) => boolean = () => false;
    driver = new StepDriver({
      gpu, layers: PrefillLastRowsHead.wrapLast(stack.layers, (slot) => everyRow(slot)), limits, graphs: setup.graphs,
      // Snapshots of recurrent state serve prefix caching only.
      kvCache: { pageSize: setup.blockSize ?? 16, memory: kvMemory(setup, gpu), ...(setup.prefixCaching === false ? { snapshots: 0 } : {}) },
    });
    // Decode steps pick greedy and sampled tokens on the device: ids come back, not batch × vocab logits.
    picker = new DeviceSampler(gpu, limits.maxBatch * limits.maxK, { vocab: stack.vocabSize });
    const loop = new EngineLoop({
      driver,
      vocabSize: stack.vocabSize,
      prefillChunk: setup.prefillChunk,
      prefixCaching: setup.prefixCaching ?? true,
      picker,
      ...(setup.asyncScheduling === false ? { asyncScheduling: false } : {}),
      ...(setup.spec ? { speculation: { proposer: new NgramProposer(setup.spec), k: setup.spec.k, adaptive: setup.spec.adaptive } } : {}),
    });
    everyRow = (slot) => loop.needsEveryPromptRow(slot);
    const d = driver;
    const p = picker;
    return {
      loop, stack, limits, deviceWeightBytes, kv: { ...driver.kvInfo, prefixCaching: loop.prefixCaching },
      dispose() {
        d.dispose();
        p.dispose();
        stack.dispose();
      },
    };
  } catch (error) {
    driver?.dispose();
    picker?.dispose();
    stack.dispose();
    throw error;
  }
}

/** `source`, telling `onProgress` of the bytes read (whole tensors and parts of them) against `total`. */
export function countingWeights(source: WeightSource, total: number, onProgress?: (loaded: number, total: number) => void): WeightSource {
  if (!onProgress) return source;
  let loaded = 0;
  const count = (bytes: number) => {
    loaded += bytes;
    onProgress(Math.min(loaded, total), total);
  };
  const view: WeightSource = {
    origin: source.origin,
    names: () => source.names(),
    has: (name) => source.has(name),
    get: (name) => {
      const t = source.get(name);
      count(t.data.byteLength);
      return t;
    },
    ...(source.fileOf ? { fileOf: (name: string) => source.fileOf!(name) } : {}),
    ...(source.qualifiedName ? { qualifiedName: (name: string) => source.qualifiedName!(name) } : {}),
    ...(source.info ? { info: (name: string) => source.info!(name) } : {}),
    ...(source.readRange
      ? {
          readRange: (name: string, offset: number, bytes: number, into?: Uint8Array) => {
            const part = source.readRange!(name, offset, bytes, into);
            count(part.byteLength);
            return part;
          },
        }
      : {}),
  };
  return view;
}
