import {
  F32_PRECISION,
  FLOAT_DTYPE_CODE,
  InvalidArgumentError,
  ReplayRoomError,
  ReplaySyncError,
  floatBytes,
  runLinear,
  uploadLinear,
  type CreateLayerContext,
  type DevicePtr,
  type GpuBackend,
  type KvPageBinding,
  type LayerLimits,
  type LayerState,
  type LayerStep,
  type LinearWeight,
  type Precision,
  type Stream,
  type StepTables,
  type TransformerLayer,
} from '@metrale/core';
import { dsaGeometry, INDEX_DTYPE_CODE, KV_DTYPE_CODE, readDsaConfig, type DsaConfig, type DsaGeometry } from './dsa-config.js';
import {
  indexAppendKernel, indexScoreKernel, mlaAppendKernel, poolAppendKernel, qRopeKernel, ringStoreKernel, sparseAttnKernel, topkKernel,
} from './dsa-kernels.js';
import { indexScoreLaunch, rowLaunch, sparseAttnLaunch, topkLaunch } from './dsa-launch.js';
import { runSegments, uploadSegments, type LinearSegment } from './dsa-linear-segments.js';
import { elementBytes, ropeInvFreq } from './dsa-numerics.js';
import { loadDsaWeights } from './dsa-weights.js';

/** Host bookkeeping of one sequence: how many rows this layer's caches hold for it. */
export interface DsaState extends LayerState {
  readonly slot: number;
  /** Rows written into the slot's caches (ahead of the committed length after a verify, until the next sync). */
  length: number;
}

/** Rows of prefill scored per `dsa.index_score` / `dsa.topk` launch (bounds the score buffer). */
export const PREFILL_SCORE_ROWS = 64;
/**
 * The score buffer's size at most, unless PREFILL_SCORE_ROWS rows need more: a decode or verify
 * step scores all its rows in one launch while they fit, in blocks past that (long contexts), so
 * the buffer never grows with batch × context.
 */
export const SCORE_BUFFER_BYTES = 64 * 2 ** 20;

/** Where a shared layer reads its selection: the previous full layer's buffers. */
export interface DsaSelection {
  /** i32[maxRows][selWidth]: selected token positions per row of the current step, ascending. */
  readonly sel: DevicePtr;
  /** i32[maxRows]: how many of a row's selWidth entries are valid. */
  readonly selCount: DevicePtr;
  readonly selWidth: number;
  readonly maxRows: number;
}

interface Buffers {
  readonly wa: readonly LinearSegment[];
  readonly wb: readonly LinearSegment[];
  /** kv_b_proj in the rows' type (read per head by the absorbed GEMMs). */
  readonly kvb: LinearWeight;
  readonly wo: LinearWeight;
  readonly qaNorm: DevicePtr;
  readonly kvaNorm: DevicePtr;
  readonly kNormWeight: DevicePtr;
  readonly kNormBias: DevicePtr;
  readonly ape: DevicePtr;
  readonly invFreq: DevicePtr;
  /** glm5_next: f32 [maxSeqs][ringLen][2·dI]. */
  readonly ring: DevicePtr;
  readonly xa: DevicePtr;
  readonly qr: DevicePtr;
  readonly qb: DevicePtr;
  readonly qlat: DevicePtr;
  readonly olat: DevicePtr;
  readonly ov: DevicePtr;
  readonly scores: DevicePtr;
  readonly sel: DevicePtr;
  readonly selCount: DevicePtr;
}

/** The caches, in pages of the model's shared pool (KERNELS.md, paged caches). */
interface PagedCaches {
  readonly binding: KvPageBinding;
  /** [pages][pageSize][kvLora + rope], kvDtype. */
  readonly kvCache: DevicePtr;
  /** Token keys [pages][pageSize][dI] (glm_moe_dsa) or pool keys [pages][pageSize / kpool][dI] (glm5_next), idxDtype. */
  readonly keys: DevicePtr;
  /** f32 per key row, fp8 only. */
  readonly keyScales: DevicePtr;
  /** Key rows per page: pageSize, or pageSize / kpool. */
  readonly keyPageRows: number;
}

/** What the last forward of a full layer ran, so a shared layer can check it reads this step's selection. */
interface StepStamp {
  readonly tables: StepTables;
  readonly phase: string;
  readonly batch: number;
  readonly rows: number;
}

