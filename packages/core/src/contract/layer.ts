import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend, Stream } from '../device/gpu-backend.js';
import type { LayerGraphHooks } from './graph-hooks.js';
import type { LayerState } from './layer-state.js';
import type { LayerSequenceCache } from './sequence-cache.js';
import type { LayerWriteOnAccept } from './write-on-accept.js';

export type StepPhase = 'prefill' | 'decode' | 'verify';

/** How verify rows are made reversible for layers that support it. */
export type SpeculationMode = 'none' | 'write-on-accept' | 'carried';

/**
 * Device twins of the step's host values, at addresses fixed for the driver's lifetime and
 * refreshed before every launch or replay. A kernel that must work under replay reads these,
 * never a host value passed as an argument.
 */
export interface StepTables {
  /** i32[batch]: batch position → state slot; −1 for padding. */
  readonly slots: DevicePtr;
  /** i32[batch]: committed sequence length before this step; 1 for padding. */
  readonly seqLens: DevicePtr;
  /** i32[batch + 1]: first row of each batch position (decode p, verify p·k, prefill ragged). */
  readonly rowStarts: DevicePtr;
  /** i32[rows]: the token id of every row (0 for padding). */
  readonly tokens: DevicePtr;
  /** i32[rows]: the position of every row in its sequence (0 for padding). */
  readonly positions: DevicePtr;
}

/** One step as a layer sees it. */
export interface LayerStep<S extends LayerState = LayerState> {
  readonly phase: StepPhase;
  readonly gpu: GpuBackend;
  readonly stream: Stream;
  /** Batch positions: the padded bucket for decode and verify, the sequence count for prefill. */
  readonly batch: number;
  /** Rows per batch position for decode (1) and verify (k); 0 for prefill, whose rows are ragged. */
  readonly k: number;
  readonly rows: number;
  /** rows × layer.inputRowBytes. */
  readonly input: DevicePtr;
  /** rows × layer.outputRowBytes. */
  readonly output: DevicePtr;
  readonly tables: StepTables;
  readonly speculation: SpeculationMode;
  /**
   * Host mirror of the step. Use it for host bookkeeping; a value read from here and passed to a
   * kernel is frozen into a captured graph, so decode and verify kernels read `tables` instead.
   */
  readonly host: {
    /** Per batch position; undefined for padding. */
    readonly states: readonly (S | undefined)[];
    readonly seqLens: Int32Array;
    readonly rowStarts: Int32Array;
    readonly tokens: Int32Array;
  };
  /**
   * Present only when the driver times the step by layer kind (benchmarks, never during capture):
   * a composite layer calls it with a part's kind before running that part, so the time splits by
   * part. A plain layer ignores it.
   */
  readonly section?: (label: string) => void;
}

/** Capacity limits a layer is created for; it allocates its device state for all of them at once. */
export interface LayerLimits {
  /** Sequence slots. */
  readonly maxSeqs: number;
  /** Longest sequence, in rows. */
  readonly maxSeqLen: number;
  /** Largest padded decode/verify batch. */
  readonly maxBatch: number;
  /** Largest verify width. */
  readonly maxK: number;
  /** Largest number of rows in one step (prefill chunk or batch × k). */
  readonly maxRows: number;
}

/**
 * A layer: its forward paths plus the hook groups (all optional, no-op defaults). One layer object
 * serves every sequence; per-sequence host bookkeeping lives in the `LayerState` it opens for each.
 */
export interface TransformerLayer<S extends LayerState = LayerState>
  extends LayerGraphHooks<S>,
    LayerWriteOnAccept<S>,
    LayerSequenceCache<S> {
  /** The layer type as the plugin registered it (`gdn`, `sliding-window`, ...). */
  readonly type: string;
  /** Bytes of one input row and one output row. */
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  /** A sequence begins in `slot`: reset that slot's state and return its host bookkeeping. */
  openState(slot: number): S;
  /** The sequence in this state ended; its slot may be reused. */
  closeState(state: S): void;
  /** Runs one step: eagerly, or while the driver captures it into a graph. */
  forward(step: LayerStep<S>): void;
  /**
   * The state's host bookkeeping as plain data (cache lengths, prestage work done). The
   * conformance kit compares it across paths that must agree: replay and eager, failed capture
   * and never captured, rejected rows and rows never seen. Leave out what may differ without
   * changing any result, such as the order of an LRU that rejected rows' tokens touched.
   */
  inspectState?(state: S): unknown;
  /** Frees the layer's device memory. */
  dispose(): void;
}
