import { describe, expect, it } from 'vitest';
import { NgramProposer, SeededRandom, parseNgramSpec, probabilityFilter, sampleLogitsRow } from '../src/index.js';

describe('NgramProposer (prompt lookup)', () => {
  it('continues the most recent earlier occurrence of the longest matching suffix', () => {
    const p = new NgramProposer({ k: 3, minN: 1, maxN: 3 });
    // Suffix [7, 8] last occurred at index 4 (followed by 9, 1), and earlier at 0 (followed by 5).
    expect(p.propose([7, 8, 5, 0, 7, 8, 9, 1, 2, 7, 8])).toEqual([9, 1, 2]);
    expect(p.propose([1, 2, 3, 1, 2], 1)).toEqual([3]);
    expect(p.propose([1, 2, 3])).toEqual([]);
    expect(p.propose([4])).toEqual([]);
  });

  it('prefers a longer n-gram over a more recent shorter one', () => {
    const p = new NgramProposer({ k: 2, minN: 1, maxN: 2 });
    // [3, 4] matches at 0 (→ 5, 6); [4] alone matches more recently at 5 (→ 9).
    expect(p.propose([3, 4, 5, 6, 0, 4, 9, 3, 4])).toEqual([5, 6]);
  });

  it('parses --spec values', () => {
    expect(parseNgramSpec('ngram')).toEqual({ k: 4, minN: 1, maxN: 3, adaptive: true });
    expect(parseNgramSpec('ngram:k=6,min=2,max=5')).toEqual({ k: 6, minN: 2, maxN: 5, adaptive: true });
    expect(parseNgramSpec('ngram:k=2,adaptive=0')).toEqual({ k: 2, minN: 1, maxN: 3, adaptive: false });
    expect(() => parseNgramSpec('ngram:adaptive=yes')).toThrow(/adaptive=0/);
    expect(() => parseNgramSpec('eagle')).toThrow(/unknown proposer/);
    expect(() => parseNgramSpec('ngram:k=0')).toThrow(/positive integer/);
    expect(() => parseNgramSpec('ngram:min=4,max=2')).toThrow(/must not exceed/);
  });
});

describe('sampling filters', () => {
  const probs = Float32Array.from([0.05, 0.4, 0.1, 0.3, 0.15]);
  it('top-k, top-p and min-p keep what Hugging Face keeps (ties at a cut-off kept)', () => {
    expect(Array.from(probabilityFilter({ topK: 2 })!(probs))).toEqual([0, 0.4, 0, 0.3, 0].map(Math.fround));
    expect(Array.from(probabilityFilter({ topP: 0.75 })!(probs)).map((v) => v > 0)).toEqual([false, true, false, true, true]);
    expect(Array.from(probabilityFilter({ minP: 0.3 })!(probs)).map((v) => v > 0)).toEqual([false, true, false, true, true]);
    expect(probabilityFilter({ temperature: 1 })).toBeUndefined();
  });

  it('greedy is the argmax; a sampled token always survives the filters', () => {
    const logits = new SeededRandom(1).normals(50, 2);
    const best = logits.indexOf(Math.max(...logits));
    expect(sampleLogitsRow(logits, 50, 0, undefined, new SeededRandom(0))).toBe(best);
    const rnd = new SeededRandom(3);
    for (let i = 0; i < 50; i++) {
      const t = sampleLogitsRow(logits, 50, 0, { temperature: 2, topK: 3 }, rnd);
      const top3 = [...logits].map((v, j) => [v, j] as const).sort((a, b) => b[0] - a[0]).slice(0, 3).map((x) => x[1]);
      expect(top3).toContain(t);
    }
  });
});
