import {
  InvalidArgumentError,
  WeightsError,
  floatBytes,
  type DevicePtr,
  type FloatDtype,
  type GpuBackend,
  type LayerLimits,
  type Stream,
} from '@metrale/core';
import { asRowValues } from './gemma3n-stateless.js';
import type { PleConfig } from './ple-config.js';
import { mapSetKernel } from './ple-kernels.js';
import { DTYPE_CODE, PLE_TENSORS, STORAGE_BYTES, readProjectionNorm, type PleModelTensors, type StorageDtype } from './ple-weights.js';
import { StagingRing } from './staging.js';
import type { TensorReader } from './tensor-reader.js';

/** Options of the slot cache (and so of every layer that shares it). */
export interface PleCacheOptions {
  /**
   * Device slots, each holding one table row (L·P values in the table's dtype). Default:
   * max(4096, 2 · maxBatch · maxK), at most vocab_size_per_layer_input. At least
   * min(maxBatch · maxK, vocab_size_per_layer_input): every row of one step must fit.
   */
  readonly slotCapacity?: number;
  /** Chunks of pinned staging for missed rows, max(maxK, 8) rows each. Default max(8, 2 · maxBatch). */
  readonly stagingChunks?: number;
}

/** What the cache has done since it was created. Bytes count host → device copies made outside any graph. */
export interface PleCacheStats {
  readonly capacity: number;
  /** Slots holding a row. */
  readonly occupied: number;
  /** Bytes of one table row (L·P · element size). */
  readonly rowBytes: number;
  /** Lookups (prestage and prefill) that found the row on the device. */
  readonly hits: number;
  /** Lookups that uploaded the row. */
  readonly misses: number;
  /** Rows dropped to make room (least recently used, never one the current step uses). */
  readonly evictions: number;
  /** Table bytes uploaded: misses × rowBytes. */
  readonly uploadedRowBytes: number;
  /** Host → device copies of table rows (consecutive slots are copied together). */
  readonly rowCopies: number;
  /** Bytes of prefill row → slot indices uploaded (decode and verify upload none). */
  readonly indexBytes: number;
  /** Entries of the device token → slot map set by prestage (`ple.map-set`, 4 per launch). */
  readonly mapUpdates: number;
  /** decodePrestage calls that did the work for their sequence (the first layer of a step). */
  readonly prestageCalls: number;
  /** Rows those calls looked up. */
  readonly prestageRows: number;
  /** decodePrestage calls of further layers sharing the cache, which only took the staged rows. */
  readonly prestageClaims: number;
  /** Prefill rows looked up (hits and misses of prefill are part of hits and misses). */
  readonly prefillRows: number;
  /** Times the host waited for the device before reusing a staging chunk. */
  readonly stagingWaits: number;
}

/** The device buffers kernels read, fixed for the cache's lifetime. */
export interface PleDeviceBuffers {
  /** [capacity][L·P] table rows in the table's dtype. */
  readonly slotRows: DevicePtr;
  /** i32[vocab_size_per_layer_input]: token → slot, current for every token prestage staged. */
  readonly map: DevicePtr;
  /** [vocab_size][D] embed_tokens in its dtype. */
  readonly embed: DevicePtr;
  /** f32[P]: per_layer_projection_norm.weight, its values rounded to the row type. */
  readonly projectionNorm: DevicePtr;
  /** Scratch shared by the layers (they run one after another on one stream), in the row type: [maxRows][D]. */
  readonly e: DevicePtr;
  /** [maxRows][P] each, in the row type. */
  readonly q: DevicePtr;
  readonly g: DevicePtr;
  readonly ple: DevicePtr;
  readonly h: DevicePtr;
  /** i32[maxRows]: prefill row → slot. */
  readonly rowSlots: DevicePtr;
}

