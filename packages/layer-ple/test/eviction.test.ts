// A per-layer table far larger than the device slot cache: 12 slots (one step's rows: maxBatch 4 ×
// maxK 3) for 200 table rows, so nearly every step evicts rows that earlier steps used, and a
// prefill of 22 rows runs in pieces of 12. Every step must still match the float64 reference.
import { describe, expect, it } from 'vitest';
import type { PleCacheStats } from '@metrale/layer-ple';
import { runAgainstReference, type Op } from './run-steps.js';
import { pleSetup } from './ple-setup.js';

const dims = { hidden: 24, perLayer: 8, layers: 4, vocab: 230, tableVocab: 200, layerIndex: 2 };

function longScenario(): Op[] {
  const ops: Op[] = [{ op: 'prefill', seqs: [0, 1, 2, 3], lengths: [9, 1, 7, 5] }];
  for (let i = 0; i < 12; i++) {
    ops.push({ op: 'decode', seqs: i % 3 === 0 ? [0, 1, 2, 3] : [3, 1, 0] });
    ops.push({ op: 'verify', seqs: [0, 1, 2, 3], k: 3, accepted: [i % 4, (i + 1) % 4, 3, 0] });
  }
  return ops;
}

describe('a table larger than the slot cache', () => {
  it('stays exact under eviction (12 slots, 200 rows, graphs on)', () => {
    let last: PleCacheStats | undefined;
    const steps = runAgainstReference(pleSetup(21, dims, { table: 'bf16' }), 4, longScenario(), {
      layerOptions: { slotCapacity: 12 },
      after: (layer) => {
        last = layer.stats();
      },
    });
    for (const [i, s] of steps.entries()) expect(s.rel, `step ${i} (${s.op}, ${s.path})`).toBeLessThan(1e-5);
    expect(steps.filter((s) => s.path === 'replay').length).toBeGreaterThan(10);
    expect(last!.capacity).toBe(12);
    expect(last!.occupied).toBe(12);
    expect(last!.evictions).toBeGreaterThan(100);
    expect(last!.hits).toBeGreaterThan(0);
    expect(last!.uploadedRowBytes).toBe(last!.misses * dims.layers * dims.perLayer * 2);
  });

  it('stays exact when tokens repeat within and across steps (a small pool, 12 slots)', () => {
    const pool = [0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 199, 200, 229, 7, 9];
    let last: PleCacheStats | undefined;
    const steps = runAgainstReference(pleSetup(22, dims), 4, longScenario(), { layerOptions: { slotCapacity: 12 }, pool, after: (l) => (last = l.stats()) });
    for (const s of steps) expect(s.rel).toBeLessThan(1e-5);
    expect(last!.hits).toBeGreaterThan(50);
    expect(last!.evictions).toBeGreaterThan(10);
  });
});
