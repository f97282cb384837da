import {
  defineKernel,
  ReplayRoomError,
  type DevicePtr,
  type GdnCarryBinding,
  type GdnCarrySize,
  type GpuBackend,
  type LayerLimits,
  type LayerState,
  type LayerStep,
  type SpeculationMode,
  type StepPhase,
  type StepTables,
  type Stream,
  type TransformerLayer,
} from '../../src/index.js';

/**
 * Test layers whose every call the driver makes lands in a shared log, and whose forward is a
 * small kernel that reads the step tables, so what the driver puts in them (and whether a graph
 * replayed) shows in the outputs.
 *
 * The kernel keeps a recurrent state row per slot and, for every real row r of batch position p:
 *   state[slot] = 0.5 · state[slot] + input[r]
 *   output[r][j] = state[slot][j] + positions[r] + 0.25 · seqLens[p] + 0.001 · tokens[r] + salt · (j + 1)
 * Padding positions (slot −1) are skipped. `RecordingModel` computes the same on the host.
 */

export type HookName =
  | 'decodePrestage'
  | 'decodePrestageRearm'
  | 'checkReplayRoom'
  | 'syncReplayedStep'
  | 'gdnWoaStashSeqFloats'
  | 'gdnWoaBind'
  | 'gdnCarrySeqFloats'
  | 'gdnCarryBind'
  | 'gdnVerifyRunBatched'
  | 'gdnFoldAccepted';

export type CallName = HookName | 'forward' | 'openState' | 'closeState';

export const GRAPH_HOOKS: readonly CallName[] = ['decodePrestage', 'decodePrestageRearm', 'checkReplayRoom', 'syncReplayedStep'];

/** The step tables as they were on the device, read when a forward ran eagerly. */
export interface TableSnapshot {
  readonly slots: number[];
  readonly seqLens: number[];
  readonly rowStarts: number[];
  readonly tokens: number[];
  readonly positions: number[];
}

/** What a forward saw of its step (host arrays copied: the driver reuses them). */
export interface ForwardDetail {
  readonly phase: StepPhase;
  readonly batch: number;
  readonly k: number;
  readonly rows: number;
  readonly capturing: boolean;
  readonly speculation: SpeculationMode;
  readonly input: DevicePtr;
  readonly output: DevicePtr;
  readonly tables: StepTables;
  /** Slot of each batch position's state; undefined where host.states has none (padding). */
  readonly stateSlots: (number | undefined)[];
  readonly hostSeqLens: number[];
  readonly hostRowStarts: number[];
  readonly hostTokens: number[];
  /** Device tables at the time of the forward; absent while capturing (a download is forbidden then). */
  readonly device?: TableSnapshot;
}

export interface CallEntry {
  readonly call: CallName;
  readonly layer: string;
  readonly slot?: number;
  readonly args: readonly unknown[];
  /** Whether the driver's stream was capturing during the call. */
  readonly capturing?: boolean;
  readonly forward?: ForwardDetail;
}

/** The log every test layer of one stack writes to, in call order. */
export class CallLog {
  readonly entries: CallEntry[] = [];

  record(entry: CallEntry): void {
    this.entries.push(entry);
  }

  clear(): void {
    this.entries.length = 0;
  }

  /** Entries whose call is one of `calls` (all when omitted). */
  of(...calls: CallName[]): CallEntry[] {
    return calls.length === 0 ? [...this.entries] : this.entries.filter((e) => calls.includes(e.call));
  }

  forwards(): ForwardDetail[] {
    return this.entries.filter((e) => e.call === 'forward').map((e) => e.forward!);
  }

  /** Readable one-line form of each matching entry, for order assertions. */
  lines(...calls: CallName[]): string[] {
    return this.of(...calls).map(formatEntry);
  }
}

export function formatEntry(e: CallEntry): string {
  switch (e.call) {
    case 'forward': {
      const f = e.forward!;
      return `forward ${e.layer} ${f.phase} b${f.batch} k${f.k} ${f.capturing ? 'capturing' : 'eager'}`;
    }
    case 'checkReplayRoom':
    case 'syncReplayedStep':
      return `${e.call} ${e.layer} s${e.slot} len=${String(e.args[0])} k=${String(e.args[1])}`;
    case 'decodePrestage':
    case 'decodePrestageRearm':
    case 'openState':
    case 'closeState':
      return `${e.call} ${e.layer} s${e.slot}`;
    default:
      return `${e.call} ${e.layer}`;
  }
}

export interface RecordingState extends LayerState {
  /** Host bookkeeping: rows this layer has seen committed or run (like a KV length). */
  length: number;
  prestages: number;
  lastTokens: number[];
}