/** Per-sequence state of one layer, as far as the cache is concerned. */
export interface PrestageClaim {
  readonly slot: number;
  /** The cache round of this sequence slot this layer last took part in. */
  seen: number;
  /** Prestaged rows not yet consumed by a forward or a replay. */
  armed: boolean;
}

const NONE = -1;

/**
 * The device slot cache of table rows, shared by every PLE layer of a model (one per backend and
 * table): the table stays on the host; a row goes to the device when a token first needs it.
 *
 * Host side: `slotOf[id]` (a direct-address hash: the table's row index → slot), an LRU list over
 * slots (intrusive, O(1) touch), and `devSlotOf[id]`, what the device map holds. Device side: the
 * slots' rows and `map[id]`, which decode and verify kernels read with the step's token ids, so a
 * slot hit needs no device call at all and one captured graph serves any batch composition.
 *
 * A slot staged since the last forward (the step in flight) is pinned: eviction skips it. Rows
 * that earlier steps read are safe to overwrite because every upload is ordered after them on the
 * step's stream.
 */
export class PleSlotCache {
  readonly gpu: GpuBackend;
  readonly cfg: PleConfig;
  readonly limits: LayerLimits;
  readonly capacity: number;
  readonly tableDtype: StorageDtype;
  readonly embedDtype: StorageDtype;
  /** The layers' row type: of the scratch rows, and what the projection norm's values are rounded to. */
  readonly rows: FloatDtype;
  readonly rowBytes: number;
  readonly device: PleDeviceBuffers;
  readonly key: string | undefined;

  // Host hash and LRU.
  readonly #slotOf: Int32Array;
  readonly #devSlotOf: Int32Array;
  readonly #tokenOf: Int32Array;
  readonly #prev: Int32Array;
  readonly #next: Int32Array;
  readonly #pinEpoch: Float64Array;
  #head = NONE;
  #tail = NONE;
  #used = 0;
  #epoch = 1;

  // Per sequence slot: the cache's round (one per step that prestaged it) and what was staged.
  readonly #round: Int32Array;
  readonly #stagedTokens: Int32Array;
  readonly #stagedCount: Int32Array;

