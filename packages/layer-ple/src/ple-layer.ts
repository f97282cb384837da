import {
  FLOAT_DTYPE_CODE,
  InvalidArgumentError,
  ReplaySyncError,
  encodeFloats,
  floatBytes,
  runLinear,
  uploadLinear,
  type CreateLayerContext,
  type DevicePtr,
  type FloatDtype,
  type GpuBackend,
  type LayerLimits,
  type LayerState,
  type LayerStep,
  type LinearWeight,
  type Stream,
  type TransformerLayer,
} from '@metrale/core';
import { cacheKey, sharedCache } from './cache-registry.js';
import { asRowValues, rowTypeOf } from './gemma3n-stateless.js';
import { readPleConfig, type PleConfig } from './ple-config.js';
import { combineKernel, embedGatherKernel, gateMulKernel, outNormKernel, threadsFor } from './ple-kernels.js';
import { PLE_TENSORS, describePleTensors, readLayerWeights, scalarAs } from './ple-weights.js';
import { dtypeCodes, PleSlotCache, type PleCacheOptions, type PleCacheStats, type PrestageClaim } from './slot-cache.js';
import { TensorReader } from './tensor-reader.js';

/** Options of a PLE layer. */
export interface PleLayerOptions extends PleCacheOptions {
  /**
   * Share one slot cache (and the device copy of `embed_tokens`) with every other PLE layer
   * created on the same backend from the same table, shapes and limits: the layers of one model.
   * Default true. Layers that share must run in one driver; pass false for independent layers.
   */
  readonly share?: boolean;
}

/** Per-sequence state: whether this layer's rows for the step are staged and not yet consumed. */
export interface PleState extends LayerState, PrestageClaim {
  readonly slot: number;
}

/**
 * The scalars of the math, rounded as Hugging Face holds them (see README.md, "Hugging Face
 * semantics"): float32, then the model's dtype, which is the row type (f32, bf16 or f16), whatever
 * dtype the checkpoint stores the embedding and the table in.
 */
export interface PleScales {
  /** sqrt(D): `Gemma3nTextScaledWordEmbedding.embed_scale`. */
  readonly embed: number;
  /** D^−0.5: `per_layer_projection_scale`. */
  readonly projection: number;
  /** sqrt(P): `embed_tokens_per_layer.embed_scale`. */
  readonly table: number;
  /** 2^−0.5: `per_layer_input_scale`. */
  readonly input: number;
}

/**
 * The per-layer input path of Gemma 3n decoder layer l (`gemma3n_text`): an input row is the
 * vector fed to `per_layer_input_gate` ([D] of the row type, `precision.rows`: f32, bf16 or f16);
 * the output row is v = RMSNorm_D(per_layer_projection(gelu_tanh(per_layer_input_gate(a)) ⊙ ple[l])),
 * of the row type, with ple computed from the row's token id (docs: README.md and KERNELS.md). The
 * layer's GEMM weights live on the device in the row type (a bf16 checkpoint's stay bf16), the
 * GEMMs accumulate in f32, and the kernels compute in f32 with values held in the row type where
 * Hugging Face holds them there; f32 rows are the reference path.
 *
 * The per-layer table stays on the host; the rows of the tokens in flight live in a device slot
 * cache (`PleSlotCache`) that `decodePrestage` fills. Decode and verify kernels find a row's slot
 * through the device token → slot map, so they read only device buffers and one captured graph
 * serves every step. Prefill (eager) stages its rows itself, in pieces no larger than the cache.
 */
export class PleLayer implements TransformerLayer<PleState> {
  readonly type = 'ple';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  /** The row type of inputs, outputs, intermediates and GEMM weights. */
  readonly rows: FloatDtype;
  readonly config: PleConfig;
  readonly limits: LayerLimits;
  readonly cache: PleSlotCache;
  readonly scales: PleScales;
  readonly #gpu: GpuBackend;
  /** The GEMM weights in the row type; the post norm's weight f32 holding row-type values. */
  readonly #own: { readonly projection: LinearWeight; readonly gate: LinearWeight; readonly projectionOut: LinearWeight; readonly postNorm: DevicePtr };
  readonly #allocations: DevicePtr[] = [];
  #disposed = false;

