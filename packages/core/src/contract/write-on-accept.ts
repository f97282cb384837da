import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend, Stream } from '../device/gpu-backend.js';
import type { GdnCarryBinding } from './gdn-carry-binding.js';
import type { LayerState } from './layer-state.js';

/** What a carried-state layer asks of the driver, per sequence. */
export interface GdnCarrySize {
  /** f32 words of stash per sequence. */
  readonly stashSeqFloats: number;
  /** f32 elements of one conv input row. */
  readonly convRowElems: number;
  /**
   * Conv input rows the conv stash keeps per slot; default (absent): the driver's maxK. A layer
   * whose kernels index the conv stash as a ring by position (so that a verify can record its new
   * rows while other CTAs still read the pending ones) asks for more, e.g. 2 · maxK.
   */
  readonly convStashRows?: number;
}

/**
 * Speculative verify that never writes a recurrent state it may have to take back (Gated
 * DeltaNet). Every method is optional; an absent method answers "not supported": the sizing
 * queries return undefined, binding does nothing, `gdnVerifyRunBatched` returns undefined and
 * `gdnFoldAccepted` returns false.
 */
export interface LayerWriteOnAccept<S extends LayerState = LayerState> {
  /** f32 words of stash per sequence that write-on-accept verify needs; undefined when unsupported. */
  gdnWoaStashSeqFloats?(): number | undefined;
  /**
   * Bind the write-on-accept buffers, once, before the first graph decision: `flag` (u32, 1 while
   * write-on-accept is on) and this layer's `stash` of `seqs × gdnWoaStashSeqFloats()` f32.
   */
  gdnWoaBind?(flag: DevicePtr, stash: DevicePtr, seqs: number): void;
  /** Sizes of carried-state verify; undefined when unsupported. */
  gdnCarrySeqFloats?(): GdnCarrySize | undefined;
  /** Bind the carried-state buffers, once, before any capture. */
  gdnCarryBind?(binding: GdnCarryBinding): void;
  /**
   * Whether this layer verifies a run of adjacent sequences (`states`, batch positions 0..n−1 in
   * that order) of `kk` rows each in one batched step: its kernels over the `wyn` batch positions
   * of the step tables (the run, then padding), which find each sequence through the slot table at
   * `wyTables`. Answered from the arguments; undefined for a layer without a batched verify. The
   * driver asks before every verify, host-side, before anything of the step is written, and
   * refuses the step when any layer answers false (it verifies only batched).
   */
  gdnVerifyRunBatched?(states: readonly S[], kk: number, wyn: number, wyTables: DevicePtr): boolean | undefined;
  /**
   * Apply the accepted prefix of the last verify to the recurrent states: `slotTable` (i32[n],
   * batch position → slot), `naTab` (u32[n], accepted rows in batch order), `kRows` rows verified
   * per sequence. Returns false when the layer did nothing.
   */
  gdnFoldAccepted?(gpu: GpuBackend, slotTable: DevicePtr, naTab: DevicePtr, kRows: number, n: number, stream: Stream): boolean;
}
