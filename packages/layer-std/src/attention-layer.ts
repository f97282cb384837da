import {
  FLOAT_DTYPE_CODE, InvalidArgumentError, ReplayRoomError, ReplaySyncError, floatBytes, runLinear, uploadLinear,
  type DevicePtr, type GpuBackend, type KvPageBinding, type LayerLimits, type LayerState, type LayerStep, type LinearWeight, type Precision,
  type TransformerLayer, type WeightSource,
} from '@metrale/core';
import { checkAttention, type AttentionOptions, type KvSource } from './attention-config.js';
import {
  ATTENTION_KERNELS, attnDecodeLaunch, attnPrefillLaunch, combineLaunch, coreLaunch, decodeOnTensorCores, keyChunks, partialsBytes, prefillOnTensorCores, prepLaunch, type AttentionKernels,
} from './attention-kernels.js';
import { loadAttentionWeights } from './attention-weights.js';
import { DeviceMemory } from './device-memory.js';
import { precisionOf } from './layer-precision.js';
import { requireKernels } from './require-kernels.js';
import { acquireScratch, type ScratchLease } from './shared-scratch.js';
import { acquireRopeTable, type SharedRopeTable } from './rope-table.js';
import { StackedLinear } from './stacked-linear.js';

/** Host bookkeeping of a sequence: rows its cache holds (ahead of the committed length after a verify). */
export interface AttentionState extends LayerState {
  length: number;
}

/**
 * Causal attention over a paged KV cache (Qwen3-Next's gated attention; plain GQA with
 * `gated: false`; Gemma 3n's with a sliding window, unweighted `v_norm`, scale 1 and KV sharing,
 * where a layer with `kvSource` reads that layer's pages and owns none): one GEMM for q, k, v (or one per projection when FP8 scales cannot be stacked);
 * `std.attn_prep` (q/k norms, partial RoPE, cache write); `std.attn_core` (causal softmax over the
 * cache, output gate; split-KV for decode and verify rows, whose chunks `std.attn_combine` merges;
 * `std.attn_prefill` on tensor cores for a bf16 / f16 prefill); the `o_proj` GEMM. q/k/v, the cache and the output are of the row type,
 * norms, softmax and its sums f32. Every per-step
 * value the kernels need comes from the step tables, so a captured step replays correctly; the
 * cache length lives on the host, hence the room check and the replay sync. Rejected verify rows
 * leave K/V past the committed length, which the next row at that position overwrites before any
 * row reads it.
 *
 * The K and V caches are pages of the model's shared pool (`kvBind`, freed by `kvUnbind` when the
 * driver is disposed): the driver gives a sequence its pages and writes the block table the kernels read. A sequence may start on pages another
 * one filled (`resumeAt`): its rows there are exactly what it would have written.
 */