const stepKernel = defineKernel({
  name: 'test.recording.step',
  params: {
    input: 'ptr', output: 'ptr', state: 'ptr', slots: 'ptr', seqLens: 'ptr', rowStarts: 'ptr', tokens: 'ptr', positions: 'ptr',
    pending: 'ptr', folded: 'ptr', batch: 'i32', width: 'i32', salt: 'f32', foldPending: 'i32',
  },
  cpu: (a, { mem }) => {
    const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
    const rows = rowStarts[a.batch]!;
    const slots = mem.i32(a.slots, a.batch);
    const seqLens = mem.i32(a.seqLens, a.batch);
    const tokens = mem.i32(a.tokens, rows);
    const positions = mem.i32(a.positions, rows);
    const input = mem.f32(a.input, rows * a.width);
    const output = mem.f32(a.output, rows * a.width);
    for (let p = 0; p < a.batch; p++) {
      const slot = slots[p]!;
      if (slot < 0) continue;
      if (a.foldPending) {
        // Carried mode: fold the accepted rows of the last verify.
        const pending = mem.u32(a.pending + BigInt(slot * 4), 1);
        mem.u32(a.folded + BigInt(slot * 4), 1)[0]! += pending[0]!;
        // Read-only: every carried layer of the step reads the same count; the driver zeroes it after the step.
      }
      const st = mem.f32(a.state + BigInt(slot * a.width * 4), a.width);
      for (let r = rowStarts[p]!; r < rowStarts[p + 1]!; r++) {
        for (let j = 0; j < a.width; j++) {
          st[j] = 0.5 * st[j]! + input[r * a.width + j]!;
          output[r * a.width + j] = st[j]! + positions[r]! + 0.25 * seqLens[p]! + 0.001 * tokens[r]! + a.salt * (j + 1);
        }
      }
    }
  },
});

/** Copies what gdnFoldAccepted was given into a buffer of the layer: [n, slotTable[0..n), naTab[0..n)]. */
const foldSnapshotKernel = defineKernel({
  name: 'test.recording.fold-snapshot',
  params: { out: 'ptr', slotTable: 'ptr', naTab: 'ptr', n: 'i32' },
  cpu: (a, { mem }) => {
    const out = mem.i32(a.out, 1 + 2 * a.n);
    const slots = mem.i32(a.slotTable, a.n);
    const na = mem.u32(a.naTab, a.n);
    out[0] = a.n;
    for (let i = 0; i < a.n; i++) {
      out[1 + i] = slots[i]!;
      out[1 + a.n + i] = na[i]!;
    }
  },
});

export interface KernelLayerOptions {
  readonly name: string;
  readonly log: CallLog;
  readonly gpu: GpuBackend;
  readonly limits: LayerLimits;
  /** f32 elements per row (default 4). */
  readonly width?: number;
  /** Exactly representable in f32, so the host model matches bit for bit. */
  readonly salt?: number;
}

/** The kernel layer without any hook: every hook of the contract is absent. */
export class KernelLayer implements TransformerLayer<RecordingState> {
  readonly type: string = 'test-kernel';
  readonly name: string;
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly width: number;
  readonly salt: number;
  protected readonly log: CallLog;
  protected readonly gpu: GpuBackend;
  protected readonly limits: LayerLimits;
  /** f32[maxSeqs × width]: the recurrent state. */
  readonly stateBuffer: DevicePtr;
  /** u32[maxSeqs]: carried rows this layer's kernel folded, per slot. */
  readonly foldedBuffer: DevicePtr;
  /** What the kernel reads as pending rows: the carry binding's, else a zeroed buffer of the layer. */
  protected pendingRows: DevicePtr;
  protected foldPending = 0;
  readonly #own: DevicePtr[];

  constructor(options: KernelLayerOptions) {
    this.name = options.name;
    this.log = options.log;
    this.gpu = options.gpu;
    this.limits = options.limits;
    this.width = options.width ?? 4;
    this.salt = options.salt ?? 0.125;
    this.inputRowBytes = this.outputRowBytes = this.width * 4;
    const { maxSeqs } = this.limits;
    this.stateBuffer = this.gpu.alloc(maxSeqs * this.width * 4);
    this.foldedBuffer = this.gpu.alloc(maxSeqs * 4);
    this.pendingRows = this.gpu.alloc(maxSeqs * 4);
    this.#own = [this.stateBuffer, this.foldedBuffer, this.pendingRows];
    this.gpu.upload(this.stateBuffer, new Float32Array(maxSeqs * this.width));
    this.gpu.upload(this.foldedBuffer, new Uint32Array(maxSeqs));
    this.gpu.upload(this.pendingRows, new Uint32Array(maxSeqs));
  }