  constructor(context: CreateLayerContext, options: PleLayerOptions = {}) {
    const cfg = readPleConfig(context.config, context.layerIndex);
    const rows = rowTypeOf(context.precision, 'ple');
    const limits = context.limits;
    for (const key of ['maxSeqs', 'maxBatch', 'maxK', 'maxRows'] as const) {
      if (!Number.isSafeInteger(limits[key]) || limits[key] < 1) throw new InvalidArgumentError(`ple: limits.${key} must be a positive integer, got ${limits[key]}`);
    }
    // Every tensor is checked against the config before anything is read whole or allocated.
    const reader = new TensorReader(context.weights);
    const tensors = describePleTensors(reader, cfg);
    const own = readLayerWeights(reader, cfg, tensors);
    const gpu = context.gpu;
    const cacheOptions: PleCacheOptions = {
      ...(options.slotCapacity !== undefined ? { slotCapacity: options.slotCapacity } : {}),
      ...(options.stagingChunks !== undefined ? { stagingChunks: options.stagingChunks } : {}),
    };
    const make = (onDispose?: () => void, key?: string) => new PleSlotCache(gpu, cfg, limits, reader, tensors, rows, cacheOptions, key, onDispose);
    let cache: PleSlotCache;
    if (options.share === false) {
      cache = make();
    } else {
      const key = cacheKey(context.weights, cfg, limits, rows, cacheOptions);
      cache = sharedCache(gpu, key, (onDispose) => make(onDispose, key));
    }
    cache.attach();
    this.cache = cache;
    this.config = cfg;
    this.limits = limits;
    this.#gpu = gpu;
    this.rows = rows;
    this.inputRowBytes = this.outputRowBytes = floatBytes(rows) * cfg.hidden;
    // HF casts each scalar to the dtype of the tensor it multiplies, which is the model's: a model
    // held in f32 (or f64) has upcast a bf16 checkpoint's embedding and table on load, so sqrt(P)
    // is not rounded to bf16 there (P = 10: 3.1623, not 3.15625). The row type is the model's dtype.
    const scalar = (x: number) => scalarAs(x, rows);
    this.scales = {
      embed: scalar(Math.sqrt(cfg.hidden)),
      projection: scalar(cfg.hidden ** -0.5),
      table: scalar(Math.sqrt(cfg.perLayer)),
      input: scalar(Math.SQRT1_2),
    };
    try {
      const alloc = (bytes: number): DevicePtr => {
        const p = gpu.alloc(bytes);
        this.#allocations.push(p);
        return p;
      };
      const [D, P, l] = [cfg.hidden, cfg.perLayer, cfg.layerIndex];
      const linear = (name: string, values: Float32Array, outFeatures: number, inFeatures: number): LinearWeight =>
        uploadLinear(gpu, alloc, { name, rows: outFeatures, cols: inFeatures, dtype: rows, data: encodeFloats(values, rows) });
      const postNorm = asRowValues(own.postNorm, rows);
      this.#own = {
        projection: linear(PLE_TENSORS.projection, own.projection, P, D),
        gate: linear(PLE_TENSORS.gate(l), own.gate, P, D),
        projectionOut: linear(PLE_TENSORS.projectionOut(l), own.projectionOut, D, P),
        postNorm: alloc(postNorm.byteLength),
      };
      gpu.upload(this.#own.postNorm, postNorm);
    } catch (error) {
      this.dispose();
      throw error;
    }
  }