  readonly #table: { read(row: number, into: Uint8Array): void };
  readonly #staging: StagingRing;
  readonly #indexStaging: StagingRing;
  readonly #indexHost: Int32Array;
  readonly #allocations: DevicePtr[] = [];
  #refs = 0;
  #disposed = false;
  /** Rows per staging chunk: a prestage call's misses fit in one (k ≤ maxK). */
  get #chunkRows(): number {
    return Math.max(this.limits.maxK, 8);
  }
  readonly #onDispose: (() => void) | undefined;

  // Counters.
  #hits = 0;
  #misses = 0;
  #evictions = 0;
  #uploadedRowBytes = 0;
  #rowCopies = 0;
  #indexBytes = 0;
  #mapUpdates = 0;
  #prestageCalls = 0;
  #prestageRows = 0;
  #claims = 0;
  #prefillRows = 0;

  // A run of missed rows bound for consecutive slots, copied in one piece.
  #runSlot = NONE;
  #runOffset = 0;
  #runRows = 0;
  // Device map entries to set before the step's kernels: token, slot pairs.
  readonly #pairs: number[] = [];

  constructor(
    gpu: GpuBackend,
    cfg: PleConfig,
    limits: LayerLimits,
    reader: TensorReader,
    tensors: PleModelTensors,
    rows: FloatDtype,
    options: PleCacheOptions = {},
    key?: string,
    onDispose?: () => void,
  ) {
    this.gpu = gpu;
    this.cfg = cfg;
    this.limits = limits;
    this.rows = rows;
    this.key = key;
    this.#onDispose = onDispose;
    this.tableDtype = tensors.table.dtype;
    this.embedDtype = tensors.embed.dtype;
    this.rowBytes = cfg.rowElems * STORAGE_BYTES[this.tableDtype];
    const stepRows = limits.maxBatch * limits.maxK;
    const minimum = Math.min(stepRows, cfg.tableVocab);
    const capacity = options.slotCapacity ?? Math.min(cfg.tableVocab, Math.max(4096, 2 * stepRows));
    if (!Number.isSafeInteger(capacity) || capacity < minimum) {
      throw new InvalidArgumentError(
        `ple: slotCapacity must be an integer ≥ ${minimum} (maxBatch ${limits.maxBatch} × maxK ${limits.maxK}: every row of one step needs a slot), got ${capacity}`,
      );
    }
    this.capacity = Math.min(capacity, cfg.tableVocab);
    const chunks = options.stagingChunks ?? Math.max(8, 2 * limits.maxBatch);
    if (!Number.isSafeInteger(chunks) || chunks < 1) throw new InvalidArgumentError(`ple: stagingChunks must be a positive integer, got ${chunks}`);

    const Vp = cfg.tableVocab;
    this.#slotOf = new Int32Array(Vp).fill(NONE);
    this.#devSlotOf = new Int32Array(Vp).fill(NONE);
    this.#tokenOf = new Int32Array(this.capacity).fill(NONE);
    this.#prev = new Int32Array(this.capacity).fill(NONE);
    this.#next = new Int32Array(this.capacity).fill(NONE);
    this.#pinEpoch = new Float64Array(this.capacity);
    this.#round = new Int32Array(limits.maxSeqs);
    this.#stagedTokens = new Int32Array(limits.maxSeqs * limits.maxK);
    this.#stagedCount = new Int32Array(limits.maxSeqs);
    this.#indexHost = new Int32Array(limits.maxRows);

    // The table: rows read on demand, straight into pinned staging (a source without ranged
    // reads holds it whole; fine for small tables, refused for large ones).
    const name = PLE_TENSORS.table;
    if (!reader.ranged && tensors.table.byteLength > 2 ** 31) {
      throw new WeightsError(
        `tensor '${name}' is ${tensors.table.byteLength} bytes and the weight source reads tensors only whole; give the layer a source with ranged reads ` +
          `(core's SafetensorsFile, or rangedPrefix(file, prefix) from @metrale/layer-ple) so the table stays on disk`,
        reader.origin,
      );
    }
    this.#table = { read: reader.rowReader(name) };

    const D = cfg.hidden;
    const P = cfg.perLayer;
    const maxRows = limits.maxRows;
    let staging: StagingRing | undefined;
    let indexStaging: StagingRing | undefined;
    try {
      const alloc = (bytes: number): DevicePtr => {
        const p = gpu.alloc(Math.max(bytes, 4));
        this.#allocations.push(p);
        return p;
      };
      const embed = reader.whole(PLE_TENSORS.embed);
      const embedPtr = alloc(embed.data.byteLength);
      gpu.upload(embedPtr, embed.data);
      const normPtr = alloc(P * 4);
      gpu.upload(normPtr, asRowValues(readProjectionNorm(reader, tensors), rows));
      const map = alloc(Vp * 4);
      gpu.memsetAsync(map, 0xff, Vp * 4, gpu.defaultStream);
      this.device = Object.freeze({
        slotRows: alloc(this.capacity * this.rowBytes),
        map,
        embed: embedPtr,
        projectionNorm: normPtr,
        e: alloc(maxRows * D * floatBytes(rows)),
        q: alloc(maxRows * P * floatBytes(rows)),
        g: alloc(maxRows * P * floatBytes(rows)),
        ple: alloc(maxRows * P * floatBytes(rows)),
        h: alloc(maxRows * P * floatBytes(rows)),
        rowSlots: alloc(maxRows * 4),
      });
      staging = new StagingRing(gpu, chunks, this.#chunkRows * this.rowBytes);
      indexStaging = new StagingRing(gpu, 2, maxRows * 4);
      gpu.synchronize(gpu.defaultStream);
    } catch (error) {
      staging?.dispose();
      indexStaging?.dispose();
      for (const p of this.#allocations.splice(0)) gpu.free(p);
      throw error;
    }
    this.#staging = staging;
    this.#indexStaging = indexStaging;
  }

  // ---- lifetime ----

  attach(): void {
    if (this.#disposed) throw new InvalidArgumentError('ple: the slot cache was disposed');
    this.#refs++;
  }

  /** One layer is done with the cache; the last one frees it. */
  detach(): void {
    if (--this.#refs <= 0) this.dispose();
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#onDispose?.();
    this.#staging.dispose();
    this.#indexStaging.dispose();
    for (const p of this.#allocations.splice(0)) this.gpu.free(p);
  }

  get disposed(): boolean {
    return this.#disposed;
  }

  // ---- per-sequence rounds ----

  /** The round a new sequence in `slot` starts from: its first prestage starts the next one. */
  roundOf(slot: number): number {
    return this.#round[slot]!;
  }

  /**
   * decodePrestage for one layer and one sequence: the first layer to call it in a step does the
   * work (lookups, uploads of missed rows, device map entries) and starts a new round for the
   * sequence slot; every other layer sharing the cache takes the staged rows, after checking it
   * was given the same tokens. Both arm the claim. Throws before any change on a bad token.
   */
  prestage(claim: PrestageClaim, tokens: Int32Array, stream: Stream): void {
    const q = claim.slot;
    const k = tokens.length;
    const maxK = this.limits.maxK;
    if (claim.seen !== this.#round[q]) {
      // Another layer staged this step already.
      const base = q * maxK;
      let same = this.#stagedCount[q] === k;
      for (let r = 0; same && r < k; r++) same = this.#stagedTokens[base + r] === tokens[r];
      if (!same) {
        throw new InvalidArgumentError(
          `ple: sequence slot ${q} was prestaged with tokens [${Array.from(tokens).join(', ')}] by one layer and ` +
            `[${Array.from(this.#stagedTokens.subarray(base, base + this.#stagedCount[q]!)).join(', ')}] by another layer of the same table in one step; ` +
            'layers that share a slot cache must run in one driver (create them with share: false otherwise)',
        );
      }
      claim.seen = this.#round[q]!;
      claim.armed = true;
      this.#claims++;
      return;
    }
    if (k < 1 || k > maxK) throw new InvalidArgumentError(`ple: decodePrestage got ${k} tokens; a step has 1 to maxK (${maxK}) rows per sequence`);
    this.#validate(tokens, 0, k, 'decodePrestage');
    this.#prestageCalls++;
    this.#prestageRows += k;
    const base = q * maxK;
    const Vp = this.cfg.tableVocab;
    let chunk = NONE;
    let staged = 0;
    try {
      for (let r = 0; r < k; r++) {
        const t = tokens[r]!;
        const id = t < Vp ? t : 0;
        let s = this.#slotOf[id]!;
        if (s >= 0) {
          this.#hits++;
          this.#touch(s);
        } else {
          if (chunk === NONE) chunk = this.#staging.acquire();
          s = this.#miss(id, chunk + staged * this.rowBytes, stream);
          staged++;
        }
        this.#pinEpoch[s] = this.#epoch;
        if (this.#devSlotOf[id] !== s) {
          this.#devSlotOf[id] = s;
          this.#pairs.push(id, s);
        }
        this.#stagedTokens[base + r] = t;
      }
    } finally {
      // Also after a failed miss: what was uploaded is enqueued and its map entries set.
      this.#flushRun(stream);
      if (chunk !== NONE) this.#staging.release(chunk, stream);
      this.#flushMap(stream);
    }
    this.#stagedCount[q] = k;
    this.#round[q] = this.#round[q]! + 1;
    claim.seen = this.#round[q]!;
    claim.armed = true;
  }

  /** The step in flight has been enqueued (a forward or a replay ran): its slots may be evicted again. */
  closeEpoch(): void {
    this.#epoch++;
  }

  // ---- prefill ----

  /** Checks token ids against the vocabulary; names the first bad one. */
  validateTokens(tokens: Int32Array, first: number, count: number, where: string): void {
    this.#validate(tokens, first, count, where);
  }

  /**
   * Stages prefill rows [first, first + count) of `tokens` (count ≤ capacity): looks each up,
   * uploads missed rows, and uploads the row → slot indices to `device.rowSlots[0 .. count)`.
   * The slots stay pinned until `closeEpoch`.
   */
  stagePrefill(tokens: Int32Array, first: number, count: number, stream: Stream): void {
    if (count > this.capacity || count > this.limits.maxRows) {
      throw new InvalidArgumentError(`ple: stagePrefill of ${count} rows exceeds the slot capacity ${this.capacity} or maxRows ${this.limits.maxRows}`);
    }
    this.closeEpoch();
    const Vp = this.cfg.tableVocab;
    const perChunk = this.#chunkRows;
    let chunk = NONE;
    let staged = 0;
    for (let r = 0; r < count; r++) {
      const t = tokens[first + r]!;
      const id = t < Vp ? t : 0;
      let s = this.#slotOf[id]!;
      if (s >= 0) {
        this.#hits++;
        this.#touch(s);
      } else {
        if (chunk !== NONE && staged === perChunk) {
          this.#flushRun(stream);
          this.#staging.release(chunk, stream);
          chunk = NONE;
        }
        if (chunk === NONE) {
          chunk = this.#staging.acquire();
          staged = 0;
        }
        s = this.#miss(id, chunk + staged * this.rowBytes, stream);
        staged++;
      }
      this.#pinEpoch[s] = this.#epoch;
      this.#indexHost[r] = s;
    }
    this.#prefillRows += count;
    this.#flushRun(stream);
    if (chunk !== NONE) this.#staging.release(chunk, stream);
    const at = this.#indexStaging.acquire();
    const bytes = this.#indexStaging.buffer.bytes;
    new Int32Array(bytes.buffer, bytes.byteOffset + at, count).set(this.#indexHost.subarray(0, count));
    this.gpu.copyToDeviceAsync(this.device.rowSlots, this.#indexStaging.buffer, at, count * 4, stream);
    this.#indexStaging.release(at, stream);
    this.#indexBytes += count * 4;
  }

  // ---- inspection ----

  stats(): PleCacheStats {
    return {
      capacity: this.capacity,
      occupied: this.#used,
      rowBytes: this.rowBytes,
      hits: this.#hits,
      misses: this.#misses,
      evictions: this.#evictions,
      uploadedRowBytes: this.#uploadedRowBytes,
      rowCopies: this.#rowCopies,
      indexBytes: this.#indexBytes,
      mapUpdates: this.#mapUpdates,
      prestageCalls: this.#prestageCalls,
      prestageRows: this.#prestageRows,
      prestageClaims: this.#claims,
      prefillRows: this.#prefillRows,
      stagingWaits: this.#staging.waits + this.#indexStaging.waits,
    };
  }

  /** The slot holding table row `id`, or −1 (for tests and tools). */
  slotOf(id: number): number {
    return this.#slotOf[id] ?? NONE;
  }

  /** Table row ids from least to most recently used (for tests and tools). */
  lruOrder(): number[] {
    const out: number[] = [];
    for (let s = this.#head; s !== NONE; s = this.#next[s]!) out.push(this.#tokenOf[s]!);
    return out;
  }

  // ---- internals ----

  #validate(tokens: Int32Array, first: number, count: number, where: string): void {
    const V = this.cfg.vocab;
    for (let r = first; r < first + count; r++) {
      const t = tokens[r]!;
      if (!(t >= 0 && t < V)) {
        throw new InvalidArgumentError(
          `ple: ${where}: token id ${t} at row ${r} is outside the vocabulary [0, ${V}) (config vocab_size); ids in [${this.cfg.tableVocab}, ${V}) ` +
            `(past vocab_size_per_layer_input) read table row 0, as Hugging Face's Gemma3nModel maps them`,
        );
      }
    }
  }

  /** Uploads table row `id` into a free or evicted slot through staging at byte `offset`; returns the slot. */
  #miss(id: number, offset: number, stream: Stream): number {
    const s = this.#allocate();
    const bytes = this.#staging.buffer.bytes;
    this.#table.read(id, bytes.subarray(offset, offset + this.rowBytes));
    if (this.#runRows > 0 && s === this.#runSlot + this.#runRows && offset === this.#runOffset + this.#runRows * this.rowBytes) {
      this.#runRows++;
    } else {
      this.#flushRun(stream);
      this.#runSlot = s;
      this.#runOffset = offset;
      this.#runRows = 1;
    }
    this.#slotOf[id] = s;
    this.#tokenOf[s] = id;
    this.#misses++;
    this.#uploadedRowBytes += this.rowBytes;
    return s;
  }

  #flushRun(stream: Stream): void {
    if (this.#runRows === 0) return;
    const dst = this.device.slotRows + BigInt(this.#runSlot * this.rowBytes);
    this.gpu.copyToDeviceAsync(dst, this.#staging.buffer, this.#runOffset, this.#runRows * this.rowBytes, stream);
    this.#rowCopies++;
    this.#runRows = 0;
    this.#runSlot = NONE;
  }

  #flushMap(stream: Stream): void {
    const p = this.#pairs;
    for (let i = 0; i < p.length; i += 8) {
      const n = Math.min(4, (p.length - i) / 2);
      const at = (j: number) => (j < n ? p[i + 2 * j]! : 0);
      const sl = (j: number) => (j < n ? p[i + 2 * j + 1]! : 0);
      this.gpu.launch(mapSetKernel, { grid: 1, block: 32, stream }, {
        map: this.device.map, n, t0: at(0), s0: sl(0), t1: at(1), s1: sl(1), t2: at(2), s2: sl(2), t3: at(3), s3: sl(3),
      });
      this.#mapUpdates += n;
    }
    p.length = 0;
  }

  /** A free slot, or the least recently used one not pinned by the step in flight. */
  #allocate(): number {
    if (this.#used < this.capacity) {
      const s = this.#used++;
      this.#append(s);
      return s;
    }
    let s = this.#head;
    while (s !== NONE && this.#pinEpoch[s] === this.#epoch) s = this.#next[s]!;
    if (s === NONE) {
      throw new InvalidArgumentError(
        `ple: all ${this.capacity} slots hold rows of the step in flight; create the layer with a larger slotCapacity (at least maxBatch × maxK = ${this.limits.maxBatch * this.limits.maxK})`,
      );
    }
    const old = this.#tokenOf[s]!;
    if (old !== NONE) this.#slotOf[old] = NONE;
    this.#evictions++;
    this.#unlink(s);
    this.#append(s);
    return s;
  }

  #touch(s: number): void {
    if (s === this.#tail) return;
    this.#unlink(s);
    this.#append(s);
  }

  #unlink(s: number): void {
    const p = this.#prev[s]!;
    const n = this.#next[s]!;
    if (p !== NONE) this.#next[p] = n;
    else this.#head = n;
    if (n !== NONE) this.#prev[n] = p;
    else this.#tail = p;
    this.#prev[s] = NONE;
    this.#next[s] = NONE;
  }

  #append(s: number): void {
    this.#prev[s] = this.#tail;
    this.#next[s] = NONE;
    if (this.#tail !== NONE) this.#next[this.#tail] = s;
    else this.#head = s;
    this.#tail = s;
  }
}

/** Codes the kernels take for the cache's dtypes. */
export function dtypeCodes(cache: PleSlotCache): { table: number; embed: number } {
  return { table: DTYPE_CODE[cache.tableDtype], embed: DTYPE_CODE[cache.embedDtype] };
}
