import { describe, expect, it } from 'vitest';
import {
  acceptGreedy,
  acceptMatching,
  acceptPickedIds,
  argmaxRow,
  InvalidArgumentError,
  sampleFrom,
  sampleLogitsRow,
  SeededRandom,
  softmaxRow,
} from '../src/index.js';
import { expectThrow } from './support/driver-rig.js';

const VOCAB = 6;

/** k rows of random logits, with distinct values (no argmax ties). */
function randomLogits(seed: number, k: number, scale = 1.5): Float32Array {
  return new SeededRandom(seed).normals(k * VOCAB, scale);
}

/** Indices of a row's logits from largest to smallest. */
function ranked(logits: Float32Array, r: number): number[] {
  const row = Array.from(logits.subarray(r * VOCAB, (r + 1) * VOCAB));
  return row.map((v, i) => [v, i] as const).sort((a, b) => b[0] - a[0]).map(([, i]) => i);
}

/** |observed − p| within 5 standard errors of n draws (plus a hair for p near 0 or 1). */
function expectFrequency(count: number, n: number, p: number, what: string): void {
  const tolerance = 5 * Math.sqrt((p * (1 - p)) / n) + 1e-3;
  expect(Math.abs(count / n - p), `${what}: observed ${(count / n).toFixed(4)}, expected ${p.toFixed(4)}`).toBeLessThanOrEqual(tolerance);
}

describe('acceptGreedy', () => {
  const k = 4;
  const logits = randomLogits(1, k);
  const argmax = [0, 1, 2, 3].map((r) => ranked(logits, r)[0]!);

  it('accepts every draft equal to the argmax, then gives the bonus token', () => {
    expect(acceptGreedy(logits, VOCAB, argmax.slice(0, 3))).toEqual({ accepted: 4, next: argmax[3] });
  });

  it('stops at the first rejected draft with the target token', () => {
    const wrong = ranked(logits, 0)[1]!;
    expect(acceptGreedy(logits, VOCAB, [wrong, argmax[1]!, argmax[2]!])).toEqual({ accepted: 1, next: argmax[0] });
  });

  it('stops in the middle', () => {
    const wrong = ranked(logits, 1)[2]!;
    expect(acceptGreedy(logits, VOCAB, [argmax[0]!, wrong, argmax[2]!])).toEqual({ accepted: 2, next: argmax[1] });
    expect(acceptGreedy(logits, VOCAB, [argmax[0]!, argmax[1]!, ranked(logits, 2)[5]!])).toEqual({ accepted: 3, next: argmax[2] });
  });

  it('with no drafts (k = 1) gives the argmax of the one row', () => {
    const one = randomLogits(2, 1);
    expect(acceptGreedy(one, VOCAB, [])).toEqual({ accepted: 1, next: ranked(one, 0)[0] });
  });

  it('breaks ties toward the lowest index, as torch.argmax', () => {
    const tied = new Float32Array([0.5, 2, -1, 2, 2, 0]);
    expect(argmaxRow(tied, VOCAB, 0)).toBe(1);
    expect(acceptGreedy(tied, VOCAB, [])).toEqual({ accepted: 1, next: 1 });
  });

  it('checks its arguments, naming the values', () => {
    expectThrow(() => acceptGreedy(new Float32Array(7), VOCAB, []), InvalidArgumentError, /logits of length 7 are not rows of vocab 6/);
    expectThrow(() => acceptGreedy(logits, 0, []), InvalidArgumentError, /vocab 0/);
    expectThrow(() => acceptGreedy(logits, 2.5, []), InvalidArgumentError, /vocab 2\.5/);
    expectThrow(() => acceptGreedy(logits, VOCAB, [1, 2]), InvalidArgumentError, /4 logit rows need 3 draft tokens, got 2/);
    expectThrow(() => acceptGreedy(logits, VOCAB, [1, 6, 0]), InvalidArgumentError, /draft token 6 at 1 is outside the vocabulary \(6\)/);
    expectThrow(() => acceptGreedy(logits, VOCAB, [1, 0, -1]), InvalidArgumentError, /draft token -1 at 2/);
    expectThrow(() => acceptGreedy(logits, VOCAB, [0.5, 0, 1]), InvalidArgumentError, /draft token 0\.5 at 0/);
  });
});

