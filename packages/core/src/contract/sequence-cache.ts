import type { DevicePtr } from '../device/device-ptr.js';
import type { Stream } from '../device/gpu-backend.js';
import type { LayerState } from './layer-state.js';

/**
 * The shared KV page pool as a layer sees it. Every paged layer of a model stores a sequence's
 * block b (rows b·pageSize … b·pageSize + pageSize − 1) in the same page index, the one the block
 * table names, each in its own storage of `pages` pages.
 */
export interface KvPageBinding {
  /** Rows per page. */
  readonly pageSize: number;
  /** Pages in the pool: valid page indices are 0 … pages − 1. */
  readonly pages: number;
  /** Entries per slot in the block table: ⌈maxSeqLen / pageSize⌉. */
  readonly pagesPerSeq: number;
  /**
   * i32 [maxSeqs][pagesPerSeq]: slot, block → page. At a fixed address; the driver uploads the
   * entries of a step's new pages before the step (before any capture or replay), so kernels read
   * it like a step table. Entries past a sequence's pages hold a valid page index (never read as data).
   */
  readonly blockTable: DevicePtr;
}

/**
 * What a layer keeps of a sequence's earlier rows, so that the driver can share a KV page pool
 * between layers and start a sequence at a cached prefix (prefix caching). Every method is
 * optional; a layer that implements none keeps its own caches and never starts at a prefix.
 *
 * - Paged caches (attention's K/V, DSA's latent and indexer caches): `kvPageBytes` + `kvBind`
 *   (+ `kvUnbind`). The driver sizes one pool from memory and binds every such layer once, before
 *   any step; disposed, it unbinds them, so a later driver over the same layers sizes its pool from
 *   the same free memory.
 * - Recurrent state (GDN's state and conv ring): `stateSnapshotBytes` + `stateSnapshotBind` +
 *   `saveStateSnapshot`. The driver saves a sequence's state at block boundaries it chooses, into
 *   numbered entries the layer allocates at bind time.
 * - `resumeAt`: the layer can start a sequence at a cached prefix. A model starts sequences at a
 *   prefix only when every layer implements it, so a layer that keeps anything else across rows
 *   (a dense cache, a host LRU by position) leaves it out. Layers whose rows are independent
 *   implement it as a no-op.
 */
export interface LayerSequenceCache<S extends LayerState = LayerState> {
  /** Bytes one page of `pageSize` rows takes in this layer's paged caches. */
  kvPageBytes?(pageSize: number): number;
  /**
   * Allocate storage for `binding.pages` pages and read `binding.blockTable` from now on. Each step
   * driver binds its layers once, before any step; a later driver over the same layers binds them
   * again. A layer still holding an earlier binding's storage frees it first.
   */
  kvBind?(binding: KvPageBinding): void;
  /**
   * Free the pages of the current binding: the driver that bound them is gone (disposed, or its
   * construction failed). The layer stays usable: a later `kvBind` binds afresh, and a step before
   * it fails as one before any bind. Does nothing when nothing is bound or the layer was disposed.
   * A layer that leaves it out keeps its pages until the next `kvBind` or its `dispose`, and a later
   * driver sizing its pool from free memory sees them as used.
   */
  kvUnbind?(): void;
  /** Bytes of one saved state of a sequence. */
  stateSnapshotBytes?(): number;
  /**
   * Allocate `count` snapshot entries, freeing those of an earlier binding first; as `kvBind`.
   * `stateSnapshotBind(0)` frees them and allocates none: the driver's unbind (as `kvUnbind`), a
   * no-op on a disposed layer.
   */
  stateSnapshotBind?(count: number): void;
  /** Copy the sequence's committed state (as of its committed length) into entry `index`, on `stream`. */
  saveStateSnapshot?(state: S, index: number, stream: Stream): void;
  /**
   * A sequence just opened in `state` starts with `length` rows already computed: its first
   * `length / pageSize` blocks are shared pages holding them, and `snapshot` (when the model saves
   * state) is the entry holding the recurrent state at `length`. Bring host bookkeeping to
   * `length` and restore the state, on `stream`, before the sequence's first step.
   */
  resumeAt?(state: S, length: number, snapshot: number | undefined, stream: Stream): void;
}
