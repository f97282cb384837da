import { uniformFloat64 } from 'pure-rand/distribution/uniformFloat64';
import { xoroshiro128plus } from 'pure-rand/generator/xoroshiro128plus';
import { describe, expect, it } from 'vitest';
import {
  InvalidArgumentError, RequestSampler, SeededRandom, TokenHistory, adjustLogits, adjustsLogits, checkSampling, positionLogprobs, randomSeed, topLogprobs,
  type SamplingParams,
} from '../src/index.js';

const V = 12;
const row = () => Float32Array.from([2.5, -1.5, 0.75, 3, -0.25, 0, 1.25, -3, 0.5, 2, -2, 1]);
const argmax = (r: Float32Array) => r.indexOf(Math.max(...r));

/** The adjustments written out as vLLM's definitions read, one token at a time. */
function direct(logits: Float32Array, p: SamplingParams, prompt: number[], output: number[], stop: number[]): Float32Array {
  const out = Float32Array.from(logits);
  for (let t = 0; t < out.length; t++) {
    let v = out[t]!;
    if (output.length < (p.minTokens ?? 0) && stop.includes(t)) v = -Infinity;
    v += p.logitBias?.get(t) ?? 0;
    out[t] = v;
    const seen = prompt.includes(t) || output.includes(t);
    const rep = p.repetitionPenalty ?? 1;
    if (seen) out[t] = out[t]! > 0 ? out[t]! / rep : out[t]! * rep;
    const count = output.filter((x) => x === t).length;
    out[t] = out[t]! - (p.frequencyPenalty ?? 0) * count;
    out[t] = out[t]! - (count > 0 ? p.presencePenalty ?? 0 : 0);
  }
  return out;
}

function adjusted(p: SamplingParams, prompt: number[], output: number[], stop: number[] = []): Float32Array {
  const h = new TokenHistory(prompt);
  for (const t of output) h.push(t);
  const r = row();
  adjustLogits(r, p, h, stop);
  return r;
}

describe('logit adjustments (vLLM order: min tokens, logit bias, repetition, frequency, presence)', () => {
  const prompt = [0, 3, 3, 7];
  const output = [3, 9, 9, 9, 1];

  it('each penalty equals its definition, computed directly', () => {
    for (const p of [
      { repetitionPenalty: 1.7 }, { repetitionPenalty: 0.6 }, { frequencyPenalty: 0.8 }, { presencePenalty: -1.5 }, { frequencyPenalty: -0.3, presencePenalty: 1.1 },
      { repetitionPenalty: 1.3, frequencyPenalty: 0.5, presencePenalty: 0.5, logitBias: new Map([[9, 4], [5, -2]]) },
    ] satisfies SamplingParams[]) {
      expect(Array.from(adjusted(p, prompt, output))).toEqual(Array.from(direct(row(), p, prompt, output, [])));
    }
  });

  it('repetition divides a positive logit and multiplies a negative one, of prompt and output tokens only', () => {
    const r = adjusted({ repetitionPenalty: 2 }, prompt, output);
    expect(r[3]).toBe(1.5); // 3 in prompt and output
    expect(r[7]).toBe(-6); // prompt only
    expect(r[1]).toBe(-3); // output only
    expect(r[5]).toBe(0); // zero stays zero
    expect(r[2]).toBe(0.75); // never seen
  });

  it('frequency counts every occurrence in the output, presence once; the prompt does not count', () => {
    const r = adjusted({ frequencyPenalty: 1, presencePenalty: 0.5 }, prompt, output);
    expect(r[9]).toBe(2 - 3 - 0.5);
    expect(r[3]).toBe(3 - 1 - 0.5);
    expect(r[7]).toBe(-3);
  });

  it('the logit bias comes before the repetition penalty (a bias that makes a logit positive is then divided)', () => {
    const r = adjusted({ logitBias: new Map([[7, 5]]), repetitionPenalty: 2 }, prompt, []);
    expect(r[7]).toBe(1);
  });

  it('min tokens masks the stop tokens while fewer are generated, and only then', () => {
    expect(adjusted({ minTokens: 3 }, prompt, [1, 2], [3, 9])[3]).toBe(-Infinity);
    expect(adjusted({ minTokens: 3 }, prompt, [1, 2], [3, 9])[9]).toBe(-Infinity);
    expect(adjusted({ minTokens: 2 }, prompt, [1, 2], [3, 9])[3]).toBe(3);
  });

  it('knows when nothing adjusts (no copy of the row needed)', () => {
    expect(adjustsLogits(undefined, [1])).toBe(false);
    expect(adjustsLogits({ temperature: 1, repetitionPenalty: 1, presencePenalty: 0, frequencyPenalty: 0, logitBias: new Map(), minTokens: 4 }, [])).toBe(false);
    expect(adjustsLogits({ minTokens: 4 }, [1])).toBe(true);
    expect(adjustsLogits({ frequencyPenalty: 0.1 }, [])).toBe(true);
  });

  it('a history extended by drafts leaves the original as it was', () => {
    const h = new TokenHistory([1, 2]);
    h.push(4);
    const e = h.extended([4, 5]);
    expect(e.generated).toBe(3);
    expect(e.outputCounts.get(4)).toBe(2);
    expect(h.generated).toBe(1);
    expect(h.outputCounts.get(4)).toBe(1);
    expect(h.outputCounts.has(5)).toBe(false);
  });

  it('checkSampling names the field that is out of range', () => {
    expect(() => checkSampling({ presencePenalty: 2.5 })).toThrow(/presencePenalty must be in \[-2, 2\]/);
    expect(() => checkSampling({ frequencyPenalty: -3 })).toThrow(/frequencyPenalty/);
    expect(() => checkSampling({ repetitionPenalty: 0 })).toThrow(/repetitionPenalty must be a finite number > 0/);
    expect(() => checkSampling({ minTokens: -1 })).toThrow(/minTokens/);
    expect(() => checkSampling({ logitBias: new Map([[1, Number.NaN]]) })).toThrow(/logitBias of token 1/);
    expect(() => checkSampling({ seed: 1.5 })).toThrow(/seed/);
    expect(() => checkSampling({ seed: 2n ** 70n })).not.toThrow();
  });
});