describe('acceptMatching', () => {
  const temperature = 0.8;
  const N = 40_000;

  it('with each row drawn as sampling draws it, gives (accepted, next) distributed as sampling the target token by token', () => {
    const k = 3;
    const logits = randomLogits(3, k, 1);
    const p = [0, 1, 2].map((r) => softmaxRow(logits, VOCAB, r, temperature));
    // A likely-but-not-top first draft and the top second draft: every outcome has mass.
    const drafts = [ranked(logits, 0)[1]!, ranked(logits, 1)[0]!];
    const random = new SeededRandom(4);
    const counts = new Map<string, number>();
    for (let i = 0; i < N; i++) {
      const a = acceptMatching((r) => sampleLogitsRow(logits, VOCAB, r, { temperature }, random), k, drafts);
      counts.set(`${a.accepted}:${a.next}`, (counts.get(`${a.accepted}:${a.next}`) ?? 0) + 1);
    }
    // Sequential sampling: token 0 ~ p0; if it is the draft, token 1 ~ p1; and so on. A draft is
    // kept with probability p(draft), as rejection sampling keeps a point-mass draft.
    const [d0, d1] = drafts as [number, number];
    let total = 0;
    for (let t = 0; t < VOCAB; t++) {
      const cells: [string, number][] = [
        [`1:${t}`, t === d0 ? 0 : p[0]![t]!],
        [`2:${t}`, t === d1 ? 0 : p[0]![d0]! * p[1]![t]!],
        [`3:${t}`, p[0]![d0]! * p[1]![d1]! * p[2]![t]!],
      ];
      for (const [key, prob] of cells) {
        total += prob;
        expectFrequency(counts.get(key) ?? 0, N, prob, `(accepted, next) = (${key})`);
      }
    }
    expect(total).toBeCloseTo(1, 5);
    expect(counts.get(`1:${d0}`)).toBeUndefined();
    expect(counts.get(`2:${d1}`)).toBeUndefined();
  });

  it('takes one draw per emitted token, so the tokens are those plain sampling draws from the same stream', () => {
    const logits = randomLogits(15, 4, 1);
    for (const params of [{ temperature }, { temperature, topK: 3 }, { temperature, topP: 0.6 }, { temperature, minP: 0.3 }]) {
      for (let seed = 0; seed < 50; seed++) {
        const drafts = [ranked(logits, 0)[0]!, ranked(logits, 1)[seed % 2]!, ranked(logits, 2)[0]!];
        const verify = new SeededRandom(seed);
        const a = acceptMatching((r) => sampleLogitsRow(logits, VOCAB, r, params, verify), 4, drafts);
        // Plain sampling of the same rows (each row given the drafts before it) with the same seed.
        const plain = new SeededRandom(seed);
        const emitted = [...drafts.slice(0, a.accepted - 1), a.next];
        emitted.forEach((token, r) => expect(sampleLogitsRow(logits, VOCAB, r, params, plain), `${JSON.stringify(params)} seed ${seed} row ${r}`).toBe(token));
        expect(verify.float()).toBe(plain.float());
      }
    }
  });

  it('asks for rows in order and none past the first draft that differs', () => {
    const asked: number[] = [];
    expect(acceptMatching((r) => (asked.push(r), [5, 6, 1, 3][r]!), 4, [5, 6, 7])).toEqual({ accepted: 3, next: 1 });
    expect(asked).toEqual([0, 1, 2]);
    expect(acceptPickedIds([5, 6, 7, 3], [5, 6, 7])).toEqual({ accepted: 4, next: 3 });
    expectThrow(() => acceptPickedIds([5, 6], [5, 6]), InvalidArgumentError, /2 rows need 1 draft tokens, got 2/);
  });
});

describe('softmaxRow and sampleFrom', () => {
  it('softmax sums to one and keeps the order of the logits; temperature sharpens', () => {
    const logits = randomLogits(15, 2);
    const p = softmaxRow(logits, VOCAB, 1, 1);
    const sharp = softmaxRow(logits, VOCAB, 1, 0.25);
    expect(p.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 6);
    expect(ranked(Float32Array.from([...new Array(VOCAB).fill(0), ...p]), 1)).toEqual(ranked(logits, 1));
    const top = ranked(logits, 1)[0]!;
    expect(sharp[top]!).toBeGreaterThan(p[top]!);
  });

  it('draws in proportion to unnormalised weights, never a zero-weight index', () => {
    const weights = new Float32Array([0, 3, 1, 0, 4, 0]);
    const random = new SeededRandom(16);
    const counts = new Array<number>(VOCAB).fill(0);
    const n = 20_000;
    for (let i = 0; i < n; i++) counts[sampleFrom(weights, random)]!++;
    expect([counts[0], counts[3], counts[5]]).toEqual([0, 0, 0]);
    expectFrequency(counts[1]!, n, 3 / 8, 'weight 3');
    expectFrequency(counts[2]!, n, 1 / 8, 'weight 1');
    expectFrequency(counts[4]!, n, 4 / 8, 'weight 4');
    expectThrow(() => sampleFrom(new Float32Array(4), random), InvalidArgumentError, /no mass/);
  });
});
