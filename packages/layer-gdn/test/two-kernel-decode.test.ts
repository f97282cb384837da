import { SeededRandom, type HostTensor, type Precision } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { PIPE_DECODE_FROM, TWO_KERNEL_MIN_BATCH, TWO_KERNEL_VERIFY_MIN_BATCH, runsTwoKernelDecode, runsTwoKernelVerify } from '@metrale/layer-gdn';
import { configOf, randomWeights, Rig } from './gdn-setup.js';
import { BF16, FP8, fp8Checkpoint } from './precision-setup.js';
import { SHAPE, TOL, runTwoKernelScript } from './two-kernel-script.js';

// The layer's large decode steps run the two-kernel decode (gdn-decode-launch.ts
// runsTwoKernelDecode), its large verify steps of k ≤ 4 rows the two-kernel verify
// (gdn-verify-launch.ts runsTwoKernelVerify), on the CPU backend here (the kernels' CPU twins):
// which steps take them, and the script of test/two-kernel-script.ts against the float64 reference.

describe('GdnLayer: decode steps of TWO_KERNEL_MIN_BATCH positions (the two-kernel decode) against the float64 reference', () => {
  it('runs the two-kernel decode at this shape and batch', () => {
    expect(runsTwoKernelDecode({ hk: SHAPE.hk, hv: SHAPE.hv, dk: SHAPE.dk, dv: SHAPE.dv, convK: SHAPE.K, maxK: 3 }, TWO_KERNEL_MIN_BATCH)).toBe(true);
    expect(runsTwoKernelDecode({ hk: SHAPE.hk, hv: SHAPE.hv, dk: SHAPE.dk, dv: SHAPE.dv, convK: SHAPE.K, maxK: 3 }, TWO_KERNEL_MIN_BATCH - 1)).toBe(false);
    expect(runsTwoKernelDecode({ hk: 2, hv: 4, dk: 8, dv: 6, convK: 4, maxK: 3 }, TWO_KERNEL_MIN_BATCH)).toBe(false);
  });
  it('launches two kernels for a decode step of TWO_KERNEL_MIN_BATCH positions and of 1, one for a step of PIPE_DECODE_FROM', () => {
    const batch = TWO_KERNEL_MIN_BATCH;
    const { tensors } = randomWeights(SHAPE, 13);
    const rig = new Rig(configOf(SHAPE), tensors, { maxSeqs: batch, maxSeqLen: 16, maxBatch: batch, maxK: 3, maxRows: 3 * batch }, { graphs: false });
    try {
      const rnd = new SeededRandom(2);
      const seqs = Array.from({ length: batch }, () => rig.driver.open());
      rig.prefill(seqs, seqs.map(() => 2), rnd.normals(2 * batch * SHAPE.hidden));
      const kernels = (n: number) => {
        const before = rig.gpu.stats().kernelsLaunched;
        rig.decode(seqs.slice(0, n), rnd.normals(n * SHAPE.hidden));
        return rig.gpu.stats().kernelsLaunched - before;
      };
      expect(kernels(batch)).toBe(2);
      expect(kernels(1)).toBe(2);
      expect(kernels(PIPE_DECODE_FROM)).toBe(1);
    } finally {
      rig.dispose();
    }
  });
  it('runs the two-kernel verify for k ≤ 4 rows at this shape and batch', () => {
    const shape = { hk: SHAPE.hk, hv: SHAPE.hv, dk: SHAPE.dk, dv: SHAPE.dv, convK: SHAPE.K, maxK: 4 };
    expect(runsTwoKernelVerify(shape, TWO_KERNEL_VERIFY_MIN_BATCH, 4)).toBe(true);
    expect(runsTwoKernelVerify(shape, TWO_KERNEL_VERIFY_MIN_BATCH, 1)).toBe(true);
    expect(runsTwoKernelVerify(shape, TWO_KERNEL_VERIFY_MIN_BATCH - 1, 4)).toBe(false);
    expect(runsTwoKernelVerify({ ...shape, maxK: 6 }, TWO_KERNEL_VERIFY_MIN_BATCH, 5)).toBe(false);  // more rows than the prep records hold
    expect(runsTwoKernelVerify({ ...shape, maxK: 2 }, TWO_KERNEL_VERIFY_MIN_BATCH, 3)).toBe(false);
    expect(runsTwoKernelVerify({ ...shape, dv: 6 }, TWO_KERNEL_VERIFY_MIN_BATCH, 4)).toBe(false);
  });
  it('launches two kernels for a carried verify of any batch (TWO_KERNEL_VERIFY_MIN_BATCH is 1)', () => {
    const batch = Math.max(TWO_KERNEL_MIN_BATCH, TWO_KERNEL_VERIFY_MIN_BATCH);
    const { tensors } = randomWeights(SHAPE, 13);
    const rig = new Rig(configOf(SHAPE), tensors, { maxSeqs: batch, maxSeqLen: 32, maxBatch: batch, maxK: 3, maxRows: 3 * batch }, { graphs: false, speculation: 'carried' });
    try {
      const rnd = new SeededRandom(3);
      const seqs = Array.from({ length: batch }, () => rig.driver.open());
      rig.prefill(seqs, seqs.map(() => 2), rnd.normals(2 * batch * SHAPE.hidden));
      const kernels = (n: number) => {
        const before = rig.gpu.stats().kernelsLaunched;
        rig.verify(seqs.slice(0, n), 3, rnd.normals(3 * n * SHAPE.hidden), seqs.slice(0, n).map((_, s) => s % 4));
        return rig.gpu.stats().kernelsLaunched - before;
      };
      expect(TWO_KERNEL_VERIFY_MIN_BATCH).toBe(1);
      expect(kernels(batch)).toBe(2);
      expect(kernels(1)).toBe(2);
    } finally {
      rig.dispose();
    }
  });
  it('write-on-accept', () => {
    expect(runTwoKernelScript('write-on-accept')).toBeLessThanOrEqual(TOL);
  });
  it('carried state (the decode after a verify folds its accepted rows)', () => {
    expect(runTwoKernelScript('carried')).toBeLessThanOrEqual(TOL);
  });
  // bf16 rows: the reference given the weights the layer holds and the rounded inputs (reference.test.ts's bound).
  it('bf16 rows and weights, carried state', () => {
    expect(runTwoKernelScript('carried', undefined, { precision: BF16, tol: BF16_ROWS })).toBeLessThanOrEqual(BF16_ROWS);
  });
  it('bf16 rows, block-FP8 weights, write-on-accept', () => {
    expect(runTwoKernelScript('write-on-accept', undefined, { precision: FP8, checkpoint: fp8Checkpoint, tol: BF16_ROWS })).toBeLessThanOrEqual(BF16_ROWS);
  });
  // Below PIPE_DECODE_FROM positions a block-FP8 checkpoint's gates come from gdn.decode-prep-gates.
  for (const speculation of ['write-on-accept', 'carried'] as const) {
    it(`bf16 rows, block-FP8 weights, 4 sequences (the gates made in the prep), ${speculation}`, () => {
      expect(runTwoKernelScript(speculation, undefined, { precision: FP8, checkpoint: fp8Checkpoint, tol: BF16_ROWS, batch: 4 })).toBeLessThanOrEqual(BF16_ROWS);
    });
  }
  // One GEMM for both input projections (stacked [in_proj_qkvz; in_proj_ba]) and out_proj; a
  // block-FP8 checkpoint keeps in_proj_ba in bf16, so its input projections stay two GEMMs.
  it('bf16 rows cost no launch: a decode step is the same two kernels and two GEMMs (y leaves the state kernel in bf16); three with block-FP8 weights (in_proj_ba apart)', () => {
    const batch = TWO_KERNEL_MIN_BATCH;
    const { tensors } = randomWeights(SHAPE, 13);
    for (const [precision, gemms] of [[undefined, 2], [BF16, 2], [FP8, 3]] as const) {
      expect(decodeLaunches(precision === FP8 ? fp8Checkpoint(tensors) : tensors, batch, precision)).toEqual({ kernels: 2, gemms });
    }
  });
  it('a block-FP8 decode step below PIPE_DECODE_FROM positions launches no GEMM for in_proj_ba (gdn.decode-prep-gates makes its gates)', () => {
    const { tensors } = randomWeights(SHAPE, 13);
    for (const batch of [1, PIPE_DECODE_FROM - 1]) expect(decodeLaunches(fp8Checkpoint(tensors), batch, FP8), `batch ${batch}`).toEqual({ kernels: 2, gemms: 2 });
  });
});

/** The kernels and GEMMs one decode step of `batch` sequences launches (after a 2-row prefill each), eager. */
function decodeLaunches(weights: HostTensor[], batch: number, precision?: Precision): { kernels: number; gemms: number } {
  const rig = new Rig(configOf(SHAPE), weights, { maxSeqs: batch, maxSeqLen: 16, maxBatch: batch, maxK: 3, maxRows: 3 * batch }, { graphs: false, ...(precision ? { precision } : {}) });
  try {
    const rnd = new SeededRandom(2);
    const seqs = Array.from({ length: batch }, () => rig.driver.open());
    rig.prefill(seqs, seqs.map(() => 2), rnd.normals(2 * batch * SHAPE.hidden));
    const before = rig.gpu.stats();
    rig.decode(seqs, rnd.normals(batch * SHAPE.hidden));
    const after = rig.gpu.stats();
    return { kernels: after.kernelsLaunched - before.kernelsLaunched, gemms: after.gemmsLaunched - before.gemmsLaunched };
  } finally {
    rig.dispose();
  }
}

/** The bound of reference.test.ts's bf16 cases. */
const BF16_ROWS = 8e-3;
