import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import { SeededRandom, StepDriver, type LayerLimits, type LayerState, type TransformerLayer } from '../src/index.js';
import { checkDefaultHooks } from '../src/testing/check-default-hooks.js';
import { PagedContextLayer } from './support/paged-context-layer.js';

const V = 24;
// 8 slots of 2^16 rows in pages of 4: a pool of up to 131072 pages (16 bytes each), more than the memory below holds.
const limits: LayerLimits = { maxSeqs: 8, maxSeqLen: 1 << 16, maxBatch: 8, maxK: 1, maxRows: 32 };
const MOST_PAGES = limits.maxSeqs * (limits.maxSeqLen / 4);
const kvCache = { pageSize: 4, memory: { utilization: 0.55 } } as const;

function rig(): { gpu: CpuBackend; layer: PagedContextLayer; free: () => number } {
  const gpu = new CpuBackend({ memoryLimit: 4 << 20 });
  const layer = new PagedContextLayer(gpu, V, new SeededRandom(3).normals(V * V), limits.maxSeqs, true);
  return { gpu, layer, free: () => gpu.memoryInfo().free };
}

/** A prefill and two decodes of one sequence; the logits of the last decode. */
function run(driver: StepDriver): Float32Array {
  const seq = driver.open();
  driver.prefill({ seqs: [seq], lengths: [6], tokens: Int32Array.from([1, 5, 2, 7, 3, 9]) });
  driver.decode({ seqs: [seq], tokens: Int32Array.of(4) });
  const out = driver.readOutputF32(driver.decode({ seqs: [seq], tokens: Int32Array.of(8) }));
  driver.close(seq);
  return out;
}

describe('a disposed step driver gives back the pages and snapshot entries it bound', () => {
  it('a later driver over the same layers sizes its pool from the same free memory, and runs the same', () => {
    const { gpu, layer, free } = rig();
    const before = free();
    const first = new StepDriver({ gpu, layers: [layer], limits, kvCache });
    // Memory, not the slots, bounds the pool, and the layer keeps snapshots of its state.
    expect(first.kvInfo.pages).toBeLessThan(MOST_PAGES);
    expect(first.kvInfo.snapshots).toBeGreaterThan(0);
    const bound = before - free();
    expect(bound).toBeGreaterThan(first.kvInfo.bytes);
    const want = run(first);
    first.dispose();
    // Pages, snapshot entries, block table and the driver's buffers: all of it back.
    expect(free()).toBe(before);
    const second = new StepDriver({ gpu, layers: [layer], limits, kvCache });
    expect(second.kvInfo).toEqual(first.kvInfo);
    expect(run(second)).toEqual(want);
    second.dispose();
    expect(free()).toBe(before);
    layer.dispose();
    gpu.dispose();
  });

  it('a driver not disposed yet loses its binding to the next one before it measures, and its dispose leaves the next one\'s', () => {
    const { gpu, layer, free } = rig();
    const before = free();
    const first = new StepDriver({ gpu, layers: [layer], limits, kvCache });
    const fixed = before - free() - first.kvInfo.bytes;
    const second = new StepDriver({ gpu, layers: [layer], limits, kvCache });
    // The earlier pool was not counted as taken: only the first driver's own buffers (its block table among them) were.
    expect(second.kvInfo.snapshots).toBe(first.kvInfo.snapshots);
    expect(Math.abs((first.kvInfo.pages - second.kvInfo.pages) * first.kvInfo.pageBytes - fixed)).toBeLessThan(first.kvInfo.pageBytes);
    const held = free();
    first.dispose();
    // Only the first driver's own buffers went: the layer keeps the second's pages and entries.
    expect(free()).toBeGreaterThan(held);
    const want = run(second);
    second.dispose();
    expect(free()).toBe(before);
    const third = new StepDriver({ gpu, layers: [layer], limits, kvCache });
    expect(run(third)).toEqual(want);
    third.dispose();
    layer.dispose();
    gpu.dispose();
  });

  it('a bind that fails frees what the layers bound before it', () => {
    const { gpu, layer, free } = rig();
    const refusing: TransformerLayer<LayerState> = {
      type: 'refusing', inputRowBytes: 4 * V, outputRowBytes: 4 * V,
      openState: (slot) => ({ slot }), closeState: () => {}, forward: () => {}, dispose: () => {},
      kvPageBytes: () => 4,
      kvBind: () => {
        throw new Error('no room for my pages');
      },
    };
    const before = free();
    expect(() => new StepDriver({ gpu, layers: [layer, refusing], limits, kvCache })).toThrow(/no room for my pages/);
    expect(free()).toBe(before);
    // The layer binds again as if never bound.
    const driver = new StepDriver({ gpu, layers: [layer], limits, kvCache });
    run(driver);
    driver.dispose();
    expect(free()).toBe(before);
    layer.dispose();
    gpu.dispose();
  });

  it('kvUnbind comes with kvBind', () => {
    const gpu = new CpuBackend();
    const loose: TransformerLayer<LayerState> = {
      type: 'loose', inputRowBytes: 4, outputRowBytes: 4,
      openState: (slot) => ({ slot }), closeState: () => {}, forward: () => {}, dispose: () => {},
      kvUnbind: () => {},
    };
    expect(checkDefaultHooks(loose)).toMatchObject({ status: 'fail', detail: expect.stringMatching(/kvUnbind without kvBind/) });
    gpu.dispose();
  });
});
