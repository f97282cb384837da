import { resolveHooks, type ResolvedHooks } from '../contract/default-hooks.js';
import type { LayerLimits, LayerStep, SpeculationMode, StepPhase, StepTables, TransformerLayer } from '../contract/layer.js';
import type { LayerState } from '../contract/layer-state.js';
import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend, Stream } from '../device/gpu-backend.js';
import { CaptureError, InvalidArgumentError, MetraleError, PluginError } from '../errors.js';
import { bindKvCache, type KvCacheInfo, type KvCacheOptions } from '../kv/kv-binding.js';
import type { KvCache } from '../kv/kv-cache.js';
import { BatchBuckets } from './batch-buckets.js';
import { GraphCache, graphKey } from './graph-cache.js';
import type { LayerTimer } from './layer-timer.js';
import { SequenceRecord, type Sequence } from './sequence.js';
import { SpeculativeBuffers } from './speculative-buffers.js';
import { StepTableStore, type HostTables } from './step-tables.js';

export interface StepDriverOptions {
  readonly gpu: GpuBackend;
  /** The layer stack, run in order; layer i's output rows are layer i+1's input rows. */
  readonly layers: readonly TransformerLayer<any>[];
  readonly limits: LayerLimits;
  /** Padded batch sizes for decode and verify graphs; default: `defaultBuckets(maxBatch)` (1, 2, 4, multiples of 8, maxBatch). */
  readonly buckets?: readonly number[];
  /** Capture and replay CUDA graphs for decode and verify (default true). */
  readonly graphs?: boolean;
  /** How verify rows are made reversible where layers support it (default 'write-on-accept'). */
  readonly speculation?: SpeculationMode;
  /** The stream steps run on (default: a new stream). */
  readonly stream?: Stream;
  /** Times every layer of the eager steps (prefill, and decode or verify without graphs): benchmarks only. */
  readonly layerTimer?: LayerTimer;
  /** The KV page pool shared by the paged layers (default: pages of 16 rows, enough for every slot at maxSeqLen). */
  readonly kvCache?: KvCacheOptions;
}

/** How a step ran. */
export type StepPath = 'prefill' | 'eager' | 'capture' | 'capture-failed' | 'replay';

export interface StepResult {
  readonly phase: StepPhase;
  readonly path: StepPath;
  /** Batch positions (padded bucket for decode and verify). */
  readonly batch: number;
  readonly k: number;
  /** Rows of real sequences; they come first, in the order the sequences were given. */
  readonly rows: number;
  /** Device rows of the last layer's output (padding rows follow the real ones). */
  readonly output: DevicePtr;
  readonly outputRowBytes: number;
  /** Why a capture failed, on path 'capture-failed'. */
  readonly captureError?: string;
}

export interface StepInput {
  readonly seqs: readonly Sequence[];
  /** Token id of every row, rows packed sequence after sequence. */
  readonly tokens?: Int32Array;
  /**
   * Instead of `tokens`, a decode step's token ids on the device (one i32 per sequence, in order),
   * copied into the step's table in stream order: the ids a picker made from the step before
   * (`PickedTokens.device`), not yet read by the host. Only where `decodesFromDevice` says so.
   */
  readonly deviceTokens?: DevicePtr;
  /** Input rows for the first layer (rows × inputRowBytes), uploaded before the step. */
  readonly input?: ArrayBufferView;
}

interface LayerEntry {
  readonly layer: TransformerLayer<LayerState>;
  readonly hooks: ResolvedHooks<LayerState>;
  readonly prestage: boolean;
  readonly rearm: boolean;
  readonly roomCheck: boolean;
  readonly sync: boolean;
  readonly resume: boolean;
  readonly snapshots: boolean;
  readonly runBatched: boolean;
}

/**
 * Runs engine steps for a batch of sequences through a layer stack: prefill eagerly, decode and
 * verify through captured graphs keyed by (phase, bucket, k), calling the layers' hooks where the
 * contract puts them. One step reads top to bottom in `#decodeOrVerify`.
 */
