// The layer through the StepDriver (graphs on: decode and verify are captured, then replayed)
// against the independent float64 reference of the Hugging Face math (test/dsa-reference.ts):
// prefill, decodes, verifies with partial acceptance, for GLM-5 (RoPE, per-token indexer) and
// GLM-5.3 (NoPE, pooled indexer), every cache format.
import { SeededRandom, type Sequence, relativeL2Error } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { DsaReference, type RefOptions } from './dsa-reference.js';
import { configOf, GLM5, GLM53, pack, randomRows, randomWeights, Rig, type Shape } from './dsa-setup.js';

const limits = { maxSeqs: 3, maxSeqLen: 48, maxBatch: 3, maxK: 3, maxRows: 48 };

type Op =
  | { op: 'prefill'; seqs: number[]; lengths: number[] }
  | { op: 'decode'; seqs: number[] }
  | { op: 'verify'; seqs: number[]; k: number; accepted: number[] };

const SCENARIO: Op[] = [
  { op: 'prefill', seqs: [0, 1, 2], lengths: [14, 3, 9] },
  { op: 'decode', seqs: [0, 1, 2] },
  { op: 'decode', seqs: [2, 0] },
  { op: 'verify', seqs: [0, 1, 2], k: 3, accepted: [1, 3, 0] },
  { op: 'decode', seqs: [0, 1, 2] },
  { op: 'verify', seqs: [1, 2, 0], k: 3, accepted: [2, 0, 3] },
  { op: 'verify', seqs: [0, 1, 2], k: 3, accepted: [3, 1, 2] },
  { op: 'decode', seqs: [0, 1, 2] },
  { op: 'decode', seqs: [1, 2, 0] },
];

interface Outcome {
  readonly worst: number;
  readonly replays: number;
  readonly sparseRows: number;
  readonly minRelGap: number;
}

/** Runs SCENARIO through the layer and the reference; returns the worst step error and what was exercised. */
function runScenario(shape: Shape, extra: Record<string, unknown>, refOptions: RefOptions, seed: number, rigLimits = limits, scenario = SCENARIO): Outcome {
  const { tensors, ref } = randomWeights(shape, seed);
  const reference = new DsaReference(shape, ref, refOptions);
  const rig = new Rig(configOf(shape, extra), [tensors], rigLimits);
  const rnd = new SeededRandom(seed + 1000);
  const seqs: Sequence[] = [0, 1, 2].map(() => rig.driver.open());
  const history: Float64Array[][] = [[], [], []];
  let worst = 0;
  let replays = 0;
  let sparseRows = 0;
  let minRelGap = Infinity;
  try {
    for (const step of scenario) {
      const counts = step.op === 'prefill' ? step.lengths : step.seqs.map(() => (step.op === 'verify' ? step.k : 1));
      const rows = step.seqs.map((_, i) => randomRows(rnd, counts[i]!, shape.hidden));
      const input = pack(rows.flat());
      let out: Float32Array;
      if (step.op === 'prefill') out = rig.prefill(step.seqs.map((s) => seqs[s]!), step.lengths, input);
      else {
        const r = step.op === 'decode' ? rig.decode(step.seqs.map((s) => seqs[s]!), input) : rig.verify(step.seqs.map((s) => seqs[s]!), step.k, input, step.accepted);
        out = r.out;
        if (r.path === 'replay') replays++;
      }
      const expected: Float64Array[] = [];
      step.seqs.forEach((s, i) => {
        const result = reference.run([...history[s]!, ...rows[i]!]);
        expected.push(...result.out.slice(-counts[i]!));
        sparseRows += result.sparseRows;
        minRelGap = Math.min(minRelGap, result.minRelGap);
      });
      worst = Math.max(worst, relativeL2Error(out, pack(expected)));
      step.seqs.forEach((s, i) => {
        const keep = step.op === 'verify' ? step.accepted[i]! : counts[i]!;
        history[s]!.push(...rows[i]!.slice(0, keep));
      });
    }
    // Host bookkeeping: every layer state holds exactly the committed rows after the last step.
    seqs.forEach((seq, i) => expect(rig.layers[0]!.inspectState!(rig.driver.stateOf(seq, 0))).toEqual({ length: history[i]!.length }));
  } finally {
    rig.dispose();
  }
  return { worst, replays, sparseRows, minRelGap };
}

