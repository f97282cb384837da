// The CUDA kernels against their CPU twins: the same layer stack (full + shared) and the same
// steps on CpuBackend and on CudaBackend, outputs compared row by row, for every variant and
// cache format, on the f32 path and on the bf16 one (bf16 rows, weights and scratch; with bf16 and
// with block-FP8 weights). A selection flip would show as a large error on one row. In bf16 the
// two sides differ by the GEMMs' f32 accumulation (cuBLASLt and the FP8 kernel against the CPU's
// float64 sums), which moves an output by a bf16 rounding here and there: the bound is bf16-level.
import { CpuBackend } from '@metrale/cpu-backend';
import { F32_PRECISION, SeededRandom, type GpuBackend, type HostTensor, type Precision, type Sequence, relativeL2Error } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { configOf, GLM5, GLM5_MID, GLM53, pack, randomRows, randomWeights, Rig, type Shape } from '../dsa-setup.js';
import { GLM5_FP8_LINEARS, quantizeTensors } from '../fp8-weights.js';
import { chooseDevice } from './device.js';

const cuda = await chooseDevice();
if (!cuda.available) console.warn(`[layer-dsa gpu] kernel parity skipped: ${cuda.reason}`);

const limits = { maxSeqs: 3, maxSeqLen: 160, maxBatch: 3, maxK: 4, maxRows: 160 };
const BF16: Precision = { rows: 'bf16', fp8Weights: false };
const FP8: Precision = { rows: 'bf16', fp8Weights: true };

interface Case {
  readonly name: string;
  readonly shape: Shape;
  readonly extra: Record<string, unknown>;
  readonly bound: number;
  readonly precision?: Precision;
  /** Quantize GLM-5-FP8's Linear weights (and the pool gate, for GLM-5.3). */
  readonly fp8?: boolean;
}

function weights(c: Case): HostTensor[][] {
  const layers = [randomWeights(c.shape, 41).tensors, randomWeights(c.shape, 42, false).tensors];
  if (!c.fp8) return layers;
  const names = [...GLM5_FP8_LINEARS, 'indexer.index_kpool_compress_gate'];
  return layers.map((t) => quantizeTensors(t, names).fp8);
}

function run(gpu: GpuBackend, c: Case): Float32Array[] {
  const rig = new Rig(configOf(c.shape, c.extra), weights(c), limits, { gpu, precision: c.precision ?? F32_PRECISION });
  const rnd = new SeededRandom(7);
  const h = c.shape.hidden;
  const outs: Float32Array[] = [];
  try {
    const seqs: Sequence[] = [rig.driver.open(), rig.driver.open(), rig.driver.open()];
    outs.push(rig.prefill(seqs, [100, 5, 37], pack(randomRows(rnd, 142, h))));
    for (let i = 0; i < 4; i++) outs.push(rig.decode(seqs, pack(randomRows(rnd, 3, h))).out);
    outs.push(rig.verify(seqs, 4, pack(randomRows(rnd, 12, h)), [1, 4, 0]).out);
    outs.push(rig.decode(seqs, pack(randomRows(rnd, 3, h))).out);
    outs.push(rig.verify(seqs, 4, pack(randomRows(rnd, 12, h)), [3, 2, 4]).out);
    outs.push(rig.decode(seqs, pack(randomRows(rnd, 3, h))).out);
  } finally {
    rig.dispose();
  }
  return outs;
}

describe.skipIf(!cuda.available)('CUDA kernels match their CPU twins', () => {
  const cases: Case[] = [
    { name: 'GLM-5, f32 caches', shape: GLM5, extra: { metrale_indexer_cache_dtype: 'f32' }, bound: 1e-5 },
    { name: 'GLM-5, bf16 indexer keys', shape: GLM5, extra: { metrale_indexer_cache_dtype: 'bf16' }, bound: 1e-5 },
    { name: 'GLM-5, fp8 indexer keys, bf16 MLA cache', shape: GLM5, extra: { metrale_indexer_cache_dtype: 'fp8', metrale_kv_cache_dtype: 'bf16' }, bound: 1e-3 },
    { name: 'GLM-5.3, pools of 4', shape: GLM53, extra: { metrale_indexer_cache_dtype: 'bf16' }, bound: 1e-5 },
    { name: 'GLM-5, bf16 rows and weights (bf16 MLA cache, bf16 keys)', shape: GLM5, extra: { metrale_indexer_cache_dtype: 'bf16' }, bound: 1e-2, precision: BF16 },
    { name: 'GLM-5.3, bf16 rows, fp8 keys', shape: GLM53, extra: { metrale_indexer_cache_dtype: 'fp8' }, bound: 1e-2, precision: BF16 },
    { name: 'GLM-5 (128-row blocks), FP8 weights, bf16 rows', shape: GLM5_MID, extra: { metrale_indexer_cache_dtype: 'bf16' }, bound: 1e-2, precision: FP8, fp8: true },
    { name: 'GLM-5.3, FP8 weights and pool gate, bf16 rows', shape: GLM53, extra: { metrale_indexer_cache_dtype: 'bf16' }, bound: 1e-2, precision: FP8, fp8: true },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const cpu = run(new CpuBackend(), c);
      const gpu = cuda.create();
      let dev: Float32Array[];
      try {
        dev = run(gpu, c);
      } finally {
        gpu.dispose();
      }
      const h = c.shape.hidden;
      let worst = 0;
      cpu.forEach((want, i) => {
        const rows = want.length / h;
        for (let r = 0; r < rows; r++) {
          const rel = relativeL2Error(dev[i]!.subarray(r * h, (r + 1) * h), want.subarray(r * h, (r + 1) * h));
          worst = Math.max(worst, rel);
          expect(rel, `step ${i} row ${r}`).toBeLessThan(c.bound);
        }
      });
      console.log(`[layer-dsa gpu] parity ${c.name}: worst row rel ${worst.toExponential(2)} (bound ${c.bound})`);
    });
  }
});
