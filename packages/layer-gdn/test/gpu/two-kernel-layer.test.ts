// The layer's two-kernel decode on CUDA (the GPU lane): the script of test/two-kernel-script.ts —
// TWO_KERNEL_MIN_BATCH sequences through the driver, prefill, decodes and a verify with partial
// acceptance, each output against the float64 reference — with the layer on CudaBackend, in both
// speculation modes. Without a GPU it skips and says why.
import { CudaBackend, probe } from '@metrale/cuda-backend';
import { describe, expect, it } from 'vitest';
import { TOL, runTwoKernelScript } from '../two-kernel-script.js';

const cuda = probe();
if (!cuda.available) console.warn(`[layer-gdn gpu] two-kernel layer decode skipped: ${cuda.reason}`);

describe.skipIf(!cuda.available)('GdnLayer on CUDA: decode steps of TWO_KERNEL_MIN_BATCH positions against the float64 reference', () => {
  it('write-on-accept', () => {
    expect(runTwoKernelScript('write-on-accept', CudaBackend.create())).toBeLessThanOrEqual(TOL);
  });
  it('carried state', () => {
    expect(runTwoKernelScript('carried', CudaBackend.create())).toBeLessThanOrEqual(TOL);
  });
});