  openState(slot: number): PleState {
    this.#alive('openState');
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.limits.maxSeqs) {
      throw new InvalidArgumentError(`ple: slot must be in 0..${this.limits.maxSeqs - 1}, got ${slot}`);
    }
    return { slot, seen: this.cache.roundOf(slot), armed: false };
  }

  closeState(_state: PleState): void {}

  /** Only what must agree across paths: whether staged rows wait for a step (not the LRU order, nor counters). */
  inspectState(state: PleState): unknown {
    return { armed: state.armed };
  }

  /** Counters of the slot cache this layer uses (shared with the other layers of the model). */
  stats(): PleCacheStats {
    return this.cache.stats();
  }

  /**
   * Hashes the sequence's tokens, uploads the rows that miss (pinned staging, `stream`), sets
   * their device map entries, and arms the state. The first layer of a shared cache does this;
   * the others take what it staged.
   */
  decodePrestage(tokens: Int32Array, state: PleState, _gpu: GpuBackend, stream: Stream): void {
    this.cache.prestage(state, tokens, stream);
  }

  /** A failed capture consumed the armed flag; the rows are still staged and pinned: re-arm only. */
  decodePrestageRearm(state: PleState): void {
    state.armed = true;
  }

  /** A replay consumed the staged rows as an eager forward would. */
  syncReplayedStep(state: PleState, _seqLen: number, _k: number): void {
    if (!state.armed) {
      throw new ReplaySyncError(`ple (slot ${state.slot}): a replayed step ran without its decodePrestage`);
    }
    state.armed = false;
    this.cache.closeEpoch();
  }

  forward(step: LayerStep<PleState>): void {
    this.#alive('forward');
    const { phase, rows } = step;
    if (rows > this.limits.maxRows) throw new InvalidArgumentError(`ple: a step of ${rows} rows exceeds limits.maxRows (${this.limits.maxRows})`);
    if (step.batch > this.limits.maxBatch && phase !== 'prefill') {
      throw new InvalidArgumentError(`ple: a ${phase} step of ${step.batch} batch positions exceeds limits.maxBatch (${this.limits.maxBatch})`);
    }
    if (phase === 'prefill') {
      this.#prefill(step);
      return;
    }
    const states = step.host.states;
    for (let p = 0; p < states.length; p++) {
      const s = states[p];
      if (s && !s.armed) throw new InvalidArgumentError(`ple: slot ${s.slot} ran a ${phase} step without its decodePrestage`);
    }
    for (let p = 0; p < states.length; p++) {
      const s = states[p];
      if (s) s.armed = false;
    }
    this.cache.closeEpoch();
    this.#launch(step, 0, rows, 0n);
  }

  /** Prefill rows, in pieces of at most `capacity` rows: stage, compute, release. */
  #prefill(step: LayerStep<PleState>): void {
    const tokens = step.host.tokens;
    this.cache.validateTokens(tokens, 0, step.rows, 'prefill');
    const piece = Math.min(this.cache.capacity, this.limits.maxRows);
    for (let first = 0; first < step.rows; first += piece) {
      const count = Math.min(piece, step.rows - first);
      this.cache.stagePrefill(tokens, first, count, step.stream);
      this.#launch(step, first, count, this.cache.device.rowSlots);
      this.cache.closeEpoch();
    }
  }

  /** The kernels of rows [first, first + count); every per-step value comes from device tables. */
  #launch(step: LayerStep<PleState>, first: number, count: number, rowSlots: DevicePtr): void {
    const gpu = step.gpu;
    const { stream, tables, batch } = step;
    const cfg = this.config;
    const D = cfg.hidden;
    const P = cfg.perLayer;
    const dev = this.cache.device;
    const codes = dtypeCodes(this.cache);
    const rows = this.rows;
    const dtype = FLOAT_DTYPE_CODE[rows];
    const rowsAt = { slots: tables.slots, rowStarts: tables.rowStarts, batch, firstRow: first, count, dtype };
    const input = step.input + BigInt(first * this.inputRowBytes);
    const output = step.output + BigInt(first * this.outputRowBytes);
    // x · Wᵀ in the row type, accumulated in f32.
    const linear = (x: DevicePtr, w: LinearWeight, y: DevicePtr) => runLinear(gpu, { m: count, x, w, y, xDtype: rows, yDtype: rows, stream });
    gpu.launch(embedGatherKernel, { grid: count, block: threadsFor(D), stream }, {
      out: dev.e, embed: dev.embed, embedDtype: codes.embed, tokens: tables.tokens, ...rowsAt, hidden: D, vocab: cfg.vocab, scale: this.scales.embed,
    });
    linear(dev.e, this.#own.projection, dev.q);
    gpu.launch(combineKernel, { grid: count, block: threadsFor(P), stream }, {
      ple: dev.ple, q: dev.q, normWeight: dev.projectionNorm, slotRows: dev.slotRows, tableDtype: codes.table, rowSlots, map: dev.map,
      tokens: tables.tokens, ...rowsAt, perLayer: P, rowElems: cfg.rowElems, layerOffset: cfg.layerIndex * P, tableVocab: cfg.tableVocab,
      projScale: this.scales.projection, tableScale: this.scales.table, inputScale: this.scales.input, eps: cfg.eps,
    });
    linear(input, this.#own.gate, dev.g);
    gpu.launch(gateMulKernel, { grid: count, block: threadsFor(P), stream }, { h: dev.h, g: dev.g, ple: dev.ple, ...rowsAt, perLayer: P });
    linear(dev.h, this.#own.projectionOut, output);
    gpu.launch(outNormKernel, { grid: count, block: threadsFor(D), stream }, { y: output, weight: this.#own.postNorm, ...rowsAt, hidden: D, eps: cfg.eps });
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const p of this.#allocations.splice(0)) this.#gpu.free(p);
    // A constructor that failed before attaching leaves `cache` unset.
    (this.cache as PleSlotCache | undefined)?.detach();
  }

  #alive(where: string): void {
    if (this.#disposed) throw new InvalidArgumentError(`ple: ${where} on a disposed layer`);
  }
}