describe('RequestSampler', () => {
  it('greedy picks the argmax of the adjusted row: a bias of −100 on the favourite picks the runner-up', () => {
    const logits = row();
    expect(new RequestSampler(undefined, [1], []).sample(logits, V, 0)).toBe(3);
    expect(new RequestSampler({ logitBias: new Map([[3, -100]]) }, [1], []).sample(logits, V, 0)).toBe(0);
  });

  it('rows ahead of its history count the drafts as output (penalties, min tokens)', () => {
    const s = new RequestSampler({ frequencyPenalty: 2, minTokens: 2 }, [1], [6]);
    const logits = row();
    expect(s.row(logits, V, 0)[6]).toBe(-Infinity);
    expect(s.row(logits, V, 0, [3, 3])[3]).toBe(3 - 4);
    expect(s.row(logits, V, 0, [3, 3])[6]).toBe(1.25);
    s.accept(3);
    expect(s.row(logits, V, 0)[3]).toBe(1);
    // The model's row itself is never changed.
    expect(Array.from(logits)).toEqual(Array.from(row()));
  });
});

describe('64-bit seeds', () => {
  it('a 32-bit seed gives the stream it always gave', () => {
    const rng = xoroshiro128plus(5);
    const r = new SeededRandom(5);
    for (let i = 0; i < 4; i++) expect(r.float()).toBe(uniformFloat64(rng));
  });

  it('every bit of a 64-bit seed counts; a seed is its 64-bit value whatever its type', () => {
    const first = (s: number | bigint) => Array.from({ length: 4 }, ((r) => () => r.float())(new SeededRandom(s)));
    const max = 2n ** 63n - 1n;
    expect(first(max)).toEqual(first(max));
    expect(first(max)).not.toEqual(first(max - 1n));
    expect(first(2n ** 40n)).not.toEqual(first(2n ** 41n));
    expect(first(5n)).toEqual(first(5));
    expect(first(2n ** 64n + 7n)).toEqual(first(7));
    expect(first(2n ** 64n - 1n)).toEqual(first(-1));
    expect(() => new SeededRandom(0.5)).toThrow(InvalidArgumentError);
  });

  it('a random seed is a fresh 64-bit value each time', () => {
    const a = randomSeed();
    const b = randomSeed();
    expect(typeof a).toBe('bigint');
    expect(a).not.toBe(b);
    expect(a < 2n ** 64n && a >= 0n).toBe(true);
  });
});

describe('positionLogprobs', () => {
  it("a token's logprob, its rank (ties share it) and the row's top N, of the model's row", () => {
    const logits = Float32Array.from([1, 3, 3, 0.5, -2]);
    const lse = Math.log(logits.reduce((a, v) => a + Math.exp(v), 0));
    const p = positionLogprobs(logits, 5, 0, 3, 2);
    expect(p.logprob).toBeCloseTo(0.5 - lse, 12);
    expect(p.rank).toBe(4);
    expect(p.top).toEqual(topLogprobs(logits, 5, 0, 2));
    expect(p.top.map((e) => e.token)).toEqual([1, 2]);
    expect(positionLogprobs(logits, 5, 0, 1, 0)).toMatchObject({ token: 1, rank: 2, top: [] });
    expect(argmax(logits)).toBe(1);
    expect(() => positionLogprobs(logits, 5, 0, 5, 1)).toThrow(/outside the vocabulary/);
  });
});