  protected allocOwn(bytes: number): DevicePtr {
    const p = this.gpu.alloc(bytes);
    this.#own.push(p);
    return p;
  }

  openState(slot: number): RecordingState {
    this.log.record({ call: 'openState', layer: this.name, slot, args: [slot] });
    this.gpu.upload(this.stateBuffer + BigInt(slot * this.width * 4), new Float32Array(this.width));
    return { slot, length: 0, prestages: 0, lastTokens: [] };
  }

  closeState(state: RecordingState): void {
    this.log.record({ call: 'closeState', layer: this.name, slot: state.slot, args: [] });
  }

  inspectState(state: RecordingState): unknown {
    return { length: state.length, prestages: state.prestages };
  }

  forward(step: LayerStep<RecordingState>): void {
    const capturing = step.gpu.isCapturing(step.stream);
    const t = step.tables;
    const read = (ptr: DevicePtr, n: number): number[] => Array.from(new Int32Array(step.gpu.download(ptr, n * 4).slice().buffer));
    const device: TableSnapshot | undefined = capturing
      ? undefined
      : {
          slots: read(t.slots, step.batch),
          seqLens: read(t.seqLens, step.batch),
          rowStarts: read(t.rowStarts, step.batch + 1),
          tokens: read(t.tokens, step.rows),
          positions: read(t.positions, step.rows),
        };
    const detail: ForwardDetail = {
      phase: step.phase, batch: step.batch, k: step.k, rows: step.rows, capturing, speculation: step.speculation,
      input: step.input, output: step.output, tables: step.tables,
      stateSlots: Array.from({ length: step.batch }, (_, p) => step.host.states[p]?.slot),
      hostSeqLens: Array.from(step.host.seqLens.subarray(0, step.batch)),
      hostRowStarts: Array.from(step.host.rowStarts.subarray(0, step.batch + 1)),
      hostTokens: Array.from(step.host.tokens.subarray(0, step.rows)),
      ...(device ? { device } : {}),
    };
    this.log.record({ call: 'forward', layer: this.name, args: [], capturing, forward: detail });

    // Host bookkeeping, as a KV-cache layer keeps its length.
    step.host.states.forEach((s, p) => {
      if (!s) return;
      const rows = step.phase === 'prefill' ? step.host.rowStarts[p + 1]! - step.host.rowStarts[p]! : step.k;
      s.length = step.host.seqLens[p]! + rows;
    });

    this.gpu.launch(stepKernel, { grid: Math.max(1, step.batch), block: 32, stream: step.stream }, {
      input: step.input, output: step.output, state: this.stateBuffer,
      slots: t.slots, seqLens: t.seqLens, rowStarts: t.rowStarts, tokens: t.tokens, positions: t.positions,
      pending: this.pendingRows, folded: this.foldedBuffer, batch: step.batch, width: this.width, salt: this.salt, foldPending: this.foldPending,
    });
  }

  /** Rows folded per slot (carried mode), read from the device. */
  readFolded(): number[] {
    return Array.from(new Uint32Array(this.gpu.download(this.foldedBuffer, this.limits.maxSeqs * 4).slice().buffer));
  }

  /** The recurrent state row of a slot, read from the device. */
  readState(slot: number): Float32Array {
    return new Float32Array(this.gpu.download(this.stateBuffer + BigInt(slot * this.width * 4), this.width * 4).slice().buffer);
  }

  dispose(): void {
    for (const p of this.#own) this.gpu.free(p);
  }
}

export interface RecordingLayerOptions extends KernelLayerOptions {
  /** gdnWoaStashSeqFloats' answer; undefined: write-on-accept unsupported. */
  readonly woaStashFloats?: number;
  /** gdnCarrySeqFloats' answer; undefined: carried state unsupported. */
  readonly carry?: GdnCarrySize;
  /** In carried mode, the kernel folds and clears `pendingRows[slot]` (one layer of a stack should). */
  readonly foldsCarried?: boolean;
  /** Rows the host-tracked cache holds (default limits.maxSeqLen). */
  readonly capacity?: number;
}

/** The kernel layer with every hook of LayerGraphHooks and LayerWriteOnAccept, each one logged. */
export class RecordingLayer extends KernelLayer {
  override readonly type = 'test-recording';
  readonly capacity: number;
  readonly woaStashFloats: number | undefined;
  readonly carry: GdnCarrySize | undefined;
  readonly #foldsCarried: boolean;
  /** When true, checkReplayRoom throws whatever the lengths. */
  failRoom = false;
  /** gdnVerifyRunBatched's answer (undefined: no batched verify of its own). */
  runBatched: boolean | undefined = undefined;
  woaBinding: { flag: DevicePtr; stash: DevicePtr; seqs: number } | undefined;
  carryBinding: GdnCarryBinding | undefined;
  /** i32[1 + 2·maxBatch]: what the last gdnFoldAccepted saw on the device, copied by a kernel in stream order. */
  readonly foldSnapshot: DevicePtr;

