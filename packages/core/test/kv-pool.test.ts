import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import { BlockTable, InvalidArgumentError, KvCache, KvCacheSizeError, PagePool, SnapshotStore, blockHashes, kvBudget, sizeKvCache } from '../src/index.js';

describe('PagePool: held pages, cached blocks by hash, reclaimed least recently released first', () => {
  it('hands out free pages, then reclaims cached ones oldest first, forgetting their hash', () => {
    const pool = new PagePool(3);
    const [a, b, c] = [pool.allocate(), pool.allocate(), pool.allocate()];
    expect([a, b, c]).toEqual([0, 1, 2]);
    expect(pool.available).toBe(0);
    expect(pool.register(a, 'A')).toBe(true);
    expect(pool.register(b, 'B')).toBe(true);
    // A hash already known keeps its page.
    expect(pool.register(c, 'A')).toBe(false);
    pool.release(b);
    pool.release(a);
    pool.release(c);
    expect(pool.available).toBe(3);
    expect(pool.cachedBlocks).toBe(2);
    // c had no hash: it is free and goes first; then the cached ones, b (released first) before a.
    expect(pool.allocate()).toBe(c);
    expect(pool.allocate()).toBe(b);
    expect(pool.lookup('B')).toBeUndefined();
    expect(pool.lookup('A')).toBe(a);
  });

  it('a cached block taken up again is no longer reclaimable; refcounts are checked', () => {
    const pool = new PagePool(2);
    const a = pool.allocate();
    pool.register(a, 'A');
    pool.retain(a);
    expect(pool.holders(a)).toBe(2);
    pool.release(a);
    pool.release(a);
    expect(pool.available).toBe(2);
    pool.retain(a);
    expect(pool.available).toBe(1);
    expect(pool.allocate()).toBe(1);
    expect(() => pool.allocate()).toThrow(/all 2 pages are held/);
    pool.release(a);
    expect(() => pool.release(a)).toThrow(/released more often than it was held/);
    expect(() => pool.retain(1 + 5)).toThrow(InvalidArgumentError);
    const fresh = new PagePool(1);
    expect(() => fresh.retain(0)).toThrow(/page 0 is free/);
  });
});

describe('SnapshotStore', () => {
  it('reuses the least recently used entry when full; a lookup counts as a use', () => {
    const s = new SnapshotStore(2);
    const a = s.take('a');
    const b = s.take('b');
    expect(s.take('a')).toBe(a);
    expect(s.lookup('a')).toBe(a);
    const c = s.take('c');
    expect(c).toBe(b);
    expect(s.has('b')).toBe(false);
    expect(s.lookup('a')).toBe(a);
  });
});

describe('blockHashes', () => {
  it('chains: a block hash names every token before the block end, and extends from known parents', () => {
    const t = [1, 2, 3, 4, 5, 6, 7, 8, 9];
    const h = blockHashes(t, 4);
    expect(h).toHaveLength(2);
    expect(blockHashes([1, 2, 3, 4, 5, 6, 7, 8], 4)).toEqual(h);
    // The same second block after a different first one hashes differently.
    expect(blockHashes([0, 2, 3, 4, 5, 6, 7, 8], 4)[1]).not.toBe(h[1]);
    expect(blockHashes(t, 4, h.slice(0, 1))).toEqual(h);
    expect(blockHashes(t, 4, [], 1)).toEqual(h.slice(0, 1));
  });
});

describe('BlockTable and KvCache', () => {
  it('uploads only the entries that changed, before the step that reads them', () => {
    const gpu = new CpuBackend();
    const table = new BlockTable(gpu, 3, 4);
    table.set(1, 2, 7);
    table.set(1, 0, 5);
    table.set(2, 3, 9);
    table.flush(gpu.defaultStream);
    gpu.synchronize();
    expect(Array.from(new Int32Array(gpu.download(table.device, 4 * 12).buffer))).toEqual([0, 0, 0, 0, 5, 0, 7, 0, 0, 0, 0, 9]);
    table.dispose();
    gpu.dispose();
  });

  it('grows slots all or nothing, shares cached prefix blocks, and releases the tail first', () => {
    const gpu = new CpuBackend();
    const kv = new KvCache(gpu, { maxSeqs: 2, maxSeqLen: 16, pageSize: 4, pages: 5, snapshots: 0 });
    kv.grow([0], [9]);
    expect(kv.held(0)).toBe(3);
    expect(() => kv.grow([0, 1], [16, 8])).toThrow(/needs 3 more page\(s\) of 4 rows, but 2 of 5 are available/);
    expect(kv.held(0)).toBe(3);
    const hashes = blockHashes(Array.from({ length: 12 }, (_, i) => i), 4);
    kv.register(0, hashes, 2);
    expect(kv.match(hashes, false)).toBe(2);
    expect(kv.match(hashes, true)).toBe(0);
    expect(kv.attach(1, hashes.slice(0, 2))).toBe(8);
    expect(kv.table.get(1, 1)).toBe(kv.table.get(0, 1));
    expect(kv.usage).toBeCloseTo(3 / 5);
    kv.release(0);
    expect(kv.available).toBe(3);
    kv.release(1);
    expect(kv.available).toBe(5);
    expect(kv.cachedBlocks).toBe(2);
    expect(() => kv.attach(1, ['nope'])).toThrow(/block 0 of the prefix is not cached/);
    kv.dispose();
    gpu.dispose();
  });
});

describe('sizing the pool from memory', () => {
  it('takes the bytes given or free − (1 − u) · total, and gives snapshots a tenth at most', () => {
    const gpu = new CpuBackend({ memoryLimit: 1000_000 });
    expect(kvBudget(gpu, { bytes: 5000 })).toBe(5000);
    const used = gpu.alloc(100_000);
    expect(kvBudget(gpu, { utilization: 0.5 })).toBe(1000_000 - 100_000 - 500_000);
    expect(() => kvBudget(gpu, { utilization: 0.05 })).toThrow(KvCacheSizeError);
    expect(() => kvBudget(gpu, { utilization: 1.5 })).toThrow(/in \(0, 1\]/);
    gpu.free(used);
    expect(sizeKvCache({ budget: 10_000, pageBytes: 100, snapshotBytes: 0, maxSeqs: 4, pagesPerSeq: 1000, pageSize: 16 })).toEqual({ budget: 10_000, pages: 100, snapshots: 0 });
    expect(sizeKvCache({ budget: 10_000, pageBytes: 100, snapshotBytes: 250, maxSeqs: 4, pagesPerSeq: 1000, pageSize: 16 })).toEqual({ budget: 10_000, pages: 90, snapshots: 4 });
    // Never more pages than every slot at full length can use.
    expect(sizeKvCache({ budget: 10_000, pageBytes: 1, snapshotBytes: 0, maxSeqs: 2, pagesPerSeq: 8, pageSize: 16 }).pages).toBe(16);
    expect(() => sizeKvCache({ budget: 50, pageBytes: 100, snapshotBytes: 0, maxSeqs: 1, pagesPerSeq: 8, pageSize: 16 })).toThrow(/50 bytes hold no page of 16 tokens/);
    gpu.dispose();
  });
});
