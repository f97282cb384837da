import { SeededRandom, type SpeculationMode, relativeL2Error } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { configOf, randomWeights, Rig, rowOf, SMALL } from './gdn-setup.js';

// Property tests of speculative verify, each through the StepDriver with graphs captured and
// replayed: verify k then accept n ≡ decoding those n rows one by one (outputs and later steps),
// and carried state ≡ write-on-accept ≡ plain decode over many speculative cycles.

const K = 4;
const TOL = 1e-5;
const W = SMALL.hidden;
const limits = { maxSeqs: 4, maxSeqLen: 512, maxBatch: 4, maxK: K, maxRows: 32 };

type Step =
  | { op: 'prefill'; seqs: number[]; lengths: number[]; input: Float32Array }
  | { op: 'decode'; seqs: number[]; input: Float32Array }
  | { op: 'verify'; seqs: number[]; k: number; accepted: number[]; input: Float32Array };

/** Output rows keyed `step/seq/row` (row within the sequence's rows of that step). */
type Outputs = Map<string, Float32Array>;

/**
 * Runs a script. `asDecodes`: every verify is replaced by decoding its accepted rows one by one
 * (the plain-decode twin), recorded under the verify's keys.
 */
function run(steps: Step[], speculation: SpeculationMode, asDecodes: boolean): Outputs {
  const { tensors } = randomWeights(SMALL, 21);
  const rig = new Rig(configOf(SMALL), tensors, limits, { speculation });
  const out: Outputs = new Map();
  try {
    const seqs = [0, 1, 2].map(() => rig.driver.open());
    steps.forEach((step, i) => {
      const group = step.seqs.map((s) => seqs[s]!);
      if (step.op === 'prefill') {
        const o = rig.prefill(group, step.lengths, step.input);
        let row = 0;
        step.seqs.forEach((s, p) => {
          for (let r = 0; r < step.lengths[p]!; r++) out.set(`${i}/${s}/${r}`, rowOf(o, W, row++).slice());
        });
      } else if (step.op === 'decode') {
        const o = rig.decode(group, step.input);
        step.seqs.forEach((s, p) => out.set(`${i}/${s}/0`, rowOf(o, W, p).slice()));
      } else if (!asDecodes) {
        const o = rig.verify(group, step.k, step.input, step.accepted);
        step.seqs.forEach((s, p) => {
          for (let r = 0; r < step.k; r++) out.set(`${i}/${s}/${r}`, rowOf(o, W, p * step.k + r).slice());
        });
      } else {
        for (let r = 0; r < step.k; r++) {
          const live = step.seqs.map((s, p) => ({ s, p })).filter(({ p }) => step.accepted[p]! > r);
          if (live.length === 0) break;
          const input = new Float32Array(live.length * W);
          live.forEach(({ p }, j) => input.set(rowOf(step.input, W, p * step.k + r), j * W));
          const o = rig.decode(live.map(({ s }) => seqs[s]!), input);
          live.forEach(({ s }, j) => out.set(`${i}/${s}/${r}`, rowOf(o, W, j).slice()));
        }
      }
    });
  } finally {
    rig.dispose();
  }
  return out;
}

/** Every key of `b` must be in `a` with the same output. */
function expectSame(a: Outputs, b: Outputs, what: string): void {
  for (const [key, want] of b) {
    const got = a.get(key);
    expect(got, `${what}: ${key} missing`).toBeDefined();
    const rel = relativeL2Error(got!, want);
    expect(rel, `${what}: ${key} rel ${rel}`).toBeLessThanOrEqual(TOL);
  }
}

function rows(rnd: SeededRandom, n: number): Float32Array {
  return rnd.normals(n * W);
}

function verifyThenDecodes(n: number): Step[] {
  const rnd = new SeededRandom(100 + n);
  const accepted = [n, (n + 1) % (K + 1), (n + 3) % (K + 1)];
  return [
    { op: 'prefill', seqs: [0, 1, 2], lengths: [5, 9, 2], input: rows(rnd, 16) },
    { op: 'decode', seqs: [0, 1, 2], input: rows(rnd, 3) },
    { op: 'verify', seqs: [0, 1, 2], k: K, accepted, input: rows(rnd, 3 * K) },
    { op: 'decode', seqs: [0, 1, 2], input: rows(rnd, 3) },
    { op: 'decode', seqs: [2, 0], input: rows(rnd, 2) },
    { op: 'prefill', seqs: [1], lengths: [3], input: rows(rnd, 3) },
    { op: 'decode', seqs: [0, 1, 2], input: rows(rnd, 3) },
  ];
}

describe('verify k then accept n ≡ n single decode steps', () => {
  for (const mode of ['write-on-accept', 'carried'] as const) {
    for (let n = 0; n <= K; n++) {
      it(`${mode}, n = ${n}`, () => {
        const steps = verifyThenDecodes(n);
        const verified = run(steps, mode, false);
        const decoded = run(steps, mode, true);
        // Accepted verify rows and every later step agree; rejected rows have no decode twin.
        expectSame(verified, decoded, `${mode} n = ${n}`);
        const accepted = (steps[2] as Extract<Step, { op: 'verify' }>).accepted;
        const twins = [...decoded.keys()].filter((key) => key.startsWith('2/')).length;
        expect(twins).toBe(accepted.reduce((a, b) => a + b, 0));
      });
    }
  }
});

describe('carried state ≡ write-on-accept ≡ plain decode over many speculative cycles', () => {
  it('agree on every accepted row and every decode, 8 cycles, 3 sequences', () => {
    const rnd = new SeededRandom(77);
    const steps: Step[] = [{ op: 'prefill', seqs: [0, 1, 2], lengths: [3, 1, 6], input: rows(rnd, 10) }];
    const patterns = [[4, 0, 2], [1, 4, 3], [0, 0, 4], [2, 1, 0], [4, 4, 4], [3, 2, 1], [0, 3, 0], [1, 1, 2]];
    patterns.forEach((accepted, c) => {
      const k = c % 2 === 0 ? K : 3;
      const acc = accepted.map((a) => Math.min(a, k));
      steps.push({ op: 'verify', seqs: [0, 1, 2], k, accepted: acc, input: rows(rnd, 3 * k) });
      if (c % 3 === 1) steps.push({ op: 'decode', seqs: [1, 2, 0], input: rows(rnd, 3) });
    });
    steps.push({ op: 'decode', seqs: [0, 1, 2], input: rows(rnd, 3) });
    const woa = run(steps, 'write-on-accept', false);
    const carried = run(steps, 'carried', false);
    const plain = run(steps, 'none', true);
    // All verify rows (accepted or not) agree between the two speculative modes ...
    expectSame(carried, woa, 'carried vs write-on-accept');
    expect(carried.size).toBe(woa.size);
    // ... and every accepted row and decode matches plain decoding.
    expectSame(woa, plain, 'write-on-accept vs plain decode');
    expectSame(carried, plain, 'carried vs plain decode');
  });
});
