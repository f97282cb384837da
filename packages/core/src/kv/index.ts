// The KV cache of a model: one page pool shared by every paged layer, the block table, prefix
// blocks known by content hash, and snapshots of recurrent state.
export { PagePool } from './page-pool.js';
export { BlockTable } from './block-table.js';
export { SnapshotStore } from './snapshot-store.js';
export { blockHashes } from './block-hash.js';
export type { KvCacheShape } from './kv-cache.js';
export { KvCache } from './kv-cache.js';
export type { KvMemory, KvSize } from './kv-sizing.js';
export type { KvCacheOptions, KvCacheInfo, BindableLayer } from './kv-binding.js';
export { bindKvCache } from './kv-binding.js';
export { kvBudget, sizeKvCache } from './kv-sizing.js';
