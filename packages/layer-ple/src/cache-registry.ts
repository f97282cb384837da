import type { FloatDtype, GpuBackend, LayerLimits, WeightSource } from '@metrale/core';
import type { PleConfig } from './ple-config.js';
import { PLE_TENSORS } from './ple-weights.js';
import type { PleCacheOptions, PleSlotCache } from './slot-cache.js';
import { isRanged } from './tensor-reader.js';

/** Slot caches in use, per backend, by key: the layers of one model on one device find one cache. */
const caches = new WeakMap<GpuBackend, Map<string, PleSlotCache>>();

/** Ids of in-memory tensor storage, for keys (object identity, not contents). */
const storageIds = new WeakMap<object, number>();
let nextStorageId = 1;

function storageId(data: Uint8Array): string {
  let id = storageIds.get(data.buffer);
  if (id === undefined) {
    id = nextStorageId++;
    storageIds.set(data.buffer, id);
  }
  return `mem#${id}+${data.byteOffset}`;
}

/** Identity of a tensor's storage: the file it is read from, or the memory it lives in. */
function tensorIdentity(source: WeightSource, name: string): string {
  if (isRanged(source)) return `file:${source.origin}:${name}`;
  return storageId(source.get(name).data);
}

/**
 * The key under which layers share a slot cache: the same table and embedding (by file, or by the
 * very same memory), the same shapes, row type, limits and cache options.
 */
export function cacheKey(source: WeightSource, cfg: PleConfig, limits: LayerLimits, rows: FloatDtype, options: PleCacheOptions): string {
  return [
    tensorIdentity(source, PLE_TENSORS.table),
    tensorIdentity(source, PLE_TENSORS.embed),
    tensorIdentity(source, PLE_TENSORS.projectionNorm),
    `D${cfg.hidden} P${cfg.perLayer} L${cfg.layers} V${cfg.vocab} Vp${cfg.tableVocab} eps${cfg.eps} rows ${rows}`,
    `seqs${limits.maxSeqs} batch${limits.maxBatch} k${limits.maxK} rows${limits.maxRows}`,
    `cap${options.slotCapacity ?? 'default'} staging${options.stagingChunks ?? 'default'}`,
  ].join(' | ');
}

/** The cache registered under `key` on `gpu`, or a new one made by `create` (registered until disposed). */
export function sharedCache(gpu: GpuBackend, key: string, create: (onDispose: () => void) => PleSlotCache): PleSlotCache {
  let byKey = caches.get(gpu);
  if (!byKey) {
    byKey = new Map();
    caches.set(gpu, byKey);
  }
  const found = byKey.get(key);
  if (found && !found.disposed) return found;
  const made = create(() => {
    if (byKey.get(key) === made) byKey.delete(key);
  });
  byKey.set(key, made);
  return made;
}