  constructor(options: RecordingLayerOptions) {
    super(options);
    this.capacity = options.capacity ?? options.limits.maxSeqLen;
    this.woaStashFloats = options.woaStashFloats;
    this.carry = options.carry;
    this.#foldsCarried = options.foldsCarried ?? false;
    this.foldSnapshot = this.allocOwn(4 * (1 + 2 * options.limits.maxBatch));
    this.gpu.upload(this.foldSnapshot, new Int32Array(1 + 2 * options.limits.maxBatch));
  }

  #note(call: HookName, slot: number | undefined, args: unknown[], stream?: Stream): void {
    const capturing = stream ? this.gpu.isCapturing(stream) : undefined;
    this.log.record({ call, layer: this.name, ...(slot === undefined ? {} : { slot }), args, ...(capturing === undefined ? {} : { capturing }) });
  }

  decodePrestage(tokens: Int32Array, state: RecordingState, gpu: GpuBackend, stream: Stream): void {
    if (gpu !== this.gpu) throw new Error(`${this.name}: decodePrestage got another backend`);
    this.#note('decodePrestage', state.slot, [Array.from(tokens)], stream);
    state.prestages++;
    state.lastTokens = Array.from(tokens);
  }

  decodePrestageRearm(state: RecordingState): void {
    this.#note('decodePrestageRearm', state.slot, []);
  }

  checkReplayRoom(state: RecordingState, seqLen: number, k: number): void {
    this.#note('checkReplayRoom', state.slot, [seqLen, k]);
    if (this.failRoom || seqLen + k > this.capacity) throw new ReplayRoomError(this.name, seqLen, k, this.capacity);
  }

  syncReplayedStep(state: RecordingState, seqLen: number, k: number): void {
    this.#note('syncReplayedStep', state.slot, [seqLen, k]);
    state.length = seqLen + k;
  }

  gdnWoaStashSeqFloats(): number | undefined {
    this.#note('gdnWoaStashSeqFloats', undefined, []);
    return this.woaStashFloats;
  }

  gdnWoaBind(flag: DevicePtr, stash: DevicePtr, seqs: number): void {
    this.#note('gdnWoaBind', undefined, [flag, stash, seqs]);
    this.woaBinding = { flag, stash, seqs };
  }

  gdnCarrySeqFloats(): GdnCarrySize | undefined {
    this.#note('gdnCarrySeqFloats', undefined, []);
    return this.carry;
  }

  gdnCarryBind(binding: GdnCarryBinding): void {
    this.#note('gdnCarryBind', undefined, [binding]);
    this.carryBinding = binding;
    if (this.#foldsCarried) {
      this.pendingRows = binding.pendingRows;
      this.foldPending = 1;
    }
  }

  gdnVerifyRunBatched(states: readonly RecordingState[], kk: number, wyn: number, wyTables: DevicePtr): boolean | undefined {
    this.#note('gdnVerifyRunBatched', undefined, [states.map((s) => s.slot), kk, wyn, wyTables]);
    return this.runBatched;
  }

  gdnFoldAccepted(gpu: GpuBackend, slotTable: DevicePtr, naTab: DevicePtr, kRows: number, n: number, stream: Stream): boolean {
    this.#note('gdnFoldAccepted', undefined, [slotTable, naTab, kRows, n], stream);
    gpu.launch(foldSnapshotKernel, { grid: 1, block: 1, stream }, { out: this.foldSnapshot, slotTable, naTab, n });
    return this.woaStashFloats !== undefined;
  }

  /** What the last gdnFoldAccepted's kernel read: the slot table and the accepted counts, n each. */
  readFoldSnapshot(): { n: number; slots: number[]; accepted: number[] } {
    const words = new Int32Array(this.gpu.download(this.foldSnapshot, 4 * (1 + 2 * this.limits.maxBatch)).slice().buffer);
    const n = words[0]!;
    return { n, slots: Array.from(words.subarray(1, 1 + n)), accepted: Array.from(words.subarray(1 + n, 1 + 2 * n)) };
  }
}
