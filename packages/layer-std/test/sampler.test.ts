import { CpuBackend } from '@metrale/cpu-backend';
import { SeededRandom, sampleLogitsRow, type SamplingParams } from '@metrale/core';
import { DeviceSampler } from '@metrale/layer-std';
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