export class AttentionLayer implements TransformerLayer<AttentionState>, KvSource {
  readonly type = 'attention';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: AttentionOptions;
  readonly precision: Precision;
  readonly limits: LayerLimits;
  readonly #gpu: GpuBackend;
  readonly #memory: DeviceMemory;
  /** cos / sin of every position, shared with the model's other attention layers of the same rotary. */
  readonly #rope: SharedRopeTable;
  readonly #kernels: AttentionKernels;
  readonly #qkvW: StackedLinear;
  readonly #oW: LinearWeight;
  readonly #b: {
    readonly qNorm: DevicePtr; readonly kNorm: DevicePtr;
    readonly cos: DevicePtr; readonly sin: DevicePtr;
    readonly qkv: DevicePtr; readonly q: DevicePtr; readonly attn: DevicePtr;
  };
  /** The pool binding and this layer's K and V pages ([pages][pageSize][kvHeads][headDim] each). */
  #cache: { readonly binding: KvPageBinding; readonly k: DevicePtr; readonly v: DevicePtr } | undefined;
  readonly #qkvWidth: number;
  /** `std.attn_core`'s partial records of decode and verify rows (shared by the model's attention layers); none when rows are never cut. */
  readonly #partials: ScratchLease | undefined;
  /** The most decode or verify rows a step has (the records are sized for them). */
  readonly #decodeRows: number;
  #disposed = false;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AttentionOptions) {
    const precision = precisionOf(options.precision, 'attention');
    this.#kernels = ATTENTION_KERNELS[precision.rows];
    const k = this.#kernels;
    requireKernels(gpu, 'attention', [k.prep, k.core, k.combine, ...(k.prefill ? [k.prefill] : []), ...(k.decode ? [k.decode] : [])]);
    this.options = checkAttention(options);
    this.precision = precision;
    this.limits = limits;
    this.#gpu = gpu;
    const { hidden: D, heads: H, kvHeads: Hkv, headDim: d } = options;
    const bytes = floatBytes(precision.rows);
    this.inputRowBytes = this.outputRowBytes = bytes * D;
    this.#qkvWidth = H * d * (options.gated ? 2 : 1) + (options.kvSource ? 0 : 2 * Hkv * d);
    const w = loadAttentionWeights(weights, options, precision);
    const m = (this.#memory = new DeviceMemory(gpu));
    let rope: SharedRopeTable | undefined;
    try {
      rope = this.#rope = acquireRopeTable(gpu, limits.maxSeqLen, options.rotaryDim, options.ropeTheta);
      const alloc = (n: number) => m.alloc(n);
      this.#qkvW = new StackedLinear(gpu, alloc, w.qkv, 'qkv_proj');
      this.#oW = uploadLinear(gpu, alloc, w.o);
      this.#b = {
        qNorm: w.qNorm ? m.upload(w.qNorm) : 0n, kNorm: w.kNorm ? m.upload(w.kNorm) : 0n,
        cos: rope.cos, sin: rope.sin,
        qkv: m.alloc(bytes * limits.maxRows * this.#qkvWidth), q: m.alloc(bytes * limits.maxRows * H * d), attn: m.alloc(bytes * limits.maxRows * H * d),
      };
      const decodeRows = (this.#decodeRows = Math.min(limits.maxRows, limits.maxBatch * limits.maxK));
      const partials = partialsBytes(decodeRows, H, d, keyChunks('decode', limits.maxSeqLen));
      this.#partials = partials > 0 ? acquireScratch(gpu, 'attention-partials', partials) : undefined;
    } catch (error) {
      rope?.release();
      m.free();
      throw error;
    }
  }

  /** K and V of `pageSize` rows, in the rows' type; nothing for a layer that reads another's cache. */
  kvPageBytes(pageSize: number): number {
    if (this.options.kvSource) return 0;
    return 2 * pageSize * this.options.kvHeads * this.options.headDim * floatBytes(this.precision.rows);
  }

  kvBind(binding: KvPageBinding): void {
    this.#alive('kvBind');
    if (this.options.kvSource) return;
    // Pages of an earlier binding still here (its driver not disposed) go first.
    this.kvUnbind();
    const bytes = this.kvPageBytes(binding.pageSize) / 2;
    const k = this.#memory.alloc(bytes * binding.pages);
    let v: DevicePtr;
    try {
      v = this.#memory.alloc(bytes * binding.pages);
    } catch (error) {
      this.#memory.release(k);
      throw error;
    }
    this.#cache = { binding, k, v };
  }

  /** The driver that bound the pool is gone: its pages go back; a later `kvBind` binds afresh. */
  kvUnbind(): void {
    const cache = this.#cache;
    if (!cache || this.#disposed) return;
    this.#cache = undefined;
    this.#memory.release(cache.k, cache.v);
  }

  /** The cache this layer reads: its own, or its KV source's. */
  kvCache(): { readonly binding: KvPageBinding; readonly k: DevicePtr; readonly v: DevicePtr } | undefined {
    return this.options.kvSource ? this.options.kvSource.kvCache() : this.#cache;
  }

  openState(slot: number): AttentionState {
    this.#alive('openState');
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.limits.maxSeqs) throw new InvalidArgumentError(`attention: slot must be in 0..${this.limits.maxSeqs - 1}, got ${slot}`);
    return { slot, length: 0 };
  }

  closeState(_state: AttentionState): void {}

  /** The sequence's first `length` rows are in shared pages already: K/V of the same tokens at the same positions. */
  resumeAt(state: AttentionState, length: number): void {
    state.length = length;
  }

  inspectState(state: AttentionState): unknown {
    return { length: state.length };
  }

  checkReplayRoom(state: AttentionState, seqLen: number, k: number): void {
    if (seqLen + k > this.limits.maxSeqLen) throw new ReplayRoomError(`${this.type} (slot ${state.slot})`, seqLen, k, this.limits.maxSeqLen);
  }

  syncReplayedStep(state: AttentionState, seqLen: number, k: number): void {
    if (state.length < seqLen) {
      throw new ReplaySyncError(`${this.type} (slot ${state.slot}): host length ${state.length} is behind the sequence length ${seqLen}; a step ran without its bookkeeping`);
    }
    state.length = seqLen + k;
  }

  forward(step: LayerStep<AttentionState>): void {
    this.#alive('forward');
    const { host, batch, rows, stream, gpu, tables, phase } = step;
    if (rows > this.limits.maxRows) throw new InvalidArgumentError(`attention: a step of ${rows} rows exceeds limits.maxRows (${this.limits.maxRows})`);
    const cache = this.kvCache();
    if (!cache) throw new InvalidArgumentError(`attention: a ${phase} step before kvBind; run the layer through a StepDriver, which binds the page pool`);
    if (phase !== 'prefill' && rows > this.#decodeRows) {
      throw new InvalidArgumentError(`attention: a ${phase} step of ${rows} rows exceeds limits.maxBatch × limits.maxK (${this.#decodeRows})`);
    }
    // Every check before the first launch (the driver gave every sequence the pages of its rows).
    for (let p = 0; p < batch; p++) {
      const state = host.states[p];
      if (state) this.checkReplayRoom(state, host.seqLens[p]!, host.rowStarts[p + 1]! - host.rowStarts[p]!);
    }
    const o = this.options;
    const b = this.#b;
    const d = o.headDim;
    const dtype = this.precision.rows;
    const common = {
      qkv: b.qkv, kCache: cache.k, vCache: cache.v, blockTable: cache.binding.blockTable,
      slots: tables.slots, rowStarts: tables.rowStarts, positions: tables.positions,
      batch, heads: o.heads, kvHeads: o.kvHeads, headDim: d, pageSize: cache.binding.pageSize, maxPages: cache.binding.pagesPerSeq, gated: o.gated ? 1 : 0,
      dtype: FLOAT_DTYPE_CODE[dtype], ownKv: o.kvSource ? 0 : 1,
    };
    this.#qkvW.run(gpu, { m: rows, x: step.input, y: b.qkv, xDtype: dtype, yDtype: dtype, stream });
    gpu.launch(this.#kernels.prep, prepLaunch(rows, o.heads, o.kvHeads, d, !o.kvSource, stream), {
      ...common, q: b.q, qNorm: b.qNorm, kNorm: b.kNorm, cos: b.cos, sin: b.sin,
      rotaryDim: o.rotaryDim, maxPositions: this.limits.maxSeqLen, eps: o.eps, normOffset: o.normOffset,
      roundNormalized: (o.roundNormalized ?? o.normOffset === 0) ? 1 : 0, vNorm: o.vNorm ? 1 : 0,
    });
    const attend = { ...common, q: b.q, out: b.attn, scale: o.scale ?? 1 / Math.sqrt(d), window: o.window ?? 0 };
    if (prefillOnTensorCores(this.#kernels, phase, d)) {
      gpu.launch(this.#kernels.prefill!, attnPrefillLaunch(rows, batch, o.heads, d, floatBytes(dtype), gpu.device.computeCapability, stream), attend);
    } else {
      const chunks = this.#partials ? keyChunks(phase, this.limits.maxSeqLen) : 1;
      const core = { ...attend, chunks, partials: chunks > 1 ? this.#partials!.ptr : 0n };
      if (decodeOnTensorCores(this.#kernels, phase, d)) {
        gpu.launch(this.#kernels.decode!, attnDecodeLaunch(rows, o.kvHeads, d, floatBytes(dtype), chunks, gpu.device.multiprocessors, stream), core);
      } else {
        gpu.launch(this.#kernels.core, coreLaunch(rows, o.kvHeads, d, floatBytes(dtype), chunks, gpu.device.multiprocessors, stream), core);
      }
      if (chunks > 1) gpu.launch(this.#kernels.combine, combineLaunch(rows, o.heads, stream), core);
    }
    runLinear(gpu, { m: rows, x: b.attn, w: this.#oW, y: step.output, xDtype: dtype, yDtype: dtype, stream });
    for (let p = 0; p < batch; p++) {
      const state = host.states[p];
      if (state) state.length = host.seqLens[p]! + host.rowStarts[p + 1]! - host.rowStarts[p]!;
    }
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#partials?.release();
    this.#rope.release();
    this.#memory.free();
  }

  #alive(where: string): void {
    if (this.#disposed) throw new InvalidArgumentError(`attention: ${where} on a disposed layer`);
  }
}
