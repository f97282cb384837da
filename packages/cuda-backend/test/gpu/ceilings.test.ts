// measureCeilings on the CUDA backend, at small sizes (the benches run it at 1 GiB and 8192³):
// events, copies and cuBLASLt together, every buffer returned to the pool.
import { expect, it } from 'vitest';
import { measureCeilings } from '../../src/index.js';
import { describeGpu, useBackend } from './gpu-setup.js';

describeGpu('ceilings: copy bandwidth and bf16 GEMM rate', () => {
  const gpu = useBackend();

  it('measures both with device events and frees what it allocated', () => {
    const b = gpu();
    const before = b.poolStats();
    const lines: string[] = [];
    const c = measureCeilings(b, { copyBytes: 4 * 2 ** 20, gemmSize: 128, copyReps: 3, gemmReps: 3, warmup: 1, log: (l) => lines.push(l) });
    expect(c.errors).toEqual([]);
    expect(c.copy).toMatchObject({ bytes: 8 * 2 ** 20, reps: 3 });
    expect(c.gemm).toMatchObject({ dtype: 'bf16', size: 128, flop: 2 * 128 ** 3, reps: 3 });
    for (const t of [c.copy!, c.gemm!]) {
      expect(t.min).toBeGreaterThanOrEqual(0);
      expect(t.min).toBeLessThanOrEqual(t.ms);
      expect(t.ms).toBeLessThanOrEqual(t.max);
    }
    expect(lines).toHaveLength(2);
    expect(b.poolStats().liveBytes).toBe(before.liveBytes);
  });
});