export interface DsaLayerOptions {
  /** For a 'shared' layer: the full layer whose selection it reuses (the previous full DSA layer of the model). */
  readonly selectionSource?: DsaLayer;
}

/**
 * One attention layer of GLM-5 (`glm_moe_dsa`) or GLM-5.3 (`glm5_next`): MLA with a per-sequence
 * latent cache, attention restricted to the lightning indexer's top-k, the indexer's key (or pool)
 * cache, and host-tracked cache lengths with the room check and the replay sync. Rows of
 * [hidden] in and out in `precision.rows` (f32 without a precision). A 'shared' layer has no
 * indexer: it reuses the selection its full layer computed earlier in the same step. Buffers and
 * kernels: KERNELS.md.
 */
export class DsaLayer implements TransformerLayer<DsaState> {
  readonly type = 'dsa';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly config: DsaConfig;
  readonly geometry: DsaGeometry;
  readonly limits: LayerLimits;
  /** The data path: rows and row-typed scratch in `rows`, Linear weights in `rows` or FP8. */
  readonly precision: Precision;
  /** Positions per slot in the caches (limits.maxSeqLen). */
  readonly capacity: number;
  /** Key rows per slot in the indexer cache: capacity (tokens) or ⌊capacity / kpool⌋ (pools). */
  readonly keyCapacity: number;
  /** glm5_next: entries per slot of the ring of recent keys and gate logits (maxK + kpool − 1). */
  readonly ringLen: number;
  /** Rows the score buffer holds (one launch of dsa.index_score / dsa.topk). */
  readonly scoreRows: number;
  readonly #gpu: GpuBackend;
  readonly #allocations: DevicePtr[] = [];
  readonly #b: Buffers;
  readonly #source: DsaLayer | undefined;
  readonly #states = new Set<DsaState>();
  #caches: PagedCaches | undefined;
  #stamp: StepStamp | undefined;
  #disposed = false;

