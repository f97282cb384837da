import { roundTo, SeededRandom, type GpuBackend, type HostTensor, type Precision, type SpeculationMode, relativeL2Error } from '@metrale/core';
import { expect } from 'vitest';
import { TWO_KERNEL_MIN_BATCH, TWO_KERNEL_VERIFY_MIN_BATCH } from '@metrale/layer-gdn';
import type { RefSeq } from './gdn-reference.js';
import { configOf, deviceWeightsOf, randomWeights, referenceOf, Rig, rowOf, type Shape } from './gdn-setup.js';

// A batch of TWO_KERNEL_MIN_BATCH sequences through the layer and the driver (the layer runs the
// two-kernel decode for its decode steps and the two-kernel verify for its verify steps), each
// output checked against the float64 reference across prefill, decodes and two verifies with
// partial acceptance in between (carried mode: the pending rows are folded by the next verify or
// decode itself). test/two-kernel-decode.test.ts runs it
// on the CPU backend (the kernels' CPU twins), test/gpu/two-kernel-layer.test.ts on CUDA.

export const SHAPE: Shape = { hidden: 16, hk: 2, hv: 4, dk: 8, dv: 8, K: 4 };
export const TOL = 1e-4;

/**
 * Runs the script on `gpu` (default: a CpuBackend); returns the worst relative error. With a
 * precision: the checkpoint as `checkpoint` makes it, the reference given the weights the layer
 * holds and the inputs rounded to the row type, each output held to `tol`. `batch`: sequences
 * (default TWO_KERNEL_MIN_BATCH; below PIPE_DECODE_FROM the decode runs the two-kernel form too,
 * and a block-FP8 checkpoint's gates are made in its prep).
 */
export function runTwoKernelScript(
  speculation: SpeculationMode, gpu?: GpuBackend,
  opts: { precision?: Precision; checkpoint?: (t: HostTensor[]) => HostTensor[]; tol?: number; batch?: number } = {},
): number {
  const batch = opts.batch ?? Math.max(TWO_KERNEL_MIN_BATCH, TWO_KERNEL_VERIFY_MIN_BATCH);
  const { tensors: f32Tensors, ref } = randomWeights(SHAPE, 13);
  const tensors = opts.checkpoint ? opts.checkpoint(f32Tensors) : f32Tensors;
  const reference = referenceOf(SHAPE, opts.precision ? deviceWeightsOf(SHAPE, tensors, opts.precision) : ref);
  const tol = opts.tol ?? TOL;
  const rows = opts.precision?.rows ?? 'f32';
  const limits = { maxSeqs: batch, maxSeqLen: 64, maxBatch: batch, maxK: 3, maxRows: 3 * batch };
  const rig = new Rig(configOf(SHAPE), tensors, limits, { speculation, graphs: true, gpu, ...(opts.precision ? { precision: opts.precision } : {}) });
  const rnd = new SeededRandom(21);
  const W = SHAPE.hidden;
  let worst = 0;
  try {
    const seqs = Array.from({ length: batch }, () => rig.driver.open());
    const refs: RefSeq[] = seqs.map(() => reference.open());
    const lengths = seqs.map((_, i) => 1 + (i % 5));
    const check = (out: Float32Array, rows: Float64Array[][], what: string) => {
      let row = 0;
      rows.forEach((r, s) => {
        const want = Float64Array.from(r.flatMap((x) => [...x]));
        const rel = relativeL2Error(out.subarray(row * W, (row + r.length) * W), want);
        worst = Math.max(worst, rel);
        expect(rel, `${what}, sequence ${s}`).toBeLessThanOrEqual(tol);
        row += r.length;
      });
    };
    const input = (n: number) => rnd.normals(n * W).map((x) => roundTo(rows, x));
    // Prefill, two decodes, two verifies of 3 with 0..3 accepted, two more decodes.
    const pin = input(lengths.reduce((a, b) => a + b, 0));
    let row = 0;
    const pre = rig.prefill(seqs, lengths, pin);
    check(pre, lengths.map((n, s) => { const r = Array.from({ length: n }, (_, j) => rowOf(pin, W, row + j)); row += n; return reference.run(refs[s]!, r); }), 'prefill');
    const decode = (what: string) => {
      const x = input(batch);
      const out = rig.decode(seqs, x);
      check(out, seqs.map((_, s) => reference.run(refs[s]!, [rowOf(x, W, s)])), what);
    };
    decode('decode 1');
    decode('decode 2');
    const k = 3;
    // Two verifies in a row (carried mode: the second folds the first's accepted rows itself).
    const verify = (what: string, shift: number) => {
      const accepted = seqs.map((_, s) => (s + shift) % (k + 1));
      const vin = input(batch * k);
      const vout = rig.verify(seqs, k, vin, accepted);
      check(vout, seqs.map((_, s) => {
        const rows = Array.from({ length: k }, (_, j) => rowOf(vin, W, s * k + j));
        const want = reference.peek(refs[s]!, rows);
        reference.run(refs[s]!, rows.slice(0, accepted[s]!));
        return want;
      }), what);
    };
    verify('verify', 0);
    verify('verify after a verify', 1);
    decode('decode after the verify');
    decode('decode 4');
  } finally {
    rig.dispose();
  }
  return worst;
}

