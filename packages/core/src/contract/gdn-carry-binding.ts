import type { DevicePtr } from '../device/device-ptr.js';

/**
 * The buffers of carried-state verify, allocated by the driver and bound to a layer once, before
 * any capture; none of them ever moves. A verify records each sequence's rows in `stash` and the
 * driver writes the accepted count into `pendingRows[slot]`; the next kernel that touches the
 * slot (decode, the next verify, or a prefill continuing the sequence) folds those rows into the
 * state before its own, so a whole speculative cycle moves the state through memory once. Kernels
 * never clear the counts (every layer of the step reads them): the driver zeroes them after the
 * step, and when a sequence opens or closes in the slot.
 */
export interface GdnCarryBinding {
  /** u32, shared by all layers: 1 while carried-state verify is on. */
  readonly flag: DevicePtr;
  /** f32[seqs × stashSeqFloats], this layer's own: recorded rows (keys, corrected values, gates) and the conv stash. */
  readonly stash: DevicePtr;
  readonly stashSeqFloats: number;
  /** u32[seqs], shared, read-only to kernels: accepted rows of the last verify not yet folded, per slot. */
  readonly pendingRows: DevicePtr;
  /** i32[maxBatch], shared: batch position → slot for the current step (−1 for padding). */
  readonly slotTable: DevicePtr;
  /**
   * Conv stash of this layer: f32[seqs × convStashRows × convRowElems], the conv input rows of
   * each slot's last verify (how the rows are placed within a slot's convStashRows is the layer's).
   */
  readonly convStash: DevicePtr;
  readonly convRowElems: number;
  /** Conv input rows per slot in `convStash`: the largest `convStashRows` the layers asked for (default maxK). */
  readonly convStashRows: number;
  /** Rows per slot in `stash` (the driver's maxK). */
  readonly maxK: number;
  readonly seqs: number;
  readonly maxBatch: number;
}
