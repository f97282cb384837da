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

  it('select the same cut-offs as sorting the whole row: many rows, ties, zeros, flat and peaked, top-p near 1, a NaN', () => {
    // The filters as they were, sorting the whole row (the definition the faster selection must keep, bit for bit).
    const sortedFilter = (p: { topK?: number; topP?: number; minP?: number }) => (probs: Float32Array): Float32Array => {
      const out = Float32Array.from(probs);
      const topK = p.topK ?? 0, topP = p.topP ?? 1, minP = p.minP ?? 0;
      if (topK > 0 && topK < out.length) {
        const v = Float32Array.from(out).sort()[out.length - topK]!;
        for (let i = 0; i < out.length; i++) if (out[i]! < v) out[i] = 0;
      }
      if (topP < 1) {
        let total = 0;
        for (let i = 0; i < out.length; i++) total += out[i]!;
        const sorted = Float32Array.from(out).sort().reverse();
        let acc = 0;
        let v = sorted[0]!;
        for (let i = 0; i < sorted.length && sorted[i]! > 0; i++) {
          v = sorted[i]!;
          acc += v;
          if (acc >= topP * total) break;
        }
        for (let i = 0; i < out.length; i++) if (out[i]! < v) out[i] = 0;
      }
      if (minP > 0) {
        let max = 0;
        for (let i = 0; i < out.length; i++) max = Math.max(max, out[i]!);
        for (let i = 0; i < out.length; i++) if (out[i]! < minP * max) out[i] = 0;
      }
      return out;
    };
    const rnd = new SeededRandom(12);
    const rows: Float32Array[] = [];
    for (const [V, scale] of [[151_936, 3], [151_936, 0.01], [4096, 8], [300, 1], [5, 2], [1, 1]] as const) {
      const l = rnd.normals(V, scale);
      let max = -Infinity;
      for (const v of l) max = Math.max(max, v);
      let sum = 0;
      const e = l.map((v) => Math.exp(v - max));
      for (const v of e) sum += v;
      rows.push(Float32Array.from(e, (v) => v / sum));
    }
    // Ties at and around the cut-offs, exact zeros, a uniform row, powers of two on binade edges, a NaN.
    rows.push(Float32Array.from({ length: 1000 }, (_, i) => (i % 10 === 0 ? 0 : Math.fround(1 / 900) * (i % 3 === 0 ? 2 : 1))));
    rows.push(new Float32Array(2048).fill(1 / 2048));
    rows.push(Float32Array.from({ length: 64 }, (_, i) => 2 ** -(i % 20)));
    rows.push(Float32Array.from([0.5, Number.NaN, 0.25, 0.25]));
    const cases = [{ topK: 1 }, { topK: 5 }, { topK: 50 }, { topK: 999 }, { topP: 0.5 }, { topP: 0.8 }, { topP: 0.95 }, { topP: 0.999999 }, { topP: 1e-7 }, { topK: 20, topP: 0.8 }, { topK: 40, topP: 0.9, minP: 0.02 }];
    for (const [r, probs] of rows.entries()) {
      for (const c of cases) {
        const got = probabilityFilter(c)!(probs);
        const want = sortedFilter(c)(probs);
        const a = new Uint32Array(got.buffer), b = new Uint32Array(want.buffer);
        let differ = a.length === b.length ? 0 : -1;
        for (let i = 0; differ >= 0 && i < a.length; i++) if (a[i] !== b[i]) differ++;
        expect(differ, `row ${r} (${probs.length}), ${JSON.stringify(c)}: entries that differ`).toBe(0);
      }
    }
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
