import type { StepTables } from '../contract/layer.js';
import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend, GpuEvent, HostBuffer, Stream } from '../device/gpu-backend.js';

/** Where each table sits, for a step of `batch` positions and `rows` rows: packed, so one copy uploads them all. */
export interface TableLayout {
  readonly batch: number;
  readonly rows: number;
  /** i32 offsets. */
  readonly slots: number;
  readonly seqLens: number;
  readonly rowStarts: number;
  readonly tokens: number;
  readonly positions: number;
  /** Total i32 words. */
  readonly words: number;
}

export function tableLayout(batch: number, rows: number): TableLayout {
  const slots = 0;
  const seqLens = batch;
  const rowStarts = 2 * batch;
  const tokens = 3 * batch + 1;
  const positions = tokens + rows;
  return { batch, rows, slots, seqLens, rowStarts, tokens, positions, words: positions + rows };
}

/** Host views of one staging set, laid out for one step. */
export interface HostTables {
  readonly layout: TableLayout;
  readonly slots: Int32Array;
  readonly seqLens: Int32Array;
  readonly rowStarts: Int32Array;
  readonly tokens: Int32Array;
  readonly positions: Int32Array;
  /** Staging for the step's input rows. */
  readonly input: Uint8Array;
}

interface StagingSet {
  readonly buffer: HostBuffer;
  readonly words: Int32Array;
  readonly input: Uint8Array;
  readonly done: GpuEvent;
  used: boolean;
}

/**
 * The step's device tables at fixed addresses, and two pinned staging sets used in turn: a set is
 * refilled only after the copies of the step that last used it have run, so the host can prepare
 * step n+1 while step n is still on the device.
 */
export class StepTableStore {
  readonly device: DevicePtr;
  readonly #sets: StagingSet[] = [];
  #next = 0;
  readonly #tablesByLayout = new Map<string, { layout: TableLayout; tables: StepTables; views: HostTables[] }>();

  /** The slot table of every layout sits at the start of the block: one address for all steps. */
  get slotTable(): DevicePtr {
    return this.device;
  }

  constructor(
    private readonly gpu: GpuBackend,
    maxBatch: number,
    maxRows: number,
    private readonly inputRowBytes: number,
  ) {
    const maxWords = tableLayout(maxBatch, maxRows).words;
    this.device = gpu.alloc(maxWords * 4);
    for (let i = 0; i < 2; i++) {
      const inputBytes = maxRows * inputRowBytes;
      const buffer = gpu.allocHost(maxWords * 4 + inputBytes);
      const b = buffer.bytes;
      this.#sets.push({
        buffer,
        words: new Int32Array(b.buffer, b.byteOffset, maxWords),
        input: b.subarray(maxWords * 4, maxWords * 4 + inputBytes),
        done: gpu.createEvent(),
        used: false,
      });
    }
  }

  /** The device tables and both sets' host views for a layout, made once per (batch, rows). */
  #forLayout(batch: number, rows: number) {
    const key = `${batch}:${rows}`;
    let entry = this.#tablesByLayout.get(key);
    if (!entry) {
      const layout = tableLayout(batch, rows);
      const at = (words: number): DevicePtr => this.device + BigInt(words * 4);
      const tables: StepTables = Object.freeze({
        slots: at(layout.slots),
        seqLens: at(layout.seqLens),
        rowStarts: at(layout.rowStarts),
        tokens: at(layout.tokens),
        positions: at(layout.positions),
      });
      const views = this.#sets.map((s) => {
        const w = s.words;
        return Object.freeze({
          layout,
          slots: w.subarray(layout.slots, layout.slots + batch),
          seqLens: w.subarray(layout.seqLens, layout.seqLens + batch),
          rowStarts: w.subarray(layout.rowStarts, layout.rowStarts + batch + 1),
          tokens: w.subarray(layout.tokens, layout.tokens + rows),
          positions: w.subarray(layout.positions, layout.positions + rows),
          input: s.input.subarray(0, rows * this.inputRowBytes),
        });
      });
      entry = { layout, tables, views };
      this.#tablesByLayout.set(key, entry);
    }
    return entry;
  }

  /** Takes the next staging set (waiting for its last copies if needed) and returns its views. */
  acquire(batch: number, rows: number): { tables: StepTables; host: HostTables; set: number } {
    const set = this.#next;
    this.#next = 1 - set;
    const s = this.#sets[set]!;
    if (s.used) this.gpu.synchronizeEvent(s.done);
    const entry = this.#forLayout(batch, rows);
    return { tables: entry.tables, host: entry.views[set]!, set };
  }

  /** Enqueues the table upload (and the input rows, when given) of a set acquired for this step. */
  upload(set: number, host: HostTables, stream: Stream, inputDst: DevicePtr | undefined, inputBytes: number): void {
    const s = this.#sets[set]!;
    this.gpu.copyToDeviceAsync(this.device, s.buffer, 0, host.layout.words * 4, stream);
    if (inputDst !== undefined && inputBytes > 0) {
      this.gpu.copyToDeviceAsync(inputDst, s.buffer, s.input.byteOffset - s.buffer.bytes.byteOffset, inputBytes, stream);
    }
    this.gpu.recordEvent(s.done, stream);
    s.used = true;
  }

  dispose(): void {
    for (const s of this.#sets) {
      this.gpu.destroyEvent(s.done);
      this.gpu.freeHost(s.buffer);
    }
    this.gpu.free(this.device);
  }
}
