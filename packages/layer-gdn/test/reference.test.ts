import { F32_PRECISION, roundTo, SeededRandom, type HostTensor, type Precision, type SpeculationMode, relativeL2Error } from '@metrale/core';
import { afterAll, describe, expect, it } from 'vitest';
import type { RefSeq } from './gdn-reference.js';
import { configOf, deviceWeightsOf, randomWeights, referenceOf, Rig, rowOf, type Shape } from './gdn-setup.js';
import { BF16, F16, FP8, fp8Checkpoint } from './precision-setup.js';

const SHAPES: Record<string, Shape> = {
  'H_v/H_k = 1, d_k > d_v': { hidden: 20, hk: 3, hv: 3, dk: 8, dv: 5, K: 4 },
  'H_v/H_k = 2, d_k < d_v': { hidden: 24, hk: 2, hv: 4, dk: 4, dv: 7, K: 4 },
  'H_v/H_k = 4, K = 3': { hidden: 16, hk: 1, hv: 4, dk: 6, dv: 4, K: 3 },
};
const TOL = 1e-4;

type Op =
  | { op: 'prefill'; seqs: number[]; lengths: number[] }
  | { op: 'decode'; seqs: number[] }
  | { op: 'verify'; seqs: number[]; k: number; accepted: number[] };

// Prefill lengths that are not multiples of 64, split by maxRows = 48 into chunks that cut a
// sequence; decodes in changing batches; verifies with partial (and zero, and full) acceptance.
const SCRIPT: Op[] = [
  { op: 'prefill', seqs: [0, 1], lengths: [70, 1] },
  { op: 'decode', seqs: [0, 1] },
  { op: 'decode', seqs: [1] },
  { op: 'verify', seqs: [0, 1], k: 3, accepted: [2, 0] },
  { op: 'decode', seqs: [1, 0] },
  { op: 'verify', seqs: [1, 0], k: 3, accepted: [3, 1] },
  { op: 'prefill', seqs: [1], lengths: [5] },
  { op: 'verify', seqs: [0, 1], k: 4, accepted: [4, 1] },
  { op: 'decode', seqs: [0, 1] },
  { op: 'verify', seqs: [1], k: 2, accepted: [0] },
  { op: 'decode', seqs: [0, 1] },
];

/**
 * The layer through SCRIPT against the reference; the worst step error. With a precision: the
 * checkpoint as `checkpoint` makes it (default the f32 weights), the reference given the weights
 * the layer holds on the device and the inputs rounded as the layer's rows are, so the bound is
 * the data path's own rounding (rows, y) at `tol`.
 */
function runAgainstReference(
  shape: Shape, speculation: SpeculationMode, graphs: boolean, maxRows = 48,
  opts: { precision?: Precision; checkpoint?: (t: HostTensor[]) => HostTensor[]; tol?: number } = {},
): number {
  const precision = opts.precision ?? F32_PRECISION;
  const tol = opts.tol ?? TOL;
  const { tensors: f32Tensors, ref: f32Ref } = randomWeights(shape, 11);
  const tensors = opts.checkpoint ? opts.checkpoint(f32Tensors) : f32Tensors;
  const reference = referenceOf(shape, opts.precision ? deviceWeightsOf(shape, tensors, precision) : f32Ref);
  const limits = { maxSeqs: 3, maxSeqLen: 256, maxBatch: 2, maxK: 4, maxRows };
  const rig = new Rig(configOf(shape), tensors, limits, { speculation, graphs, ...(opts.precision ? { precision } : {}) });
  const rnd = new SeededRandom(5);
  const W = shape.hidden;
  let worst = 0;
  try {
    const seqs = [rig.driver.open(), rig.driver.open()];
    const refSeqs: RefSeq[] = [reference.open(), reference.open()];
    for (const [i, step] of SCRIPT.entries()) {
      const perSeq = step.op === 'prefill' ? step.lengths : step.seqs.map(() => (step.op === 'verify' ? step.k : 1));
      const total = perSeq.reduce((a, b) => a + b, 0);
      const input = rnd.normals(total * W).map((x) => roundTo(precision.rows, x));
      const group = step.seqs.map((s) => seqs[s]!);
      const out =
        step.op === 'prefill' ? rig.prefill(group, step.lengths, input)
        : step.op === 'decode' ? rig.decode(group, input)
        : rig.verify(group, step.k, input, step.accepted);
      let row = 0;
      step.seqs.forEach((s, p) => {
        const rows = Array.from({ length: perSeq[p]! }, (_, j) => rowOf(input, W, row + j));
        const expected = step.op === 'verify' ? reference.peek(refSeqs[s]!, rows) : reference.run(refSeqs[s]!, rows);
        if (step.op === 'verify') reference.run(refSeqs[s]!, rows.slice(0, step.accepted[p]!));
        const got = out.subarray(row * W, (row + rows.length) * W);
        const want = Float64Array.from(expected.flatMap((e) => [...e]));
        const rel = relativeL2Error(got, want);
        worst = Math.max(worst, rel);
        expect(rel, `step ${i} (${step.op}), sequence ${s}: rel ${rel}`).toBeLessThanOrEqual(tol);
        row += rows.length;
      });
    }
  } finally {
    rig.dispose();
  }
  return worst;
}

