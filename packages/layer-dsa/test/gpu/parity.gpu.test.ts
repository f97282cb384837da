// The CUDA kernels against their CPU twins: the same layer stack (full + shared) and the same
// steps on CpuBackend and on CudaBackend, outputs compared row by row, for every variant and
// cache format. A selection flip would show as a large error on one row.
import { CpuBackend } from '@metrale/cpu-backend';
import { SeededRandom, type GpuBackend, type Sequence } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { configOf, GLM5, GLM53, pack, randomRows, randomWeights, relErr, Rig, type Shape } from '../dsa-setup.js';
import { chooseDevice } from './device.js';

const cuda = await chooseDevice();
if (!cuda.available) console.warn(`[layer-dsa gpu] kernel parity skipped: ${cuda.reason}`);

const limits = { maxSeqs: 3, maxSeqLen: 160, maxBatch: 3, maxK: 4, maxRows: 160 };

function run(gpu: GpuBackend, shape: Shape, extra: Record<string, unknown>): Float32Array[] {
  const rig = new Rig(configOf(shape, extra), [randomWeights(shape, 41).tensors, randomWeights(shape, 42, false).tensors], limits, { gpu });
  const rnd = new SeededRandom(7);
  const outs: Float32Array[] = [];
  try {
    const seqs: Sequence[] = [rig.driver.open(), rig.driver.open(), rig.driver.open()];
    outs.push(rig.prefill(seqs, [100, 5, 37], pack(randomRows(rnd, 142, shape.hidden))));
    for (let i = 0; i < 4; i++) outs.push(rig.decode(seqs, pack(randomRows(rnd, 3, shape.hidden))).out);
    outs.push(rig.verify(seqs, 4, pack(randomRows(rnd, 12, shape.hidden)), [1, 4, 0]).out);
    outs.push(rig.decode(seqs, pack(randomRows(rnd, 3, shape.hidden))).out);
    outs.push(rig.verify(seqs, 4, pack(randomRows(rnd, 12, shape.hidden)), [3, 2, 4]).out);
    outs.push(rig.decode(seqs, pack(randomRows(rnd, 3, shape.hidden))).out);
  } finally {
    rig.dispose();
  }
  return outs;
}

describe.skipIf(!cuda.available)('CUDA kernels match their CPU twins', () => {
  const cases: [string, Shape, Record<string, unknown>, number][] = [
    ['GLM-5, f32 caches', GLM5, { metrale_indexer_cache_dtype: 'f32' }, 1e-5],
    ['GLM-5, bf16 indexer keys', GLM5, { metrale_indexer_cache_dtype: 'bf16' }, 1e-5],
    ['GLM-5, fp8 indexer keys, bf16 MLA cache', GLM5, { metrale_indexer_cache_dtype: 'fp8', metrale_kv_cache_dtype: 'bf16' }, 1e-3],
    ['GLM-5.3, pools of 4', GLM53, { metrale_indexer_cache_dtype: 'bf16' }, 1e-5],
  ];
  for (const [name, shape, extra, bound] of cases) {
    it(name, () => {
      const cpu = run(new CpuBackend(), shape, extra);
      const gpu = cuda.create();
      let dev: Float32Array[];
      try {
        dev = run(gpu, shape, extra);
      } finally {
        gpu.dispose();
      }
      cpu.forEach((c, i) => {
        const rows = c.length / shape.hidden;
        for (let r = 0; r < rows; r++) {
          const a = dev[i]!.subarray(r * shape.hidden, (r + 1) * shape.hidden);
          const b = c.subarray(r * shape.hidden, (r + 1) * shape.hidden);
          expect(relErr(a, b), `step ${i} row ${r}`).toBeLessThan(bound);
        }
      });
    });
  }
});
