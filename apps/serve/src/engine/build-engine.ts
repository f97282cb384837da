import { statSync } from 'node:fs';
import {
  Checkpoint, EngineLoop, NgramProposer, StepDriver, WeightsError, checkModelFits, describePrecision, eosTokenIds, resolvePrecision,
  type DtypeChoice, type GpuBackend, type LayerLimits, type ModelStack, type NgramOptions, type Precision, type WeightBytes, type WeightSource,
} from '@metrale/core';
import type { BackendChoice } from '../backends/select-backend.js';
import { resolveCacheDir } from '../embedded/cache-dir.js';
import { EMBEDDED_MODEL_NAME, ensureEmbeddedModel } from '../embedded/embedded-model.js';
import type { ServingRegistry } from '../plugins/build-registry.js';
import type { RegistrySetup } from '../plugins/load-registry.js';
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
  /** Prompt + completion tokens per request; default min(max_position_embeddings, 4096). */
  readonly maxModelLen?: number;
  /** Prompt rows per sequence and prefill step. */
  readonly prefillChunk: number;
  readonly spec?: Required<NgramOptions>;
  /** Capture decode and verify steps into graphs. */
  readonly graphs: boolean;
  /** `--dtype`: the data path (default auto: the checkpoint's). */
  readonly dtype?: DtypeChoice;
  /** The plugins the model may be built from (loaded in the engine worker). */
  readonly plugins: RegistrySetup;
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
}

export const DEFAULT_MAX_MODEL_LEN = 4096;

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
  const vocabSize = config.vocab_size;
  if (!Number.isSafeInteger(vocabSize) || (vocabSize as number) < 1) throw new WeightsError(`config.vocab_size must be a positive integer, got ${JSON.stringify(vocabSize)}`, `${checkpoint.dir}/config.json`);
  const positions = typeof config.max_position_embeddings === 'number' ? config.max_position_embeddings : undefined;
  let maxModelLen = setup.maxModelLen ?? Math.min(positions ?? DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN);
  if (setup.maxModelLen !== undefined && positions !== undefined && setup.maxModelLen > positions) {
    throw new WeightsError(`--max-model-len ${setup.maxModelLen} exceeds the model's max_position_embeddings (${positions})`, `${checkpoint.dir}/config.json`);
  }
  maxModelLen = Math.max(2, maxModelLen);
  const generation = checkpoint.json('generation_config.json');
  const eos = [...new Set([...eosTokenIds(config), ...(generation ? eosTokenIds(generation) : [])])];
  const weightBytes = checkpoint.weights.files().reduce((a, f) => a + statSync(f).size, 0);
  const precision = resolvePrecision(setup.dtype ?? 'auto', config, `${checkpoint.dir}/config.json`);
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
  };
  return { info, checkpoint };
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

export interface Engine {
  readonly loop: EngineLoop;
  readonly stack: ModelStack;
  readonly limits: LayerLimits;
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
 * head for prefill, and starts the engine loop.
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
    deviceWeightBytes = checkModelFits(checkpoint, gpu, info.precision);
    stack = adapter.build({
      gpu, config: checkpoint.config, weights: countingWeights(checkpoint.weights, info.weightBytes, onProgress), limits,
      precision: info.precision, plugins: registry.layers,
    });
  } finally {
    checkpoint.close();
  }
  let driver: StepDriver | undefined;
  try {
    driver = new StepDriver({ gpu, layers: PrefillLastRowsHead.wrapLast(stack.layers), limits, graphs: setup.graphs });
    const loop = new EngineLoop({
      driver,
      vocabSize: stack.vocabSize,
      prefillChunk: setup.prefillChunk,
      ...(setup.spec ? { speculation: { proposer: new NgramProposer(setup.spec), k: setup.spec.k } } : {}),
    });
    const d = driver;
    return {
      loop, stack, limits, deviceWeightBytes,
      dispose() {
        d.dispose();
        stack.dispose();
      },
    };
  } catch (error) {
    driver?.dispose();
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
