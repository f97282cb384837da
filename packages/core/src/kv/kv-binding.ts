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
}

/**
 * Sizes a model's page pool and snapshot entries (from `o.memory`: measured now, so after the
 * weights and fixed buffers), makes the block table, and binds every layer that keeps paged caches
 * or saves state. The step driver calls it once, at construction.
 */
export function bindKvCache(gpu: GpuBackend, layers: readonly BindableLayer[], limits: LayerLimits, o: KvCacheOptions): { kv: KvCache; info: KvCacheInfo } {
  const pageSize = o.pageSize ?? 16;
  if (!Number.isSafeInteger(pageSize) || pageSize < 1) throw new InvalidArgumentError(`kvCache.pageSize must be a positive integer, got ${pageSize}`);
  const { maxSeqs, maxSeqLen } = limits;
  const pagesPerSeq = Math.ceil(maxSeqLen / pageSize);
  const pageBytes = layers.reduce((a, e) => a + e.hooks.kvPageBytes(pageSize), 0);
  const snapshotBytes = layers.reduce((a, e) => a + (e.savesState ? e.hooks.stateSnapshotBytes() : 0), 0);
  let pages = o.pages ?? maxSeqs * pagesPerSeq;
  let snapshots = snapshotBytes > 0 ? (o.snapshots ?? 2 * maxSeqs) : 0;
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
  try {
    const binding = Object.freeze({ pageSize, pages, pagesPerSeq, blockTable: kv.table.device });
    for (const e of layers) {
      e.hooks.kvBind(binding);
      if (e.savesState) e.hooks.stateSnapshotBind(snapshots);
    }
  } catch (error) {
    kv.dispose();
    throw error;
  }
  const info = Object.freeze({ pageSize, pages, tokens: pages * pageSize, pageBytes, snapshotBytes, snapshots, bytes: pages * pageBytes + snapshots * snapshotBytes });
  return { kv, info };
}
