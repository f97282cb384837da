import {
  ReplayRoomError,
  ReplaySyncError,
  WeightsError,
  expectShape,
  toF32,
  type CreateLayerContext,
  type DevicePtr,
  type GpuBackend,
  type LayerState,
  type LayerStep,
  type TransformerLayer,
} from '@metrale/core';
import { readSlidingWindowConfig } from './sliding-window-config.js';
import { appendKernel, attendKernel } from './sliding-window-kernels.js';

/** Host bookkeeping of one sequence: how many rows its cache holds. */
export interface SlidingWindowState extends LayerState {
  /** Rows written into this slot's cache (ahead of the committed length after a verify). */
  length: number;
}

/**
 * Sliding-window attention with identity projections: each row attends, with softmax(q·k/√d),
 * to the last `sliding_window` rows of its sequence (itself included), keys and values being the
 * cached rows; the result is scaled by `gain`. The cache holds `maxSeqLen` rows per slot and its
 * length is tracked on the host, which is why the layer implements the room check and the replay
 * sync.
 */
export class SlidingWindowLayer implements TransformerLayer<SlidingWindowState> {
  readonly type = 'sliding-window';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly hidden: number;
  readonly window: number;
  readonly capacity: number;
  protected readonly gpu: GpuBackend;
  protected readonly cache: DevicePtr;
  protected readonly gain: DevicePtr;
  readonly #states = new Set<SlidingWindowState>();

  constructor(context: CreateLayerContext) {
    const { hidden, window } = readSlidingWindowConfig(context.config);
    const gain = context.weights.get('gain');
    expectShape(gain, [hidden], context.weights.origin);
    const values = toF32(gain);
    if (values.some((v) => !Number.isFinite(v))) throw new WeightsError(`tensor 'gain' holds a non-finite value`, context.weights.origin);
    this.gpu = context.gpu;
    this.hidden = hidden;
    this.window = window;
    this.capacity = context.limits.maxSeqLen;
    this.inputRowBytes = this.outputRowBytes = hidden * 4;
    this.gain = this.gpu.alloc(hidden * 4);
    this.cache = this.gpu.alloc(context.limits.maxSeqs * this.capacity * hidden * 4);
    this.gpu.upload(this.gain, values);
  }

  openState(slot: number): SlidingWindowState {
    // Rows past `length` are never read before being written, so the slot needs no clearing.
    const state = { slot, length: 0 };
    this.#states.add(state);
    return state;
  }

  closeState(state: SlidingWindowState): void {
    this.#states.delete(state);
  }

  /** Rows held in the cache across all open sequences (host-tracked: no device read). */
  occupancy(): number {
    let rows = 0;
    for (const s of this.#states) rows += s.length;
    return rows;
  }

  inspectState(state: SlidingWindowState): unknown {
    return { length: state.length };
  }

  checkReplayRoom(state: SlidingWindowState, seqLen: number, k: number): void {
    if (seqLen + k > this.capacity) throw new ReplayRoomError(`${this.type} (slot ${state.slot})`, seqLen, k, this.capacity);
  }

  syncReplayedStep(state: SlidingWindowState, seqLen: number, k: number): void {
    if (state.length < seqLen) {
      throw new ReplaySyncError(`${this.type} (slot ${state.slot}): host length ${state.length} is behind the sequence length ${seqLen}; a step ran without its bookkeeping`);
    }
    // Rows past seqLen were rejected by the last verify: rewind, then count this step's rows.
    state.length = seqLen + k;
  }

  forward(step: LayerStep<SlidingWindowState>): void {
    const { host } = step;
    // Refuse before launching anything, as the room check does for replays.
    for (let p = 0; p < step.batch; p++) {
      const state = host.states[p];
      if (!state) continue;
      const rows = host.rowStarts[p + 1]! - host.rowStarts[p]!;
      this.checkReplayRoom(state, host.seqLens[p]!, rows);
    }
    this.launch(step);
    for (let p = 0; p < step.batch; p++) {
      const state = host.states[p];
      if (state) state.length = host.seqLens[p]! + host.rowStarts[p + 1]! - host.rowStarts[p]!;
    }
  }

  /** The kernels of one step; every per-step value comes from the step's device tables. */
  protected launch(step: LayerStep<SlidingWindowState>): void {
    const { tables, batch, rows, stream } = step;
    const common = { slots: tables.slots, rowStarts: tables.rowStarts, positions: tables.positions, batch, hidden: this.hidden, capacity: this.capacity };
    const block = Math.min(256, 32 * Math.ceil(this.hidden / 32));
    this.gpu.launch(appendKernel, { grid: rows, block, stream }, { ...common, input: step.input, cache: this.cache });
    this.gpu.launch(
      attendKernel,
      { grid: rows, block, stream, sharedBytes: 4 * (this.window + 32) },
      { ...common, input: step.input, output: step.output, cache: this.cache, gain: this.gain, window: this.window, scale: 1 / Math.sqrt(this.hidden) },
    );
  }

  dispose(): void {
    this.gpu.free(this.cache);
    this.gpu.free(this.gain);
  }
}