  constructor(context: CreateLayerContext, options: DsaLayerOptions = {}) {
    // Config, limits and every tensor are checked before anything touches the device.
    const precision = context.precision ?? F32_PRECISION;
    if (!Object.hasOwn(FLOAT_DTYPE_CODE, precision.rows)) throw new InvalidArgumentError(`dsa: precision.rows must be 'f32', 'bf16' or 'f16', got ${String(precision.rows)}`);
    if (precision.fp8Weights && precision.rows === 'f32') {
      throw new InvalidArgumentError(`dsa: FP8 weights multiply bf16 or f16 rows; use precision { rows: 'bf16', fp8Weights: true } or dequantized weights with f32 rows`);
    }
    const cfg = readDsaConfig(context.config, context.layerIndex, precision.rows);
    const limits = context.limits;
    for (const key of ['maxSeqs', 'maxSeqLen', 'maxBatch', 'maxK', 'maxRows'] as const) {
      if (!Number.isSafeInteger(limits[key]) || limits[key] < 1) throw new InvalidArgumentError(`dsa: limits.${key} must be a positive integer, got ${limits[key]}`);
    }
    if (cfg.topk > limits.maxSeqLen) {
      throw new InvalidArgumentError(
        `dsa: index_topk (${cfg.topk}) is larger than the cache (limits.maxSeqLen = ${limits.maxSeqLen} positions per sequence); ` +
          `create the layer with maxSeqLen ≥ ${cfg.topk}, or use a config with a smaller index_topk`,
      );
    }
    const geo = dsaGeometry(cfg);
    const source = options.selectionSource;
    if (geo.full && source) throw new InvalidArgumentError(`dsa: layer ${cfg.layerIndex} is a 'full' indexer layer; it computes its own selection and takes no selection source`);
    if (!geo.full) {
      if (!source) {
        throw new InvalidArgumentError(
          `dsa: layer ${cfg.layerIndex} is 'shared': it reuses the selection of layer ${cfg.selectionSource}; create that layer first, ` +
            `through the same plugin with the same gpu and config object (or pass it as selectionSource)`,
        );
      }
      source.#checkSource(cfg, limits);
    }
    const w = loadDsaWeights(context.weights, cfg, precision);
    this.config = cfg;
    this.precision = precision;
    this.geometry = geo;
    this.limits = limits;
    this.capacity = limits.maxSeqLen;
    this.keyCapacity = Math.max(1, Math.floor(this.capacity / cfg.kpool));
    this.ringLen = limits.maxK + cfg.kpool - 1;
    const fitting = Math.floor(SCORE_BUFFER_BYTES / (4 * this.keyCapacity));
    this.scoreRows = Math.min(limits.maxRows, Math.max(Math.min(limits.maxBatch * limits.maxK, fitting), PREFILL_SCORE_ROWS));
    this.#gpu = context.gpu;
    this.#source = source;
    const rb = floatBytes(precision.rows);
    this.inputRowBytes = this.outputRowBytes = rb * cfg.hidden;

    const gpu = this.#gpu;
    const { maxSeqs, maxRows } = limits;
    try {
      const upload = (data: Float32Array): DevicePtr => {
        const p = this.#alloc(Math.max(data.byteLength, 4));
        if (data.byteLength > 0) gpu.upload(p, data);
        return p;
      };
      const full = geo.full;
      const alloc = (bytes: number): DevicePtr => this.#alloc(bytes);
      this.#b = {
        wa: uploadSegments(gpu, alloc, w.wa), wb: uploadSegments(gpu, alloc, w.wb),
        kvb: uploadLinear(gpu, alloc, w.kvb), wo: uploadLinear(gpu, alloc, w.wo),
        qaNorm: upload(w.qaNorm), kvaNorm: upload(w.kvaNorm),
        kNormWeight: upload(w.kNormWeight), kNormBias: upload(w.kNormBias), ape: upload(w.ape),
        invFreq: upload(cfg.rope > 0 ? ropeInvFreq(cfg.ropeTheta, cfg.rope) : new Float32Array(0)),
        ring: full && geo.pooled ? this.#alloc(maxSeqs * this.ringLen * 2 * cfg.dI * 4) : 0n,
        // xa (read by the norms, the key LayerNorm, the pool softmax and as head weights) and qlat
        // (the logits' queries) are f32; the rest is in the rows' type, as the GEMMs read it.
        xa: this.#alloc(4 * maxRows * geo.xaWidth),
        qr: this.#alloc(rb * maxRows * cfg.qLora),
        qb: this.#alloc(rb * maxRows * geo.qbWidth),
        qlat: this.#alloc(4 * maxRows * cfg.heads * geo.latWidth),
        olat: this.#alloc(rb * maxRows * cfg.heads * cfg.kvLora),
        ov: this.#alloc(rb * maxRows * cfg.heads * cfg.v),
        scores: full ? this.#alloc(4 * this.scoreRows * this.keyCapacity) : 0n,
        sel: full ? this.#alloc(4 * maxRows * geo.selWidth) : 0n,
        selCount: full ? this.#alloc(4 * maxRows) : 0n,
      };
      gpu.synchronize();
    } catch (error) {
      this.dispose();
      throw error;
    }
  }

  #alloc(bytes: number): DevicePtr {
    const p = this.#gpu.alloc(Math.max(bytes, 4));
    this.#allocations.push(p);
    return p;
  }

  #release(...ptrs: readonly DevicePtr[]): void {
    for (const p of ptrs) {
      const i = this.#allocations.indexOf(p);
      if (p === 0n || i < 0) continue;
      this.#allocations.splice(i, 1);
      this.#gpu.free(p);
    }
  }

  /** Checks that a shared layer of config `cfg` may read this layer's selection. */
  #checkSource(cfg: DsaConfig, limits: LayerLimits): void {
    const mine = this.config;
    const where = `dsa: shared layer ${cfg.layerIndex} cannot reuse the selection of layer ${mine.layerIndex}`;
    if (this.#disposed) throw new InvalidArgumentError(`${where}: that layer was disposed`);
    if (!this.geometry.full) throw new InvalidArgumentError(`${where}: that layer is 'shared' itself`);
    if (cfg.selectionSource !== undefined && cfg.selectionSource !== mine.layerIndex) {
      throw new InvalidArgumentError(`${where}: indexer_types make layer ${cfg.selectionSource} its source`);
    }
    if (mine.topk !== cfg.topk || mine.kpool !== cfg.kpool) throw new InvalidArgumentError(`${where}: index_topk / index_kpool differ`);
    for (const key of ['maxSeqs', 'maxSeqLen', 'maxBatch', 'maxK', 'maxRows'] as const) {
      if (this.limits[key] !== limits[key]) throw new InvalidArgumentError(`${where}: limits.${key} is ${limits[key]} here but ${this.limits[key]} there; create both with the same limits`);
    }
  }

  /** The selection buffers a shared layer reads (fixed addresses for the layer's lifetime). */
  get selection(): DsaSelection {
    if (!this.geometry.full) return this.#source!.selection;
    return { sel: this.#b.sel, selCount: this.#b.selCount, selWidth: this.geometry.selWidth, maxRows: this.limits.maxRows };
  }

  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Device addresses of the caches (0n before `kvBind`) and of the last step's indexer scratch,
   * for tests and benchmarks (layouts: KERNELS.md). Not part of the stable API.
   */
  debugBuffers(): {
    readonly kvCache: DevicePtr; readonly keys: DevicePtr; readonly keyScales: DevicePtr; readonly ring: DevicePtr;
    readonly scores: DevicePtr; readonly scoreStride: number; readonly sel: DevicePtr; readonly selCount: DevicePtr; readonly selWidth: number;
  } {
    const b = this.#b;
    const c = this.#caches;
    const s = this.selection;
    return {
      kvCache: c?.kvCache ?? 0n, keys: c?.keys ?? 0n, keyScales: c?.keyScales ?? 0n, ring: b.ring,
      scores: b.scores, scoreStride: this.keyCapacity, sel: s.sel, selCount: s.selCount, selWidth: s.selWidth,
    };
  }

  /**
   * Bytes of one page of `pageSize` positions: the latent cache rows, and for a full layer its
   * indexer keys (one per position, or per pool of kpool positions) with their fp8 scales.
   */
  kvPageBytes(pageSize: number): number {
    const cfg = this.config;
    if (pageSize % cfg.kpool !== 0) {
      throw new InvalidArgumentError(`dsa: pages of ${pageSize} positions do not hold whole pools of index_kpool = ${cfg.kpool}; use a page size that is a multiple of ${cfg.kpool}`);
    }
    const lat = pageSize * this.geometry.latWidth * elementBytes(KV_DTYPE_CODE[cfg.kvCacheDtype]);
    if (!this.geometry.full) return lat;
    const keyRows = pageSize / cfg.kpool;
    return lat + keyRows * (cfg.dI * elementBytes(INDEX_DTYPE_CODE[cfg.indexCacheDtype]) + (cfg.indexCacheDtype === 'fp8' ? 4 : 0));
  }

  kvBind(binding: KvPageBinding): void {
    this.#alive('kvBind');
    this.kvPageBytes(binding.pageSize);
    // Pages of an earlier binding still here (its driver not disposed) go first.
    this.kvUnbind();
    const cfg = this.config;
    const { pages, pageSize } = binding;
    const keyPageRows = pageSize / cfg.kpool;
    const full = this.geometry.full;
    const taken: DevicePtr[] = [];
    const alloc = (bytes: number): DevicePtr => {
      const p = this.#alloc(bytes);
      taken.push(p);
      return p;
    };
    try {
      this.#caches = {
        binding, keyPageRows,
        kvCache: alloc(pages * pageSize * this.geometry.latWidth * elementBytes(KV_DTYPE_CODE[cfg.kvCacheDtype])),
        keys: full ? alloc(pages * keyPageRows * cfg.dI * elementBytes(INDEX_DTYPE_CODE[cfg.indexCacheDtype])) : 0n,
        keyScales: full && cfg.indexCacheDtype === 'fp8' ? alloc(pages * keyPageRows * 4) : 0n,
      };
    } catch (error) {
      this.#release(...taken);
      throw error;
    }
  }

  /** The driver that bound the pool is gone: its pages go back; a later `kvBind` binds afresh. */
  kvUnbind(): void {
    const c = this.#caches;
    if (!c || this.#disposed) return;
    this.#caches = undefined;
    this.#release(c.kvCache, c.keys, c.keyScales);
  }

  /**
   * The sequence's first `length` positions are in shared pages already: latent rows and keys
   * (or whole pools: `length` is a multiple of the page size, so of kpool) of the same tokens.
   * The ring is not needed there: the next pool's members all come after `length`.
   */
  resumeAt(state: DsaState, length: number, _snapshot: number | undefined, _stream: Stream): void {
    if (length % this.config.kpool !== 0) throw new InvalidArgumentError(`dsa: a sequence resumes at a whole pool (kpool ${this.config.kpool}), not at length ${length}`);
    state.length = length;
  }

  openState(slot: number): DsaState {
    this.#alive('openState');
    if (!Number.isInteger(slot) || slot < 0 || slot >= this.limits.maxSeqs) {
      throw new InvalidArgumentError(`dsa: slot must be in 0..${this.limits.maxSeqs - 1}, got ${slot}`);
    }
    // Positions past `length` are never read before this sequence writes them: no clearing needed.
    const state: DsaState = { slot, length: 0 };
    this.#states.add(state);
    return state;
  }

  closeState(state: DsaState): void {
    this.#states.delete(state);
  }

  inspectState(state: DsaState): unknown {
    return { length: state.length };
  }

  /** Rows held in the caches across all open sequences (host-tracked: no device read). */
  occupancy(): number {
    let rows = 0;
    for (const s of this.#states) rows += s.length;
    return rows;
  }

  checkReplayRoom(state: DsaState, seqLen: number, k: number): void {
    if (seqLen + k > this.capacity) throw new ReplayRoomError(`dsa layer ${this.config.layerIndex} (slot ${state.slot})`, seqLen, k, this.capacity);
  }

  syncReplayedStep(state: DsaState, seqLen: number, k: number): void {
    if (state.length < seqLen) {
      throw new ReplaySyncError(
        `dsa layer ${this.config.layerIndex} (slot ${state.slot}): host length ${state.length} is behind the sequence length ${seqLen}; ` +
          `a step ran without this layer's bookkeeping, so its caches may miss rows`,
      );
    }
    // Rows past seqLen are the rejected rows of the last verify: rewind, then count this step's rows.
    state.length = seqLen + k;
  }

  forward(step: LayerStep<DsaState>): void {
    this.#alive('forward');
    const { phase, batch, rows, host } = step;
    const cfg = this.config;
    if (rows > this.limits.maxRows) throw new InvalidArgumentError(`dsa: a step of ${rows} rows exceeds limits.maxRows (${this.limits.maxRows})`);
    if (batch > this.limits.maxBatch) {
      throw new InvalidArgumentError(`dsa: a ${phase} step of ${batch} batch positions exceeds limits (maxBatch ${this.limits.maxBatch})`);
    }
    if (phase !== 'prefill' && step.k > this.limits.maxK) {
      throw new InvalidArgumentError(`dsa: a ${phase} of k = ${step.k} rows per sequence exceeds limits.maxK (${this.limits.maxK})`);
    }
    if (!this.#caches) throw new InvalidArgumentError(`dsa layer ${cfg.layerIndex}: a ${phase} step before kvBind; run the layer through a StepDriver, which binds the page pool`);
    // Refuse before launching anything, as the room check does for replays.
    for (let p = 0; p < batch; p++) {
      const state = host.states[p];
      if (!state) continue;
      this.checkReplayRoom(state, host.seqLens[p]!, host.rowStarts[p + 1]! - host.rowStarts[p]!);
    }
    if (!this.geometry.full) {
      const source = this.#source!;
      if (source.#disposed) throw new InvalidArgumentError(`dsa: shared layer ${cfg.layerIndex} reads the selection of layer ${source.config.layerIndex}, which was disposed`);
      const s = source.#stamp;
      if (!s || s.tables !== step.tables || s.phase !== phase || s.batch !== batch || s.rows !== rows) {
        throw new InvalidArgumentError(
          `dsa: shared layer ${cfg.layerIndex} runs a ${phase} step that layer ${source.config.layerIndex} (its selection source) did not run first; ` +
            `put both in the same layer stack, the full layer before the shared one`,
        );
      }
    }
    this.#launch(step);
    this.#stamp = { tables: step.tables, phase, batch, rows };
    for (let p = 0; p < batch; p++) {
      const state = host.states[p];
      // Set, not increment: a failed capture followed by the eager run of the same step lands on the same length.
      if (state) state.length = host.seqLens[p]! + host.rowStarts[p + 1]! - host.rowStarts[p]!;
    }
  }

  /** The kernels and GEMMs of one step; every per-step value is read from the step's device tables. */
  #launch(step: LayerStep<DsaState>): void {
    const { gpu, stream, batch, rows, tables } = step;
    const cfg = this.config;
    const geo = this.geometry;
    const b = this.#b;
    const c = this.#caches!;
    const tokenPages = { blockTable: c.binding.blockTable, pagesPerSeq: c.binding.pagesPerSeq, pageRows: c.binding.pageSize };
    const keyPages = { ...tokenPages, pageRows: c.keyPageRows };
    const { heads: H, qLora, kvLora, nope, rope, v, dI, idxHeads } = cfg;
    const lat = geo.latWidth;
    const kvDtype = KV_DTYPE_CODE[cfg.kvCacheDtype];
    const idxDtype = INDEX_DTYPE_CODE[cfg.indexCacheDtype];
    const dt = this.precision.rows;
    const rowCode = FLOAT_DTYPE_CODE[dt];
    const rb = floatBytes(dt);
    const t = { slots: tables.slots, rowStarts: tables.rowStarts, positions: tables.positions };
    const perRow = rowLaunch(rows, stream);

    // 1. Every projection of x: xa = x · Waᵀ, in f32 (the norms, the indexer key and its head weights read it).
    runSegments(gpu, { m: rows, x: step.input, segments: b.wa, y: b.xa, width: geo.xaWidth, xDtype: dt, yDtype: 'f32', stream });
    // 2. Latent norms (qr in the rows' type), RoPE of k_rope, MLA cache append.
    gpu.launch(mlaAppendKernel, perRow, {
      xa: b.xa, qr: b.qr, kvCache: c.kvCache, qaNorm: b.qaNorm, kvaNorm: b.kvaNorm, invFreq: b.invFreq, ...t,
      batch, xaWidth: geo.xaWidth, qLora, kvLora, rope, ropeInterleave: cfg.ropeInterleave ? 1 : 0, kvDtype, qrDtype: rowCode,
      ...tokenPages, eps: cfg.mlaEps,
    });
    // 3. Indexer keys (full layers): token keys into the cache, or pool keys via xa and the ring.
    if (geo.full) {
      gpu.launch(indexAppendKernel, perRow, {
        xa: b.xa, idxCache: geo.pooled ? 0n : c.keys, idxScales: geo.pooled ? 0n : c.keyScales,
        kNormWeight: b.kNormWeight, kNormBias: b.kNormBias, invFreq: b.invFreq, ...t,
        batch, xaWidth: geo.xaWidth, kOff: geo.kOff, dI, idxRope: rope, ropeInterleave: cfg.indexerRopeInterleave ? 1 : 0, idxDtype,
        ...tokenPages, mode: geo.pooled ? 1 : 0, eps: cfg.lnEps,
      });
      if (geo.pooled) {
        const pool = { xa: b.xa, ring: b.ring, xaWidth: geo.xaWidth, kOff: geo.kOff, gOff: geo.gOff, dI, ringLen: this.ringLen };
        gpu.launch(poolAppendKernel, perRow, {
          ...pool, poolCache: c.keys, poolScales: c.keyScales, ape: b.ape,
          slots: tables.slots, seqLens: tables.seqLens, rowStarts: tables.rowStarts, positions: tables.positions,
          batch, kpool: cfg.kpool, idxDtype, ...keyPages,
        });
        gpu.launch(ringStoreKernel, perRow, { ...pool, ...t, batch });
      }
    }
    // 4. Queries: qb = qr · Wbᵀ (MLA heads, then indexer heads), in the rows' type.
    runSegments(gpu, { m: rows, x: b.qr, segments: b.wb, y: b.qb, width: geo.qbWidth, xDtype: dt, yDtype: dt, stream });
    // 5. Absorb W_UK into the MLA query: qlat[r][h][0:kvLora] = q_nope[r][h] · W_UK[h] (per head, f32 out).
    if (nope > 0) {
      for (let h = 0; h < H; h++) {
        gpu.gemm({
          m: rows, n: kvLora, k: nope, dtype: dt, outDtype: 'f32', stream,
          a: b.qb + BigInt(rb * h * (nope + rope)), lda: geo.qbWidth,
          b: b.kvb.data + BigInt(rb * h * (nope + v) * kvLora), ldb: kvLora,
          c: b.qlat + BigInt(4 * h * lat), ldc: H * lat,
        });
      }
    } else {
      gpu.memsetAsync(b.qlat, 0, 4 * rows * H * lat, stream);
    }
    // 6. RoPE of the query rope parts (MLA into qlat, indexer in place).
    if (rope > 0) {
      gpu.launch(qRopeKernel, perRow, {
        qb: b.qb, qlat: b.qlat, invFreq: b.invFreq, ...t,
        batch, qbWidth: geo.qbWidth, heads: H, nope, rope, kvLora,
        idxHeads: geo.full ? idxHeads : 0, dI, idxRope: geo.full ? rope : 0,
        ropeInterleave: cfg.ropeInterleave ? 1 : 0, idxRopeInterleave: cfg.indexerRopeInterleave ? 1 : 0, qbDtype: rowCode,
      });
    }
    // 7. Selection (full layers): score every candidate once per sequence, then top-k per row.
    //    Blocks of scoreRows rows: a decode or verify step is one block unless long contexts shrank the buffer.
    if (geo.full) {
      for (let rowBase = 0; rowBase < rows; rowBase += this.scoreRows) {
        const rowCount = Math.min(this.scoreRows, rows - rowBase);
        gpu.launch(indexScoreKernel, indexScoreLaunch(this.keyCapacity, batch, { dI, idxHeads, idxDtype, multiprocessors: gpu.device.multiprocessors }, stream), {
          qb: b.qb, xa: b.xa, keys: c.keys, keyScales: c.keyScales, scores: b.scores, ...t,
          batch, rowBase, rowCount, qbWidth: geo.qbWidth, qIOff: geo.qIOff, xaWidth: geo.xaWidth, wOff: geo.wOff,
          idxHeads, dI, kpool: cfg.kpool, ...keyPages, scoreStride: this.keyCapacity, idxDtype, qbDtype: rowCode,
          scale: cfg.indexScale,
        });
        gpu.launch(topkKernel, topkLaunch(rowCount, this.keyCapacity, stream), {
          scores: b.scores, sel: b.sel, selCount: b.selCount, ...t,
          batch, rowBase, rowCount, scoreStride: this.keyCapacity, selWidth: geo.selWidth, topk: cfg.topk, kpool: cfg.kpool,
        });
      }
    }
    // 8. Sparse attention over the selected tokens (a shared layer reads its full layer's selection).
    const selection = this.selection;
    const attnShape = { heads: H, kvLora, rope, selWidth: selection.selWidth, kvDtype };
    gpu.launch(sparseAttnKernel, sparseAttnLaunch(rows, attnShape, stream, gpu.device.computeCapability), {
      qlat: b.qlat, kvCache: c.kvCache, sel: selection.sel, selCount: selection.selCount, olat: b.olat, ...t,
      batch, heads: H, kvLora, rope, selWidth: selection.selWidth, ...tokenPages, kvDtype, olatDtype: rowCode, scale: cfg.softmaxScale,
    });
    // 9. Values: ov[r][h] = olat[r][h] · W_UV[h]ᵀ (per head), then the output projection, all in the rows' type.
    for (let h = 0; h < H; h++) {
      gpu.gemm({
        m: rows, n: v, k: kvLora, dtype: dt, stream, transB: true,
        a: b.olat + BigInt(rb * h * kvLora), lda: H * kvLora,
        b: b.kvb.data + BigInt(rb * (h * (nope + v) + nope) * kvLora), ldb: kvLora,
        c: b.ov + BigInt(rb * h * v), ldc: H * v,
      });
    }
    runLinear(gpu, { m: rows, x: b.ov, w: b.wo, y: step.output, xDtype: dt, yDtype: dt, stream });
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const p of this.#allocations.splice(0)) this.#gpu.free(p);
  }

  #alive(where: string): void {
    if (this.#disposed) throw new InvalidArgumentError(`dsa: ${where} on a disposed layer`);
  }
}
