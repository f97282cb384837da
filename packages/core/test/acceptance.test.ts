import { describe, expect, it } from 'vitest';
import {
  acceptGreedy,
  acceptRejection,
  argmaxRow,
  InvalidArgumentError,
  probabilityFilter,
  sampleFrom,
  SeededRandom,
  softmaxRow,
  type Acceptance,
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

describe('acceptRejection', () => {
  const temperature = 0.8;
  const N = 40_000;

  it('with a point-mass drafter, gives (accepted, next) distributed as sampling the target token by token', () => {
    const k = 3;
    const logits = randomLogits(3, k, 1);
    const p = [0, 1, 2].map((r) => softmaxRow(logits, VOCAB, r, temperature));
    // A likely-but-not-top first draft and the top second draft: every outcome has mass.
    const drafts = [ranked(logits, 0)[1]!, ranked(logits, 1)[0]!];
    const random = new SeededRandom(4);
    const counts = new Map<string, number>();
    const firstToken = new Array<number>(VOCAB).fill(0);
    for (let i = 0; i < N; i++) {
      const a = acceptRejection(logits, VOCAB, drafts, { temperature, random });
      counts.set(`${a.accepted}:${a.next}`, (counts.get(`${a.accepted}:${a.next}`) ?? 0) + 1);
      firstToken[a.accepted >= 2 ? drafts[0]! : a.next]!++;
    }
    // Sequential sampling: token 0 ~ p0; if it is the draft, token 1 ~ p1; and so on.
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
      expectFrequency(firstToken[t]!, N, p[0]![t]!, `first emitted token ${t}`);
    }
    expect(total).toBeCloseTo(1, 5);
    // Never 'rejects' a draft into itself.
    expect(counts.get(`1:${d0}`)).toBeUndefined();
    expect(counts.get(`2:${d1}`)).toBeUndefined();
  });

  it('with an explicit draft distribution q, emits tokens distributed as the target', () => {
    const k = 3;
    const logits = randomLogits(5, k, 1);
    const p = [0, 1, 2].map((r) => softmaxRow(logits, VOCAB, r, temperature));
    const qRandom = new SeededRandom(6);
    const q = [0, 1].map(() => {
      const raw = Float32Array.from({ length: VOCAB }, () => 0.05 + qRandom.float());
      const sum = raw.reduce((a, b) => a + b, 0);
      return raw.map((x) => x / sum);
    });
    const draftRandom = new SeededRandom(7);
    const random = new SeededRandom(8);
    const first = new Array<number>(VOCAB).fill(0);
    const second = new Array<number>(VOCAB).fill(0);
    const third = new Array<number>(VOCAB).fill(0);
    let acceptedAll = 0;
    for (let i = 0; i < N; i++) {
      const drafts = q.map((qi) => sampleFrom(qi, draftRandom));
      const a: Acceptance = acceptRejection(logits, VOCAB, drafts, { temperature, random, draftProbs: q });
      if (!(a.accepted >= 1 && a.accepted <= k)) throw new Error(`accepted ${a.accepted} outside 1..${k}`);
      const emitted = [...drafts.slice(0, a.accepted - 1), a.next];
      first[emitted[0]!]!++;
      if (emitted.length >= 2) second[emitted[1]!]!++;
      if (emitted.length >= 3) third[emitted[2]!]!++;
      if (a.accepted === k) acceptedAll++;
    }
    const n2 = second.reduce((x, y) => x + y, 0);
    const n3 = third.reduce((x, y) => x + y, 0);
    expect(n2).toBeGreaterThan(N / 10);
    expect(n3).toBe(acceptedAll);
    for (let t = 0; t < VOCAB; t++) {
      expectFrequency(first[t]!, N, p[0]![t]!, `token 0 = ${t}`);
      expectFrequency(second[t]!, n2, p[1]![t]!, `token 1 = ${t} given two tokens`);
      expectFrequency(third[t]!, n3, p[2]![t]!, `token 2 = ${t} given three tokens`);
    }
    // Acceptance rate of draft 0 is Σ min(p, q) (the overlap of the two distributions).
    const overlap = p[0]!.reduce((acc, pi, t) => acc + Math.min(pi, q[0]![t]!), 0);
    expectFrequency(n2, N, overlap, 'first draft accepted');
  });

  it('with a filter (top-k, top-p, min-p), gives tokens distributed as sampling the filtered target, its kept mass renormalised', () => {
    // One draft, the top token: it is emitted with its filtered, renormalised probability (a filter
    // zeroes what it drops; taking the kept p(x) as it stands would accept too rarely).
    const logits = randomLogits(15, 2, 1);
    for (const params of [{ topK: 3 }, { topP: 0.6 }, { minP: 0.3 }, { topK: 5, topP: 0.8 }]) {
      const transform = probabilityFilter(params)!;
      const p = [0, 1].map((r) => {
        const f = transform(softmaxRow(logits, VOCAB, r, temperature));
        const sum = f.reduce((a, b) => a + b, 0);
        return f.map((x) => x / sum);
      });
      const draft = ranked(logits, 0)[0]!;
      const random = new SeededRandom(16);
      const first = new Array<number>(VOCAB).fill(0);
      const second = new Array<number>(VOCAB).fill(0);
      let n2 = 0;
      const n = 20_000;
      for (let i = 0; i < n; i++) {
        const a = acceptRejection(logits, VOCAB, [draft], { temperature, random, transform });
        first[a.accepted === 2 ? draft : a.next]!++;
        if (a.accepted === 2) second[a.next]!++, n2++;
      }
      for (let t = 0; t < VOCAB; t++) {
        expectFrequency(first[t]!, n, p[0]![t]!, `${JSON.stringify(params)}: token 0 = ${t}`);
        expectFrequency(second[t]!, n2, p[1]![t]!, `${JSON.stringify(params)}: token 1 = ${t}`);
      }
    }
  });

  it('is reproducible from the seed', () => {
    const logits = randomLogits(9, 3);
    const run = (seed: number) => {
      const random = new SeededRandom(seed);
      return Array.from({ length: 50 }, () => acceptRejection(logits, VOCAB, [1, 2], { temperature: 1, random }));
    };
    expect(run(10)).toEqual(run(10));
    expect(run(10)).not.toEqual(run(11));
  });

  it('applies the probability transform: top-1 makes it greedy', () => {
    const top1 = (row: Float32Array): Float32Array => {
      let best = 0;
      for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
      return Float32Array.from(row, (_, i) => (i === best ? 1 : 0));
    };
    const random = new SeededRandom(12);
    for (let trial = 0; trial < 40; trial++) {
      const logits = randomLogits(100 + trial, 4);
      const drafts = [0, 1, 2].map((r) => (trial % 3 === r ? ranked(logits, r)[1]! : ranked(logits, r)[0]!));
      expect(acceptRejection(logits, VOCAB, drafts, { temperature: 0.7, random, transform: top1 })).toEqual(acceptGreedy(logits, VOCAB, drafts));
    }
  });

  it('refuses a temperature ≤ 0 and mismatched draft distributions', () => {
    const logits = randomLogits(13, 2);
    const random = new SeededRandom(14);
    for (const temperature of [0, -0.5, Number.NaN]) {
      expectThrow(() => acceptRejection(logits, VOCAB, [1], { temperature, random }), InvalidArgumentError, /temperature must be > 0 for sampling, got/);
    }
    expectThrow(() => softmaxRow(logits, VOCAB, 0, 0), InvalidArgumentError, /got 0/);
    expectThrow(
      () => acceptRejection(logits, VOCAB, [1], { temperature: 1, random, draftProbs: [] }),
      InvalidArgumentError,
      /1 drafts need 1 draft distributions, got 0/,
    );
    expectThrow(() => acceptRejection(logits, VOCAB, [], { temperature: 1, random }), InvalidArgumentError, /2 logit rows need 1 draft tokens, got 0/);
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