describe('GdnLayer against an independent float64 reference of gdn.md', () => {
  for (const [name, shape] of Object.entries(SHAPES)) {
    it(`${name}: write-on-accept, graphs replayed`, () => {
      expect(runAgainstReference(shape, "write-on-accept", true)).toBeLessThanOrEqual(TOL);
    });
    it(`${name}: carried state, graphs replayed`, () => {
      expect(runAgainstReference(shape, 'carried', true)).toBeLessThanOrEqual(TOL);
    });
  }

  it('eager write-on-accept matches too', () => {
    expect(runAgainstReference(SHAPES['H_v/H_k = 2, d_k < d_v']!, 'write-on-accept', false)).toBeLessThanOrEqual(TOL);
  });

  it('a prefill of 70 + 1 rows in one chunk (maxRows 80) matches too', () => {
    expect(runAgainstReference(SHAPES['H_v/H_k = 4, K = 3']!, 'write-on-accept', true, 80)).toBeLessThanOrEqual(TOL);
    expect(runAgainstReference(SHAPES['H_v/H_k = 1, d_k > d_v']!, 'carried', true, 80)).toBeLessThanOrEqual(TOL);
  });

  it("the reference's chunked WY form (C = 64, and C = 5) equals its recurrence over 70 rows", () => {
    const shape = SHAPES['H_v/H_k = 2, d_k < d_v']!;
    const reference = referenceOf(shape, randomWeights(shape, 3).ref);
    const rnd = new SeededRandom(9);
    const rows = Array.from({ length: 70 }, () => rnd.normals(shape.hidden));
    const a = reference.open();
    const want = reference.run(a, rows);
    for (const C of [64, 5]) {
      const b = reference.open();
      const got = reference.runChunked(b, rows, C);
      got.forEach((g, t) => expect(relativeL2Error(g, want[t]!)).toBeLessThan(1e-10));
      b.S.forEach((S, h) => expect(relativeL2Error(S, a.S[h]!)).toBeLessThan(1e-10));
      // And the decode after it.
      const next = rnd.normals(shape.hidden);
      expect(relativeL2Error(reference.peek(b, [next])[0]!, reference.peek(a, [next])[0]!)).toBeLessThan(1e-10);
    }
  });
});

// The data paths of the precision (rows and y stored in 16 bits, weights bf16 or block-FP8 on the
// device): against the same reference given the device's weights and the rounded inputs, so the
// bound is what the row type's roundings cost (measured: docs/layers/gdn.md, "Tolerances").
const ROW_BOUNDS = { bf16: 8e-3, f16: 1e-3 } as const;
describe('GdnLayer in 16-bit rows against the float64 reference with the weights it holds', () => {
  const worst: Record<string, number> = {};
  afterAll(() => console.log(`GdnLayer vs the float64 reference, worst step rel L2: ${JSON.stringify(worst)}`));
  const cases: { name: string; precision: Precision; checkpoint?: (t: HostTensor[]) => HostTensor[]; bound: number }[] = [
    { name: 'bf16 rows, bf16 weights', precision: BF16, bound: ROW_BOUNDS.bf16 },
    { name: 'f16 rows, f16 weights', precision: F16, bound: ROW_BOUNDS.f16 },
    { name: 'bf16 rows, block-FP8 in_proj_qkvz and out_proj', precision: FP8, checkpoint: fp8Checkpoint, bound: ROW_BOUNDS.bf16 },
  ];
  for (const c of cases) {
    for (const [name, shape] of Object.entries(SHAPES)) {
      for (const speculation of ['write-on-accept', 'carried'] as const) {
        it(`${c.name} | ${name} | ${speculation}`, () => {
          const w = runAgainstReference(shape, speculation, true, 48, { precision: c.precision, tol: c.bound, ...(c.checkpoint ? { checkpoint: c.checkpoint } : {}) });
          worst[c.name] = Math.max(worst[c.name] ?? 0, w);
        });
      }
    }
    it(`${c.name} | a prefill of 70 + 1 rows in one chunk (maxRows 80)`, () => {
      const w = runAgainstReference(SHAPES['H_v/H_k = 4, K = 3']!, 'write-on-accept', true, 80, { precision: c.precision, tol: c.bound, ...(c.checkpoint ? { checkpoint: c.checkpoint } : {}) });
      worst[c.name] = Math.max(worst[c.name] ?? 0, w);
    });
  }
});