export class StepDriver {
  readonly gpu: GpuBackend;
  readonly stream: Stream;
  readonly limits: LayerLimits;
  readonly speculation: SpeculationMode;
  readonly graphsEnabled: boolean;
  readonly buckets: BatchBuckets;
  readonly graphs: GraphCache;
  readonly #layers: LayerEntry[];
  /** Indices of the layers that implement each per-step hook. */
  readonly #prestaging: readonly number[];
  readonly #roomChecking: readonly number[];
  readonly #syncing: readonly number[];
  /** Indices of the layers that answer whether they verify a run of sequences batched. */
  readonly #runBatching: readonly number[];
  readonly #tables: StepTableStore;
  readonly #activations: [DevicePtr, DevicePtr];
  readonly #ownsStream: boolean;
  readonly #records = new Map<number, SequenceRecord>();
  readonly #freeSlots: number[];
  #nextId = 0;
  #speculative: SpeculativeBuffers | undefined;
  #pendingVerify: { records: SequenceRecord[]; k: number; batch: number; slots: Int32Array } | undefined;
  #disposed = false;
  readonly #timer: LayerTimer | undefined;
  readonly #kv: KvCache;
  /** Gives back the layers' pages and snapshot entries of this driver's binding (dispose). */
  readonly #unbindLayers: () => void;
  /** Whether every layer can start a sequence at a cached prefix (`open(prefix)`). */
  readonly canResume: boolean;
  /** Whether some layer keeps recurrent state, so a prefix needs a saved snapshot at its end. */
  readonly savesState: boolean;
  /** How the KV cache was sized. */
  readonly kvInfo: KvCacheInfo;

