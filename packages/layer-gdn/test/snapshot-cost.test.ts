import { CpuBackend } from '@metrale/cpu-backend';
import { MemoryWeightSource, SeededRandom, StepDriver, type LayerLimits } from '@metrale/core';
import plugin from '@metrale/layer-gdn';
import { describe, expect, it } from 'vitest';
import { configOf, randomWeights, type Shape } from './gdn-setup.js';

// What prefix caching costs a GDN layer on the CPU path, measured: saving the state at a block
// boundary (two device copies) against prefilling the chunk that ends there.
const SHAPE: Shape = { hidden: 64, hk: 4, hv: 8, dk: 32, dv: 32, K: 4 };

describe('GDN state snapshots for prefix caching (CPU)', () => {
  it('saving the state at a chunk end costs a small fraction of prefilling the chunk', () => {
    const limits: LayerLimits = { maxSeqs: 2, maxSeqLen: 512, maxBatch: 2, maxK: 1, maxRows: 128 };
    const gpu = new CpuBackend();
    const layer = plugin.create({ gpu, layerType: 'gdn', config: configOf(SHAPE), layerIndex: 0, weights: new MemoryWeightSource('w', randomWeights(SHAPE).tensors), limits });
    const driver = new StepDriver({ gpu, layers: [layer], limits, kvCache: { pageSize: 16, snapshots: 64 }, graphs: false });
    const seq = driver.open();
    const input = new SeededRandom(3).normals(128 * SHAPE.hidden);
    const t0 = performance.now();
    driver.prefill({ seqs: [seq], lengths: [128], input });
    gpu.synchronize();
    const prefillMs = performance.now() - t0;
    const t1 = performance.now();
    for (let i = 0; i < 64; i++) driver.saveSnapshot(seq, `h${i}`);
    gpu.synchronize();
    const saveMs = (performance.now() - t1) / 64;
    const bytes = layer.stateSnapshotBytes!();
    console.log(`[layer-gdn] snapshot of ${bytes} bytes: ${saveMs.toFixed(3)} ms to save; prefilling the 128-row chunk it ends: ${prefillMs.toFixed(1)} ms (${(prefillMs / saveMs).toFixed(0)}×)`);
    expect(bytes).toBe(4 * (SHAPE.hv * SHAPE.dk * SHAPE.dv + SHAPE.K * (2 * SHAPE.hk * SHAPE.dk + SHAPE.hv * SHAPE.dv)));
    expect(saveMs).toBeLessThan(prefillMs / 20);
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  });
});