describe('DSA layer against a float64 reference of the Hugging Face math', () => {
  it('GLM-5 (glm_moe_dsa): prefill, decodes, partly accepted verifies, with graphs', () => {
    const r = runScenario(GLM5, {}, {}, 11);
    expect(r.replays).toBeGreaterThan(2);
    expect(r.sparseRows).toBeGreaterThan(50); // top-6 of up to 25 keys: most rows leave keys out
    expect(r.minRelGap).toBeGreaterThan(1e-5);
    expect(r.worst).toBeLessThan(1e-5);
  });

  it('GLM-5.3 (glm5_next): NoPE, pools of 4 with the tail, partly accepted verifies', () => {
    const r = runScenario(GLM53, {}, { mlaEps: 1e-6 }, 12);
    expect(r.replays).toBeGreaterThan(2);
    expect(r.sparseRows).toBeGreaterThan(30);
    expect(r.minRelGap).toBeGreaterThan(1e-5);
    expect(r.worst).toBeLessThan(1e-5);
  });

  it('GLM-5 with half-split RoPE (rope_interleave: false) and rms_norm_eps ignored by the MLA norms', () => {
    const r = runScenario(GLM5, { rope_interleave: false, rms_norm_eps: 0.5 }, { interleave: false }, 13);
    expect(r.worst).toBeLessThan(1e-5);
  });

  it('the default bf16 indexer cache and the fp8 one select as the reference does on the rounded keys', () => {
    for (const [dtype, seed] of [['bf16', 14], ['fp8', 20]] as const) {
      const r = runScenario(GLM5, { metrale_indexer_cache_dtype: dtype }, { keyStorage: dtype }, seed);
      // A near tie could flip between f32 and f64 rounding of the key; these seeds keep a margin.
      expect(r.minRelGap, dtype).toBeGreaterThan(1e-3);
      expect(r.worst, dtype).toBeLessThan(1e-5);
    }
    const r = runScenario(GLM53, { metrale_indexer_cache_dtype: 'bf16' }, { keyStorage: 'bf16', mlaEps: 1e-6 }, 16);
    expect(r.minRelGap).toBeGreaterThan(1e-3);
    expect(r.worst).toBeLessThan(1e-5);
  });

  it('a prefill split into chunks of 9 rows (pools and the ring across chunk boundaries)', () => {
    const small = { ...limits, maxRows: 9 };
    expect(runScenario(GLM53, {}, { mlaEps: 1e-6 }, 12, small).worst).toBeLessThan(1e-5);
    expect(runScenario(GLM5, {}, {}, 11, small).worst).toBeLessThan(1e-5);
  });

  it('a prefill of 143 rows scored in blocks of 64, then decodes and a verify', () => {
    const long: Op[] = [
      { op: 'prefill', seqs: [0, 1, 2], lengths: [100, 3, 40] },
      { op: 'decode', seqs: [0, 1, 2] },
      { op: 'verify', seqs: [0, 1, 2], k: 3, accepted: [2, 3, 1] },
      { op: 'decode', seqs: [0, 1, 2] },
    ];
    const big = { ...limits, maxSeqLen: 160, maxRows: 160 };
    expect(runScenario(GLM5, {}, {}, 18, big, long).worst).toBeLessThan(1e-5);
    expect(runScenario(GLM53, {}, { mlaEps: 1e-6 }, 19, big, long).worst).toBeLessThan(1e-5);
  });

  it('a bf16 MLA cache stays within bf16 rounding of the reference', () => {
    const r = runScenario(GLM5, { metrale_kv_cache_dtype: 'bf16' }, {}, 17);
    expect(r.worst).toBeLessThan(1e-2);
    expect(r.worst).toBeGreaterThan(1e-6); // it does round
  });
});