  constructor(options: StepDriverOptions) {
    const { gpu, layers, limits } = options;
    if (layers.length === 0) throw new InvalidArgumentError('StepDriver: give at least one layer');
    checkLimits(limits);
    this.gpu = gpu;
    this.limits = limits;
    this.speculation = options.speculation ?? 'write-on-accept';
    this.graphsEnabled = options.graphs ?? true;
    this.buckets = new BatchBuckets(limits.maxBatch, options.buckets);
    this.#ownsStream = !options.stream;
    this.stream = options.stream ?? gpu.createStream();
    this.graphs = new GraphCache(gpu);
    this.#timer = options.layerTimer;
    this.#layers = layers.map((layer) => {
      const { hooks, implemented } = resolveHooks(layer as TransformerLayer<LayerState>);
      return {
        layer: layer as TransformerLayer<LayerState>,
        hooks,
        prestage: implemented.has('decodePrestage'),
        rearm: implemented.has('decodePrestageRearm'),
        roomCheck: implemented.has('checkReplayRoom'),
        sync: implemented.has('syncReplayedStep'),
        resume: implemented.has('resumeAt'),
        snapshots: implemented.has('saveStateSnapshot'),
        runBatched: implemented.has('gdnVerifyRunBatched'),
      };
    });
    const having = (flag: 'prestage' | 'roomCheck' | 'sync' | 'runBatched') => this.#layers.flatMap((e, i) => (e[flag] ? [i] : []));
    this.#prestaging = having('prestage');
    this.#roomChecking = having('roomCheck');
    this.#syncing = having('sync');
    this.#runBatching = having('runBatched');
    for (let i = 1; i < layers.length; i++) {
      if (layers[i]!.inputRowBytes !== layers[i - 1]!.outputRowBytes) {
        throw new InvalidArgumentError(
          `layer ${i} (${layers[i]!.type}) reads ${layers[i]!.inputRowBytes}-byte rows but layer ${i - 1} (${layers[i - 1]!.type}) writes ${layers[i - 1]!.outputRowBytes}-byte rows`,
        );
      }
    }
    const rowBytes = Math.max(...layers.map((l) => Math.max(l.inputRowBytes, l.outputRowBytes)));
    this.#tables = new StepTableStore(gpu, limits.maxBatch, limits.maxRows, layers[0]!.inputRowBytes);
    this.#activations = [gpu.alloc(rowBytes * limits.maxRows), gpu.alloc(rowBytes * limits.maxRows)];
    this.#freeSlots = Array.from({ length: limits.maxSeqs }, (_, i) => limits.maxSeqs - 1 - i);
    this.canResume = this.#layers.every((e) => e.resume);
    this.savesState = this.#layers.some((e) => e.snapshots);
    try {
      const bound = bindKvCache(gpu, this.#layers.map((e) => ({ hooks: e.hooks, savesState: e.snapshots, layer: e.layer })), limits, options.kvCache ?? {});
      this.#kv = bound.kv;
      this.kvInfo = bound.info;
      this.#unbindLayers = bound.unbind;
    } catch (error) {
      this.#tables.dispose();
      for (const a of this.#activations) gpu.free(a);
      if (this.#ownsStream) gpu.destroyStream(this.stream);
      throw error;
    }
  }

  /** The KV page pool, its block table and the prefix blocks it knows (the engine loop schedules with it). */
  get kv(): KvCache {
    return this.#kv;
  }

  get layers(): readonly TransformerLayer[] {
    return this.#layers.map((l) => l.layer);
  }

  /**
   * Starts a sequence in a free slot; every layer opens its state for it. With `prefix` (the
   * content hashes of full blocks the KV cache holds, `kv.match` of them), the sequence starts on
   * those blocks' pages at length `prefix.length × pageSize`: every layer resumes there (recurrent
   * ones from the snapshot saved at the prefix's end), and its first step computes the row after.
   */
  open(prefix?: readonly string[]): Sequence {
    this.#alive();
    const hashes = prefix ?? [];
    let snapshot: number | undefined;
    if (hashes.length > 0) {
      if (!this.canResume) {
        const which = this.#layers.filter((e) => !e.resume).map((e) => e.layer.type);
        throw new InvalidArgumentError(`open: a cached prefix needs every layer to resume there, but ${[...new Set(which)].join(', ')} cannot (no resumeAt)`);
      }
      if (this.#kv.match(hashes, this.savesState) < hashes.length) {
        throw new InvalidArgumentError(`open: the KV cache does not hold the ${hashes.length} prefix blocks${this.savesState ? ' with a state snapshot at their end' : ''}; open on what kv.match counts`);
      }
      if (this.savesState) snapshot = this.#kv.snapshotOf(hashes[hashes.length - 1]!);
    }
    const slot = this.#freeSlots.pop();
    if (slot === undefined) throw new InvalidArgumentError(`all ${this.limits.maxSeqs} sequence slots are in use; close a sequence first`);
    const states: LayerState[] = [];
    let length = 0;
    try {
      // The slot's last sequence may still have steps in flight that read its block-table entries.
      this.gpu.synchronize(this.stream);
      for (const l of this.#layers) states.push(l.layer.openState(slot));
      this.#speculative?.clearSlot(slot, this.stream);
      if (hashes.length > 0) {
        length = this.#kv.attach(slot, hashes);
        this.#kv.flush(this.stream);
        this.#layers.forEach((l, i) => l.hooks.resumeAt(states[i]!, length, snapshot, this.stream));
      }
    } catch (error) {
      states.forEach((st, i) => this.#layers[i]!.layer.closeState(st));
      this.#kv.release(slot);
      this.#freeSlots.push(slot);
      throw error;
    }
    const record = new SequenceRecord(this.#nextId++, slot, states);
    record.length = length;
    this.#records.set(record.id, record);
    return record;
  }

  /**
   * Saves the recurrent state of every layer that keeps one, as of `seq`'s committed length, under
   * `hash` (the content hash of the block that ends there), so a later sequence can start at that
   * boundary. Does nothing when no layer keeps state.
   */
  saveSnapshot(seq: Sequence, hash: string): void {
    const record = this.#record(seq, 'saveSnapshot');
    if (!this.savesState) return;
    if (record.awaitingAccept) throw new InvalidArgumentError(`saveSnapshot: sequence ${record.id} has a verify waiting for accept(); accept it first`);
    if (record.length % this.#kv.pageSize !== 0) throw new InvalidArgumentError(`saveSnapshot: sequence ${record.id} is at length ${record.length}, not at a block boundary (pages of ${this.#kv.pageSize})`);
    if (this.#kv.snapshotCount === 0) return;
    const entry = this.#kv.snapshotEntry(hash);
    this.#layers.forEach((l, i) => {
      if (l.snapshots) l.hooks.saveStateSnapshot(record.states[i]!, entry, this.stream);
    });
  }

  /** Ends a sequence; its slot is free again. */
  close(seq: Sequence): void {
    const record = this.#record(seq, 'close');
    const pending = this.#pendingVerify;
    if (pending?.records.includes(record)) {
      // The verify is abandoned for all its sequences, as if each accepted 0 rows.
      for (const rec of pending.records) rec.awaitingAccept = false;
      this.#pendingVerify = undefined;
    }
    this.#layers.forEach((l, i) => l.layer.closeState(record.states[i]!));
    this.#speculative?.clearSlot(record.slot, this.stream);
    this.#kv.release(record.slot);
    record.open = false;
    this.#records.delete(record.id);
    this.#freeSlots.push(record.slot);
  }

  /** The state layer `layerIndex` keeps for a sequence (for inspection and tests). */
  stateOf(seq: Sequence, layerIndex: number): LayerState {
    const s = this.#record(seq, 'stateOf').states[layerIndex];
    if (!s) throw new InvalidArgumentError(`stateOf: no layer ${layerIndex} (the stack has ${this.#layers.length})`);
    return s;
  }

  /**
   * Prefill: `lengths[i]` rows of sequence i, packed sequence after sequence; eager. Returns the
   * result of the last chunk; longer prefills run in chunks of at most `limits.maxRows` rows, and
   * `onChunk` sees each chunk's result (its output is overwritten by the next chunk).
   */
  prefill(input: StepInput & { readonly lengths: readonly number[] }, onChunk?: (result: StepResult, firstRow: number) => void): StepResult {
    this.#alive();
    const records = this.#checkSeqs(input.seqs, 'prefill');
    const { lengths } = input;
    if (lengths.length !== records.length) throw new InvalidArgumentError(`prefill: ${records.length} sequences but ${lengths.length} lengths`);
    for (const [i, n] of lengths.entries()) {
      if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`prefill: lengths[${i}] must be a positive integer, got ${n}`);
    }
    const total = lengths.reduce((a, b) => a + b, 0);
    this.#checkRowInputs('prefill', input, total);
    const rowBytes = this.#layers[0]!.layer.inputRowBytes;
    const inputBytes = input.input ? asBytes(input.input) : undefined;
    // Split the packed rows into chunks of at most maxRows rows and maxBatch sequences (the step
    // tables and layers' per-position buffers hold maxBatch positions); a sequence may span chunks.
    let row = 0;
    let result: StepResult | undefined;
    const remaining = [...lengths];
    let seqAt = 0;
    while (row < total) {
      const chunkRecords: SequenceRecord[] = [];
      const chunkLengths: number[] = [];
      let rows = 0;
      while (seqAt < records.length && rows < this.limits.maxRows && chunkRecords.length < this.limits.maxBatch) {
        const take = Math.min(remaining[seqAt]!, this.limits.maxRows - rows);
        chunkRecords.push(records[seqAt]!);
        chunkLengths.push(take);
        rows += take;
        remaining[seqAt]! -= take;
        if (remaining[seqAt] === 0) seqAt++;
      }
      const { tables, host, set } = this.#tables.acquire(chunkRecords.length, rows);
      let r = 0;
      chunkRecords.forEach((rec, p) => {
        host.slots[p] = rec.slot;
        host.seqLens[p] = rec.length;
        host.rowStarts[p] = r;
        for (let j = 0; j < chunkLengths[p]!; j++) {
          host.tokens[r + j] = input.tokens ? input.tokens[row + r + j]! : 0;
          host.positions[r + j] = rec.length + j;
        }
        r += chunkLengths[p]!;
      });
      host.rowStarts[chunkRecords.length] = rows;
      // Pages for the chunk's rows, before anything of it is written (a full pool throws here).
      this.#kv.grow(chunkRecords.map((rec) => rec.slot), chunkRecords.map((rec, p) => rec.length + chunkLengths[p]!));
      this.#kv.flush(this.stream);
      if (inputBytes) host.input.set(inputBytes.subarray(row * rowBytes, (row + rows) * rowBytes));
      this.#tables.upload(set, host, this.stream, inputBytes ? this.#activations[0] : undefined, inputBytes ? rows * rowBytes : 0);
      const step = this.#layerStep('prefill', chunkRecords, chunkRecords.length, 0, rows, tables, host);
      this.#forward(step, chunkRecords.length);
      // The chunk's kernels folded the carried rows of every slot in it.
      this.#speculative?.folded(host.slots, chunkRecords.length, this.stream);
      chunkRecords.forEach((rec, p) => (rec.length += chunkLengths[p]!));
      result = this.#result('prefill', 'prefill', chunkRecords.length, 0, rows);
      onChunk?.(result, row);
      row += rows;
    }
    return result!;
  }

  /** One row per sequence. */
  decode(input: StepInput): StepResult {
    return this.#decodeOrVerify('decode', input, 1);
  }

  /**
   * Whether a decode step of `sequences` sequences may take its token ids on the device
   * (`StepInput.deviceTokens`): its bucket's graph is captured, so no layer's code runs for it on the
   * host, and no layer prestages (a prestage reads the ids on the host).
   */
  decodesFromDevice(sequences: number): boolean {
    if (this.#disposed || this.#prestaging.length > 0 || !this.graphsEnabled) return false;
    if (!Number.isInteger(sequences) || sequences < 1 || sequences > this.limits.maxBatch) return false;
    return this.graphs.get(graphKey('decode', this.buckets.bucketFor(sequences), 1))?.kind === 'graph';
  }

  /** `k` rows per sequence, scored without committing; follow with `accept`. */
  verify(input: StepInput & { readonly k: number }): StepResult {
    const { k } = input;
    if (!Number.isInteger(k) || k < 1 || k > this.limits.maxK) throw new InvalidArgumentError(`verify: k must be between 1 and maxK (${this.limits.maxK}), got ${k}`);
    return this.#decodeOrVerify('verify', input, k);
  }

  /**
   * Commits the first `accepted[i]` rows of sequence i of the last verify (0 ≤ accepted ≤ k): the
   * write-on-accept layers fold them, carried layers fold them in their next kernel, and every
   * sequence advances by its count. Rows past the count leave no trace.
   */
  accept(accepted: readonly number[]): void {
    this.#alive();
    const pending = this.#pendingVerify;
    if (!pending) throw new InvalidArgumentError('accept: no verify step is waiting for acceptance');
    if (accepted.length !== pending.records.length) {
      throw new InvalidArgumentError(`accept: the verify had ${pending.records.length} sequences, got ${accepted.length} counts`);
    }
    for (const [i, n] of accepted.entries()) {
      if (!Number.isInteger(n) || n < 0 || n > pending.k) throw new InvalidArgumentError(`accept: accepted[${i}] must be between 0 and k (${pending.k}), got ${n}`);
    }
    this.#pendingVerify = undefined;
    this.#speculative?.accept(this.#tables.slotTable, pending.slots, accepted, pending.batch, pending.k, this.stream);
    pending.records.forEach((rec, i) => {
      rec.length += accepted[i]!;
      rec.awaitingAccept = false;
    });
  }

  /** Copies the real rows of a result's output to the host (synchronous). */
  readOutput(result: StepResult): Uint8Array {
    this.gpu.synchronize(this.stream);
    return this.gpu.download(result.output, result.rows * result.outputRowBytes);
  }

  /** `readOutput` as f32 values. */
  readOutputF32(result: StepResult): Float32Array {
    const bytes = this.readOutput(result);
    return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
  }

  /**
   * Frees the driver's buffers, and the layers give back the pages and snapshot entries it bound
   * (`kvUnbind`, `stateSnapshotBind(0)`; not those of a later driver that bound them since): a
   * later driver over the same layers sizes its pool from the same free memory.
   */
  dispose(): void {
    if (this.#disposed) return;
    this.gpu.synchronize(this.stream);
    this.#disposed = true;
    try {
      this.graphs.dispose();
      this.#speculative?.dispose();
      this.#unbindLayers();
    } finally {
      this.#kv.dispose();
      this.#tables.dispose();
      for (const a of this.#activations) this.gpu.free(a);
      if (this.#ownsStream) this.gpu.destroyStream(this.stream);
    }
  }

  // ---- one decode or verify step ----

  #decodeOrVerify(phase: 'decode' | 'verify', input: StepInput, k: number): StepResult {
    this.#alive();
    const records = this.#checkSeqs(input.seqs, phase);
    const n = records.length;
    this.#checkRowInputs(phase, input, n * k);
    const batch = this.buckets.bucketFor(n);
    const rows = batch * k;

    // Speculative buffers are sized and bound once, before the first graph decision.
    if (!this.#speculative && this.speculation !== 'none') {
      this.#speculative = new SpeculativeBuffers(this.gpu, this.#layers, this.speculation, this.limits, this.#tables.slotTable, this.stream);
    }

    // A verify runs its sequences as one batched step: every layer that answers must take the run.
    if (phase === 'verify' && this.#speculative) this.#checkBatchedRun(records, k, batch);

    const key = graphKey(phase, batch, k);
    const entry = this.graphsEnabled ? this.graphs.get(key) : undefined;
    const replay = entry?.kind === 'graph';
    if (input.deviceTokens !== undefined && !(phase === 'decode' && replay && this.#prestaging.length === 0)) {
      throw new InvalidArgumentError(
        `${phase}: token ids on the device are taken only by a decode step that replays its graph with no layer prestaging ` +
          `(this one ${phase !== 'decode' ? 'verifies' : !replay ? 'has no captured graph' : 'has prestaging layers'}); ask decodesFromDevice first, or pass the ids as tokens`,
      );
    }

    // Room check before anything is written: a failure leaves memory and host state untouched.
    if (replay) this.#roomCheck(records, k);
    // Pages for the step's rows, uploaded before any prestage, capture or replay reads the table.
    this.#kv.grow(records.map((rec) => rec.slot), records.map((rec) => rec.length + k));
    this.#kv.flush(this.stream);

    // Prestage: host work per sequence and layer, while token ids are on the host.
    const tokens = input.tokens;
    if (this.#prestaging.length > 0) {
      for (let i = 0; i < n; i++) {
        const rec = records[i]!;
        const rowTokens = tokens ? tokens.subarray(i * k, i * k + k) : new Int32Array(k);
        for (const l of this.#prestaging) this.#layers[l]!.layer.decodePrestage!(rowTokens, rec.states[l]!, this.gpu, this.stream);
      }
    }

    // Step tables (padding: slot −1, length 1) and input rows, uploaded in stream order.
    const { tables, host, set } = this.#tables.acquire(batch, rows);
    this.#fillTables(host, records, batch, k, tokens);
    const rowBytes = this.#layers[0]!.layer.inputRowBytes;
    let inputBytes = 0;
    if (input.input) {
      const bytes = asBytes(input.input);
      host.input.set(bytes);
      inputBytes = bytes.byteLength;
    }
    this.#tables.upload(set, host, this.stream, input.input ? this.#activations[0] : undefined, inputBytes);
    if (input.deviceTokens !== undefined) this.gpu.copyDeviceAsync(tables.tokens, input.deviceTokens, 4 * n, this.stream);

    let path: StepPath;
    let captureError: string | undefined;
    if (replay) {
      this.gpu.launchGraph(entry.exec, this.stream);
      entry.replays++;
      this.#syncReplayed(records, k);
      path = 'replay';
    } else if (this.graphsEnabled && entry === undefined) {
      captureError = this.#capture(key, this.#layerStep(phase, records, batch, k, rows, tables, host), n);
      path = captureError === undefined ? 'capture' : 'capture-failed';
      if (captureError !== undefined) {
        for (let i = 0; i < n; i++) {
          for (let l = 0; l < this.#layers.length; l++) {
            const e = this.#layers[l]!;
            if (e.rearm) e.hooks.decodePrestageRearm(records[i]!.states[l]!);
          }
        }
        this.#forward(this.#layerStep(phase, records, batch, k, rows, tables, host), n);
      }
    } else {
      this.#forward(this.#layerStep(phase, records, batch, k, rows, tables, host), n);
      path = 'eager';
    }

    // Every slot in the step had its carried rows folded by the step's kernels.
    this.#speculative?.folded(host.slots, n, this.stream);
    if (phase === 'decode') {
      for (const rec of records) rec.length += 1;
    } else {
      for (const rec of records) rec.awaitingAccept = true;
      this.#pendingVerify = { records, k, batch, slots: host.slots.slice(0, batch) };
    }
    return captureError === undefined ? this.#result(phase, path, batch, k, n * k) : { ...this.#result(phase, path, batch, k, n * k), captureError };
  }

  /**
   * The verify's sequences are one run of adjacent batch positions (0..n−1, then padding up to
   * `batch`), `k` rows each, and the driver verifies a run only batched: one step whose kernels read
   * the step tables (`wyn` = batch positions, `wyTables` = the slot table). A layer that answers
   * false cannot run it so; the step is refused, host-side, before anything of it is written.
   */
  #checkBatchedRun(records: SequenceRecord[], k: number, batch: number): void {
    for (const l of this.#runBatching) {
      const layer = this.#layers[l]!.layer;
      const states = records.map((rec) => rec.states[l]!);
      if (layer.gdnVerifyRunBatched!(states, k, batch, this.#tables.slotTable) === false) {
        throw new PluginError(
          layer.type,
          `layer ${l} cannot verify sequences ${records.map((r) => r.id).join(', ')} (k = ${k}, ${batch} batch positions) in one batched step ` +
            `(gdnVerifyRunBatched answered false), and the step driver verifies only batched; nothing of the step ran. ` +
            'Verify within the limits the layer was created for, with the speculation mode it supports.',
        );
      }
    }
  }

  // The two loops of the replay path run layers × sequences times per step: they call the layer's
  // own method (not a bound copy) and skip layers that keep the default.
  #roomCheck(records: SequenceRecord[], k: number): void {
    for (const l of this.#roomChecking) {
      const layer = this.#layers[l]!.layer;
      for (let i = 0; i < records.length; i++) {
        const rec = records[i]!;
        layer.checkReplayRoom!(rec.states[l]!, rec.length, k);
      }
    }
  }

  #syncReplayed(records: SequenceRecord[], k: number): void {
    for (const l of this.#syncing) {
      const layer = this.#layers[l]!.layer;
      for (let i = 0; i < records.length; i++) {
        const rec = records[i]!;
        layer.syncReplayedStep!(rec.states[l]!, rec.length, k);
      }
    }
  }

  /** Captures the eager path; on success the graph runs the step. Returns the failure reason, if any. */
  #capture(key: string, step: MutableStep, n: number): string | undefined {
    let failure: unknown;
    this.gpu.beginCapture(this.stream);
    try {
      this.#forward(step, n, false);
    } catch (error) {
      failure = error;
    }
    let graph;
    try {
      graph = this.gpu.endCapture(this.stream);
    } catch (error) {
      failure ??= error;
    }
    if (failure !== undefined || !graph) {
      if (graph) this.gpu.destroyGraph(graph);
      if (!(failure instanceof MetraleError)) throw failure;
      const reason = failure instanceof CaptureError ? failure.reason : failure.message;
      this.graphs.markFailed(key, reason);
      return reason;
    }
    const exec = this.gpu.instantiate(graph);
    this.gpu.destroyGraph(graph);
    this.graphs.store(key, exec);
    this.gpu.launchGraph(exec, this.stream);
    return undefined;
  }

  /**
   * Runs every layer's forward for the step, ping-ponging between the two activation buffers;
   * timed layer by layer when the driver has a timer and the step is not being captured.
   */
  #forward(step: MutableStep, _n: number, timed = true): void {
    const timer = timed ? this.#timer : undefined;
    step.section = timer ? (label) => timer.section(label, this.stream) : undefined;
    for (let l = 0; l < this.#layers.length; l++) {
      step.input = this.#activations[l % 2]!;
      step.output = this.#activations[(l + 1) % 2]!;
      step.layerIndex = l;
      const layer = this.#layers[l]!.layer;
      timer?.layer(layer.type, this.stream);
      layer.forward(step.view(l));
    }
    timer?.collect(this.stream, step.phase);
  }

  #fillTables(host: HostTables, records: SequenceRecord[], batch: number, k: number, tokens: Int32Array | undefined): void {
    const n = records.length;
    for (let p = 0; p < batch; p++) {
      const real = p < n;
      const rec = records[p];
      host.slots[p] = real ? rec!.slot : -1;
      host.seqLens[p] = real ? rec!.length : 1;
      host.rowStarts[p] = p * k;
      for (let r = 0; r < k; r++) {
        const row = p * k + r;
        host.tokens[row] = real && tokens ? tokens[row]! : 0;
        host.positions[row] = real ? rec!.length + r : 0;
      }
    }
    host.rowStarts[batch] = batch * k;
  }

  #layerStep(phase: StepPhase, records: SequenceRecord[], batch: number, k: number, rows: number, tables: StepTables, host: HostTables): MutableStep {
    const gpu = this.gpu;
    const stream = this.stream;
    const speculation = this.speculation;
    const step: MutableStep = {
      phase,
      input: 0n,
      output: 0n,
      layerIndex: 0,
      section: undefined,
      view(l: number): LayerStep {
        const states: (LayerState | undefined)[] = new Array(batch);
        for (let p = 0; p < batch; p++) states[p] = records[p]?.states[l];
        return {
          phase, gpu, stream, batch, k, rows, tables, speculation,
          input: step.input,
          output: step.output,
          host: { states, seqLens: host.seqLens, rowStarts: host.rowStarts, tokens: host.tokens },
          ...(step.section ? { section: step.section } : {}),
        };
      },
    };
    return step;
  }

  #result(phase: StepPhase, path: StepPath, batch: number, k: number, rows: number): StepResult {
    const output = this.#activations[this.#layers.length % 2]!;
    return { phase, path, batch, k, rows, output, outputRowBytes: this.#layers[this.#layers.length - 1]!.layer.outputRowBytes };
  }

  #record(seq: Sequence, where: string): SequenceRecord {
    const rec = this.#records.get(seq.id);
    if (!rec || rec !== seq) throw new InvalidArgumentError(`${where}: sequence ${seq.id} is not open in this driver`);
    return rec;
  }

  #checkSeqs(seqs: readonly Sequence[], where: string): SequenceRecord[] {
    if (seqs.length === 0) throw new InvalidArgumentError(`${where}: give at least one sequence`);
    if (where !== 'prefill' && seqs.length > this.limits.maxBatch) {
      throw new InvalidArgumentError(`${where}: ${seqs.length} sequences exceed maxBatch (${this.limits.maxBatch})`);
    }
    const seen = new Set<number>();
    return seqs.map((s) => {
      const rec = this.#record(s, where);
      if (seen.has(rec.id)) throw new InvalidArgumentError(`${where}: sequence ${rec.id} is listed twice`);
      seen.add(rec.id);
      if (rec.awaitingAccept) throw new InvalidArgumentError(`${where}: sequence ${rec.id} has a verify waiting for accept(); accept it first`);
      return rec;
    });
  }

  #checkRowInputs(where: string, input: StepInput, rows: number): void {
    if (input.tokens && input.tokens.length !== rows) throw new InvalidArgumentError(`${where}: ${rows} rows need ${rows} token ids, got ${input.tokens.length}`);
    if (input.tokens && input.deviceTokens !== undefined) throw new InvalidArgumentError(`${where}: give the token ids as tokens or as deviceTokens, not both`);
    if (where === 'prefill' && input.deviceTokens !== undefined) throw new InvalidArgumentError('prefill: token ids on the device are taken only by a decode step; pass the prompt rows as tokens');
    if (input.input) {
      const expected = rows * this.#layers[0]!.layer.inputRowBytes;
      if (input.input.byteLength !== expected) {
        throw new InvalidArgumentError(`${where}: ${rows} input rows of ${this.#layers[0]!.layer.inputRowBytes} bytes need ${expected} bytes, got ${input.input.byteLength}`);
      }
    }
    if (this.#pendingVerify) throw new InvalidArgumentError(`${where}: the last verify is waiting for accept(); accept it first`);
  }

  #alive(): void {
    if (this.#disposed) throw new InvalidArgumentError('this StepDriver was disposed');
  }
}

interface MutableStep {
  readonly phase: StepPhase;
  input: DevicePtr;
  output: DevicePtr;
  layerIndex: number;
  section: ((label: string) => void) | undefined;
  view(layerIndex: number): LayerStep;
}

function asBytes(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

function checkLimits(limits: LayerLimits): void {
  for (const key of ['maxSeqs', 'maxSeqLen', 'maxBatch', 'maxK', 'maxRows'] as const) {
    const v = limits[key];
    if (!Number.isInteger(v) || v < 1) throw new InvalidArgumentError(`limits.${key} must be a positive integer, got ${v}`);
  }
  if (limits.maxRows < limits.maxBatch * limits.maxK) {
    throw new InvalidArgumentError(`limits.maxRows (${limits.maxRows}) must hold a full verify step: maxBatch × maxK = ${limits.maxBatch * limits.maxK}`);
  }
}
