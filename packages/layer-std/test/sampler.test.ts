import { CpuBackend } from '@metrale/cpu-backend';
import { ARGMAX_ROW, SeededRandom, positionLogprobs, sampleLogitsRow, type SampledRow, type SamplingParams } from '@metrale/core';
import {
  DeviceSampler, SAMPLE_PHASE_DRAW, SAMPLE_POOLED_TOP_K, SAMPLE_SLICE, argmaxLaunch, argmaxPartialsBytes, argmaxSlices, sampleLaunch, samplePhases, sampleScratchBytes, sampleScratchZeroBytes,
  sampleSlices,
} from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';

const V = 300;

describe('DeviceSampler picks the tokens the host sampler picks', () => {
  const rows = 6;
  const logits = new SeededRandom(3).normals(rows * V, 3);
  const cases: [string, SamplingParams | undefined][] = [
    ['greedy', undefined],
    ['temperature 0.7', { temperature: 0.7 }],
    ['top-k 5', { temperature: 1, topK: 5 }],
    ['top-p 0.8', { temperature: 1.3, topP: 0.8 }],
    ['min-p 0.1', { temperature: 0.9, minP: 0.1 }],
    ['all filters', { temperature: 1.1, topK: 40, topP: 0.9, minP: 0.02 }],
  ];
  for (const [name, params] of cases) {
    it(name, () => {
      const gpu = new CpuBackend();
      const sampler = new DeviceSampler(gpu, rows);
      const dev = gpu.alloc(4 * rows * V);
      gpu.upload(dev, logits);
      for (let round = 0; round < 5; round++) {
        const hostRandoms = Array.from({ length: rows }, (_, r) => new SeededRandom(100 * round + r));
        const devRandoms = Array.from({ length: rows }, (_, r) => new SeededRandom(100 * round + r));
        const got = sampler.pick(dev, rows, V, params, gpu.defaultStream, params ? devRandoms : undefined);
        const want = Array.from({ length: rows }, (_, r) => sampleLogitsRow(logits, V, r, params, hostRandoms[r]!));
        expect(Array.from(got)).toEqual(want);
      }
      sampler.dispose();
      gpu.dispose();
    });
  }

  it('top-k 1 and a tiny top-p are greedy', () => {
    const gpu = new CpuBackend();
    const sampler = new DeviceSampler(gpu, rows);
    const dev = gpu.alloc(4 * rows * V);
    gpu.upload(dev, logits);
    const greedy = sampler.pick(dev, rows, V, undefined, gpu.defaultStream);
    const randoms = () => Array.from({ length: rows }, (_, r) => new SeededRandom(r));
    expect(sampler.pick(dev, rows, V, { temperature: 1, topK: 1 }, gpu.defaultStream, randoms())).toEqual(greedy);
    expect(sampler.pick(dev, rows, V, { temperature: 1, topP: 1e-6 }, gpu.defaultStream, randoms())).toEqual(greedy);
    gpu.dispose();
  });
});

