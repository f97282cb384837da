// GdnLayer with bf16 rows on CUDA (the GPU lane): the conformance kit (bf16 weights, and block-FP8
// in_proj_qkvz and out_proj) at k = 4, on a shape the recurrent kernels run and on one the
// two-kernel decode and verify run; and the reference script of test/reference.test.ts's 16-bit
// cases against the float64 reference with the weights the layer holds. Without a GPU it skips.
import { MemoryWeightSource, type HostTensor, type Precision } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import { CudaBackend, probe } from '@metrale/cuda-backend';
import plugin from '@metrale/layer-gdn';
import { describe, expect, it } from 'vitest';
import { configOf, randomWeights, SMALL, type Shape } from '../gdn-setup.js';
import { BF16, FP8, fp8Checkpoint, withPrecision } from '../precision-setup.js';
import { runTwoKernelScript } from '../two-kernel-script.js';

const cuda = probe();
if (!cuda.available) console.warn(`[layer-gdn gpu] precision layer suite skipped: ${cuda.reason}`);

/** d_v a multiple of 4: decode steps below 16 positions and verifies of k ≤ 4 run the two-kernel kernels. */
const TWO_KERNEL: Shape = { hidden: 136, hk: 2, hv: 4, dk: 32, dv: 32, K: 4 };
/** Paths that must agree, in bf16 rows: kernels that round the same f32 values a unit apart. */
const BF16_AGREEMENT = 1e-2;

describe.skipIf(!cuda.available)('GdnLayer with bf16 rows on CUDA: the conformance kit', () => {
  const cases: { name: string; shape: Shape; precision: Precision; tensors: (t: HostTensor[]) => HostTensor[] }[] = [
    { name: 'bf16 weights, recurrent kernels', shape: SMALL, precision: BF16, tensors: (t) => t },
    { name: 'bf16 weights, two-kernel decode and verify', shape: TWO_KERNEL, precision: BF16, tensors: (t) => t },
    { name: 'block-FP8 weights, recurrent kernels', shape: SMALL, precision: FP8, tensors: fp8Checkpoint },
    { name: 'block-FP8 weights over two blocks, two-kernel decode and verify', shape: TWO_KERNEL, precision: FP8, tensors: fp8Checkpoint },
  ];
  for (const c of cases) {
    it(`${c.name}: every check at k = 4`, () => {
      const { tensors } = randomWeights(c.shape, 3);
      const report = runLayerConformance(withPrecision(plugin, c.precision), {
        backend: () => CudaBackend.create(),
        config: configOf(c.shape),
        weights: new MemoryWeightSource('conformance weights', c.tensors(tensors)),
        k: 4,
        rowDtype: 'bf16',
        tolerance: BF16_AGREEMENT,
      });
      for (const check of report.checks) console.log(`[layer-gdn gpu] ${c.name}: ${check.check} ${check.status}: ${check.detail}`);
      expect(report.checks.filter((x) => x.status === 'fail')).toEqual([]);
      // The state snapshot saved at a block boundary restores on the device too.
      expect(report.checks.find((x) => x.check === 'prefix-resume-equals-prefill')?.status).toBe('pass');
      expect(report.passed).toBe(true);
    });
  }
});

describe.skipIf(!cuda.available)('GdnLayer with bf16 rows on CUDA: the two-kernel script against the float64 reference with the weights it holds', () => {
  // reference.test.ts's bf16 bound: the data path's own rounding (rows, y).
  const BF16_ROWS = 8e-3;
  it('bf16 weights, write-on-accept', () => {
    expect(runTwoKernelScript('write-on-accept', CudaBackend.create(), { precision: BF16, tol: BF16_ROWS })).toBeLessThanOrEqual(BF16_ROWS);
  });
  it('block-FP8 weights, carried state', () => {
    expect(runTwoKernelScript('carried', CudaBackend.create(), { precision: FP8, checkpoint: fp8Checkpoint, tol: BF16_ROWS })).toBeLessThanOrEqual(BF16_ROWS);
  });
  it('block-FP8 weights, 4 sequences (gdn.decode-prep-gates), carried state', () => {
    expect(runTwoKernelScript('carried', CudaBackend.create(), { precision: FP8, checkpoint: fp8Checkpoint, tol: BF16_ROWS, batch: 4 })).toBeLessThanOrEqual(BF16_ROWS);
  });
});
