import type { ResolvedHooks } from '../contract/default-hooks.js';
import type { LayerLimits } from '../contract/layer.js';
import type { LayerState } from '../contract/layer-state.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { InvalidArgumentError } from '../errors.js';
import { KvCache } from './kv-cache.js';
import { kvBudget, sizeKvCache, type KvMemory } from './kv-sizing.js';

export interface KvCacheOptions {
  /** Rows per page (default 16). */
  readonly pageSize?: number;
  /** Pages in the pool (default: every slot at maxSeqLen); or `memory` to size it from. */
  readonly pages?: number;
  /** Size the pool (and the snapshot entries) from this memory, measured once the driver's own buffers are allocated. */
  readonly memory?: KvMemory;
  /** Snapshot entries of recurrent state (default: two per slot, or a share of `memory`); 0 for none. */
  readonly snapshots?: number;
  /**
   * At most this many pages, whatever `memory` allows: a tensor-parallel leader keeps its pool no
   * larger than any follower's, so the pool that runs out first is the one the loop plans with.
   */
  readonly maxPages?: number;
}

/** How the KV cache came out: what the startup log reports. */
export interface KvCacheInfo {
  readonly pageSize: number;
  readonly pages: number;
  /** Tokens the pool holds: pages × pageSize. */
  readonly tokens: number;
  /** Bytes one page takes across every paged layer, and bytes of one snapshot across every recurrent layer. */
  readonly pageBytes: number;
  readonly snapshotBytes: number;
  readonly snapshots: number;
  /** Bytes of pages and snapshots together. */
  readonly bytes: number;
}

/** A layer as binding sees it: its hooks (defaults filled in) and whether it saves recurrent state. */
export interface BindableLayer {
  readonly hooks: ResolvedHooks<LayerState>;
  readonly savesState: boolean;
  /**
   * The layer itself, so that binding knows whose storage it holds: a new binding first unbinds a
   * layer still bound to an earlier one (before measuring free memory), and `unbind` leaves a layer
   * a later binding has taken over. Without it, `unbind` unbinds the layer whoever bound it since.
   */
  readonly layer?: object;
}

/** The binding whose pages and snapshot entries each layer holds now (the layer → that binding's token). */
const boundTo = new WeakMap<object, object>();

/** Frees what binding gave the layer: its pages and its snapshot entries. */
function release(e: BindableLayer): void {
  e.hooks.kvUnbind();
  if (e.savesState) e.hooks.stateSnapshotBind(0);
}

/** Releases every entry, even when one throws; returns the first error. */
function releaseAll(entries: readonly BindableLayer[]): { error: unknown } | undefined {
  let first: { error: unknown } | undefined;
  for (const e of entries) {
    try {
      release(e);
    } catch (error) {
      first ??= { error };
    }
  }
  return first;
}

/**
 * Sizes a model's page pool and snapshot entries (from `o.memory`: measured now, so after the
 * weights and fixed buffers), makes the block table, and binds every layer that keeps paged caches
 * or saves state. The step driver calls it once, at construction, and `unbind` when disposed: the
 * layers give back their pages and snapshot entries (`kvUnbind`, `stateSnapshotBind(0)`), so a
 * later binding over the same layers measures the same free memory.
 */
export function bindKvCache(
  gpu: GpuBackend, layers: readonly BindableLayer[], limits: LayerLimits, o: KvCacheOptions,
): { kv: KvCache; info: KvCacheInfo; unbind: () => void } {
  const pageSize = o.pageSize ?? 16;
  if (!Number.isSafeInteger(pageSize) || pageSize < 1) throw new InvalidArgumentError(`kvCache.pageSize must be a positive integer, got ${pageSize}`);
  const { maxSeqs, maxSeqLen } = limits;
  const pagesPerSeq = Math.ceil(maxSeqLen / pageSize);
  const pageBytes = layers.reduce((a, e) => a + e.hooks.kvPageBytes(pageSize), 0);
  const snapshotBytes = layers.reduce((a, e) => a + (e.savesState ? e.hooks.stateSnapshotBytes() : 0), 0);
  let pages = o.pages ?? maxSeqs * pagesPerSeq;
  let snapshots = snapshotBytes > 0 ? (o.snapshots ?? 2 * maxSeqs) : 0;
  // Layers still bound to an earlier binding (its driver not disposed) give it back now: the bind
  // below would free it anyway, and the measure must not count it as taken.
  const stale = layers.filter((e) => e.layer !== undefined && boundTo.has(e.layer));
  for (const e of stale) boundTo.delete(e.layer!);
  const failed = releaseAll(stale);
  if (failed) throw failed.error;
  if (o.memory) {
    // The block table comes out of the same memory.
    const budget = kvBudget(gpu, o.memory) - 4 * maxSeqs * pagesPerSeq;
    const size = sizeKvCache({ budget, pageBytes, snapshotBytes, maxSeqs, pagesPerSeq, pageSize, ...(o.snapshots !== undefined ? { snapshots: o.snapshots } : {}) });
    pages = o.pages ?? size.pages;
    snapshots = size.snapshots;
  }
  if (o.maxPages !== undefined) {
    if (!Number.isSafeInteger(o.maxPages) || o.maxPages < 1) throw new InvalidArgumentError(`kvCache.maxPages must be a positive integer, got ${o.maxPages}`);
    pages = Math.min(pages, o.maxPages);
  }
  const kv = new KvCache(gpu, { maxSeqs, maxSeqLen, pageSize, pages, snapshots });
  const token = {};
  const bound: BindableLayer[] = [];
  // Only the layers this binding still holds: a later one may have taken some over.
  const unbind = (): { error: unknown } | undefined => {
    const mine = bound.splice(0).filter((e) => e.layer === undefined || boundTo.get(e.layer) === token);
    for (const e of mine) if (e.layer !== undefined) boundTo.delete(e.layer);
    return releaseAll(mine);
  };
  try {
    const binding = Object.freeze({ pageSize, pages, pagesPerSeq, blockTable: kv.table.device });
    for (const e of layers) {
      // Counted before the bind: a layer that fails halfway frees what it did allocate.
      bound.push(e);
      if (e.layer !== undefined) boundTo.set(e.layer, token);
      e.hooks.kvBind(binding);
      if (e.savesState) e.hooks.stateSnapshotBind(snapshots);
    }
  } catch (error) {
    // The bind's error is the one that matters.
    unbind();
    kv.dispose();
    throw error;
  }
  const info = Object.freeze({ pageSize, pages, tokens: pages * pageSize, pageBytes, snapshotBytes, snapshots, bytes: pages * pageBytes + snapshots * snapshotBytes });
  return {
    kv, info,
    unbind: () => {
      const failed = unbind();
      if (failed) throw failed.error;
    },
  };
}