describe('DeviceSampler.sample: each row by its own parameters, in one launch', () => {
  const rows = 6;
  const logits = new SeededRandom(5).normals(rows * V, 3);
  // Greedy rows between sampled ones with different filters (what a served batch holds).
  const params: (SamplingParams | undefined)[] = [
    { temperature: 0.7 }, undefined, { temperature: 1, topK: 5 }, { temperature: 1.3, topP: 0.8 }, undefined, { temperature: 1.1, topK: 40, topP: 0.9, minP: 0.02 },
  ];
  it('gives every row the token the host sampler gives it alone, drawing only for the sampled rows', () => {
    const gpu = new CpuBackend();
    const sampler = new DeviceSampler(gpu, 8);
    const dev = gpu.alloc(4 * rows * V);
    gpu.upload(dev, logits);
    for (let round = 0; round < 5; round++) {
      const host = params.map((_, r) => new SeededRandom(100 * round + r));
      const device = params.map((_, r) => new SeededRandom(100 * round + r));
      const picked = params.map((p, r) => (p ? { temperature: p.temperature!, topK: p.topK ?? 0, topP: p.topP ?? 1, minP: p.minP ?? 0, uniform: device[r]!.float() } : { temperature: 0, topK: 0, topP: 1, minP: 0, uniform: 0 }));
      const got = sampler.sample(dev, picked, V, gpu.defaultStream).tokens;
      const want = params.map((p, r) => sampleLogitsRow(logits, V, r, p, host[r]!));
      expect(Array.from(got)).toEqual(want);
      // The greedy rows are the argmax kernel's tokens; a row's token does not depend on the others.
      const greedy = sampler.argmax(dev, rows, V, gpu.defaultStream);
      expect([got[1], got[4]]).toEqual([greedy[1], greedy[4]]);
      expect(sampler.sample(dev + BigInt(4 * 3 * V), [picked[3]!], V, gpu.defaultStream).tokens[0]).toBe(got[3]);
    }
    sampler.dispose();
    gpu.dispose();
  });

  it('refuses a row it would misread, naming the row and the field', () => {
    const gpu = new CpuBackend();
    const sampler = new DeviceSampler(gpu, 2);
    const dev = gpu.alloc(4 * 2 * V);
    const ok = { temperature: 1, topK: 0, topP: 1, minP: 0, uniform: 0.5 };
    expect(() => sampler.sample(dev, [ok, { ...ok, topP: 0 }], V, gpu.defaultStream)).toThrow(/row 1's topP must be in \(0, 1\], got 0/);
    expect(() => sampler.sample(dev, [{ ...ok, topK: 2.5 }], V, gpu.defaultStream)).toThrow(/row 0's topK must be a whole number/);
    expect(() => sampler.sample(dev, [{ ...ok, uniform: 1 }], V, gpu.defaultStream)).toThrow(/row 0's uniform must be in \[0, 1\), got 1/);
    expect(() => sampler.sample(dev, [ok, ok, ok], V, gpu.defaultStream)).toThrow(/rows must be between 1 and 2, got 3/);
    expect(() => sampler.sample(dev, [{ ...ok, logprobs: 21 }], V, gpu.defaultStream)).toThrow(/row 0's logprobs must be a whole number in \[0, 20\], got 21/);
    expect(() => sampler.sample(dev, [ok, { ...ok, logprobs: 1.5 }], V, gpu.defaultStream)).toThrow(/row 1's logprobs must be a whole number/);
    sampler.dispose();
    gpu.dispose();
  });
});

describe('DeviceSampler.sample with logprobs', () => {
  it('gives the rows that ask core\'s positionLogprobs of their token (ties at the cut to the lower ids), the others none', () => {
    const rows = 4;
    const logits = new SeededRandom(21).normals(rows * V, 2);
    // Row 1: its top 3 equal and a tie of 6 across the 5th place; row 3: a flat row.
    for (const i of [17, 250, 3]) logits[V + i] = 9;
    for (const i of [290, 11, 140, 60, 200, 99]) logits[V + i] = 7;
    logits[V + 120] = 8;
    logits.fill(0.5, 3 * V, 4 * V);
    const gpu = new CpuBackend();
    const sampler = new DeviceSampler(gpu, rows);
    const dev = gpu.alloc(4 * rows * V);
    gpu.upload(dev, logits);
    const u = new SeededRandom(4);
    const picked: SampledRow[] = [
      { ...ARGMAX_ROW, logprobs: 5 },
      { temperature: 0.8, topK: 0, topP: 0.9, minP: 0, uniform: u.float(), logprobs: 5 },
      { temperature: 1, topK: 0, topP: 1, minP: 0, uniform: u.float() },
      { ...ARGMAX_ROW, logprobs: 0 },
    ];
    const got = sampler.sample(dev, picked, V, gpu.defaultStream);
    expect(got.logprobs[2]).toBeUndefined();
    for (const r of [0, 1, 3]) expect(got.logprobs[r]).toEqual(positionLogprobs(logits, V, r, got.tokens[r]!, picked[r]!.logprobs!));
    expect(got.logprobs[1]!.top.map((t) => t.token)).toEqual([3, 17, 250, 120, 11]);
    expect(got.logprobs[3]).toMatchObject({ token: 0, rank: V, top: [] });
    // Fewer tokens than asked for: each of them, once.
    const small = gpu.alloc(4 * 8);
    gpu.upload(small, Float32Array.from([1, -Infinity, 3, 3, 0, -2, 5, 1]));
    const few = sampler.sample(small, [{ ...ARGMAX_ROW, logprobs: 20 }], 8, gpu.defaultStream);
    expect(few.logprobs[0]!.top.map((t) => t.token)).toEqual([6, 2, 3, 0, 7, 4, 5, 1]);
    expect(few.logprobs[0]).toEqual(positionLogprobs(new Float32Array(gpu.download(small, 32).buffer), 8, 0, 6, 20));
    sampler.dispose();
    gpu.dispose();
  });
});

describe('DeviceSampler.argmaxAsync', () => {
  it('enqueues the greedy ids: on the device until its next call, on the host once read, two calls kept apart', () => {
    const rows = 5;
    const gpu = new CpuBackend();
    const sampler = new DeviceSampler(gpu, 8);
    const dev = gpu.alloc(4 * rows * V);
    const logits = new SeededRandom(9).normals(rows * V, 3);
    gpu.upload(dev, logits);
    const want = sampler.argmax(dev, rows, V, gpu.defaultStream);
    const a = sampler.argmaxAsync(dev, rows, V, gpu.defaultStream);
    expect(new Int32Array(gpu.download(a.device, 4 * rows).buffer)).toEqual(want);
    const b = sampler.argmaxAsync(dev + BigInt(4 * 2 * V), 3, V, gpu.defaultStream);
    expect(a.read()).toEqual(want);
    expect(() => a.read()).toThrow(/read already/);
    const c = sampler.argmaxAsync(dev, 1, V, gpu.defaultStream);
    const d = sampler.argmaxAsync(dev, 1, V, gpu.defaultStream);
    // b's host copy was reused by d: reading it now would return d's ids.
    expect(() => b.read()).toThrow(/overwritten by call 3; read a call's ids before the call after next/);
    expect(c.read()).toEqual(want.slice(0, 1));
    expect(d.read()).toEqual(want.slice(0, 1));
    expect(() => sampler.argmaxAsync(dev, 9, V, gpu.defaultStream)).toThrow(/rows must be between 1 and 8, got 9/);
    sampler.dispose();
    gpu.dispose();
  });
});

describe('std.argmax\'s launch shape', () => {
  const stream = new CpuBackend().defaultStream;
  it('spreads few rows over the GPU, one CTA per row once the rows fill it, within the sampler\'s partials', () => {
    for (const sms of [132, 8, 1]) {
      for (const vocab of [151_936, 262_144, 4099, 2048, 300, 1]) {
        const maxRows = 512;
        for (let rows = 1; rows <= maxRows; rows++) {
          const { grid, block } = argmaxLaunch(rows, vocab, sms, stream);
          const slices = (grid as readonly number[])[0]!;
          const rowCtas = (grid as readonly number[])[1]!;
          expect(slices).toBe(argmaxSlices(rows, vocab, sms));
          expect(rowCtas).toBe(rows);
          expect(block).toBe(256);
          expect(slices).toBeGreaterThanOrEqual(1);
          // No more slices than slices of 2048 logits need, nor CTAs than two a multiprocessor and a row's worth.
          if (slices > 1) expect(2048 * (slices - 1)).toBeLessThan(vocab);
          expect(rows * slices).toBeLessThan(2 * sms + rows);
          expect(8 * rows * slices).toBeLessThanOrEqual(argmaxPartialsBytes(rows, sms));
          if (rows >= 2 * sms) expect(slices).toBe(1);
        }
      }
    }
    // One row of the Qwen3 vocabulary on a 132-SM GPU: tens of CTAs, not one.
    expect(argmaxSlices(1, 151_936, 132)).toBeGreaterThanOrEqual(32);
    expect(argmaxSlices(64, 151_936, 132) * 64).toBeGreaterThanOrEqual(132);
  });

  it('DeviceSampler picks again and again, at every row count', () => {
    const gpu = new CpuBackend();
    const rows = 5;
    const sampler = new DeviceSampler(gpu, rows);
    const dev = gpu.alloc(4 * rows * V);
    const logits = new SeededRandom(9).normals(rows * V, 3);
    gpu.upload(dev, logits);
    for (let n = 1; n <= rows; n++) {
      const want = Array.from({ length: n }, (_, r) => sampleLogitsRow(logits, V, r, undefined, new SeededRandom(0)));
      for (let round = 0; round < 2; round++) expect(Array.from(sampler.argmax(dev, n, V, gpu.defaultStream))).toEqual(want);
    }
    sampler.dispose();
    gpu.dispose();
  });
});

describe('std.sample\'s phases and scratch', () => {
  const row = (temperature: number, topK = 0, topP = 1) => ({ temperature, topK, topP });
  it('launches the slices always, the top-k digit passes only when a sampled row\'s top-k is past the pools, the top-p ones only when a sampled row has top-p, the draw for any sampled row', () => {
    expect(samplePhases([row(0), row(0)])).toEqual([0]);
    expect(samplePhases([row(0.7)])).toEqual([0, SAMPLE_PHASE_DRAW]);
    expect(samplePhases([row(0.7, 20), row(0)])).toEqual([0, SAMPLE_PHASE_DRAW]);
    expect(samplePhases([row(0.7, 20, 0.8), row(1, 0, 0.95)])).toEqual([0, 4, 5, 6, SAMPLE_PHASE_DRAW]);
    expect(samplePhases([row(0.7, SAMPLE_POOLED_TOP_K + 1)])).toEqual([0, 1, 2, 3, SAMPLE_PHASE_DRAW]);
    expect(samplePhases([row(0.7, 600, 0.9), row(0)])).toEqual([0, 1, 2, 3, 4, 5, 6, SAMPLE_PHASE_DRAW]);
    expect(samplePhases([row(0, 600, 0.9)])).toEqual([0]);
    // A greedy row's top-p is not looked at.
    expect(samplePhases([row(0, 0, 0.5)])).toEqual([0]);
  });

  it('cuts every row into the same slices whatever the batch, within the scratch', () => {
    const stream = new CpuBackend().defaultStream;
    for (const vocab of [151_936, 262_144, 4097, 4096, 64]) {
      const slices = sampleSlices(vocab);
      expect(SAMPLE_SLICE * (slices - 1)).toBeLessThan(vocab);
      expect(SAMPLE_SLICE * slices).toBeGreaterThanOrEqual(vocab);
      for (const rows of [1, 8, 64]) expect(sampleLaunch(rows, vocab, stream).grid).toEqual([slices, rows]);
      // The zeroed part leads; the records of every row and slice follow.
      expect(sampleScratchBytes(64, vocab)).toBeGreaterThan(sampleScratchZeroBytes(64) + 64 * slices * 8 * SAMPLE_POOLED_TOP_K);
    }
  });

  it('allocates the scratch at construction when given the vocabulary, not at the first sampled call', () => {
    const gpu = new CpuBackend();
    const allocs: number[] = [];
    const alloc = gpu.alloc.bind(gpu);
    gpu.alloc = (bytes: number) => (allocs.push(bytes), alloc(bytes));
    const vocab = 151_936;
    const sampler = new DeviceSampler(gpu, 8, { vocab });
    expect(allocs).toContain(sampleScratchBytes(8, vocab));
    const before = allocs.length;
    const dev = gpu.alloc(4 * vocab);
    gpu.upload(dev, new SeededRandom(3).normals(vocab, 2));
    sampler.sample(dev, [{ temperature: 0.7, topK: 20, topP: 0.8, minP: 0, uniform: 0.5 }], vocab, gpu.defaultStream);
    expect(allocs.length).toBe(before + 1); // the logits only
    sampler.dispose();
    gpu.dispose();
  });
});
