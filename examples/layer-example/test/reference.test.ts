import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, MemoryWeightSource, ReplayRoomError, SeededRandom, StepDriver, WeightsError, tensorOf } from '@metrale/core';
import { relativeError } from '@metrale/core/testing';
import plugin, { SlidingWindowLayer } from '@metrale/layer-example';
import { describe, expect, it } from 'vitest';
import { exampleSetup } from './example-weights.js';

/** Sliding-window attention over a whole history, in float64, written independently of the kernels. */
function reference(history: Float32Array[], gain: Float32Array, window: number): Float32Array[] {
  const d = gain.length;
  return history.map((q, t) => {
    const keys = history.slice(Math.max(0, t - window + 1), t + 1);
    const scores = keys.map((k) => k.reduce((s, x, i) => s + x * q[i]!, 0) / Math.sqrt(d));
    const max = Math.max(...scores);
    const w = scores.map((s) => Math.exp(s - max));
    const z = w.reduce((a, b) => a + b, 0);
    return Float32Array.from({ length: d }, (_, i) => (gain[i]! * keys.reduce((acc, k, j) => acc + w[j]! * k[i]!, 0)) / z);
  });
}

const limits = { maxSeqs: 2, maxSeqLen: 32, maxBatch: 2, maxK: 3, maxRows: 32 };

describe('sliding-window layer against a float64 reference', () => {
  it('matches over prefill, decodes and a partly accepted verify, with graphs', () => {
    const { config, weights, gain } = exampleSetup(3, 16, 5);
    const gpu = new CpuBackend();
    const layer = plugin.create({ gpu, layerType: 'sliding-window', config, layerIndex: 0, weights, limits });
    const driver = new StepDriver({ gpu, layers: [layer], limits });
    const random = new SeededRandom(11);
    const rows = (n: number) => Array.from({ length: n }, () => random.normals(16));
    const pack = (r: Float32Array[]) => Float32Array.from(r.flatMap((x) => [...x]));
    const [a, b] = [driver.open(), driver.open()];
    const hist: [Float32Array[], Float32Array[]] = [[], []];
    const check = (out: Float32Array, expected: Float32Array[]) => expect(relativeError(out, pack(expected))).toBeLessThan(1e-5);

    const pa = rows(6), pb = rows(2);
    let r = driver.prefill({ seqs: [a, b], lengths: [6, 2], input: pack([...pa, ...pb]) });
    hist[0].push(...pa);
    hist[1].push(...pb);
    check(driver.readOutputF32(r), [...reference(hist[0], gain, 5), ...reference(hist[1], gain, 5)]);

    for (let step = 0; step < 4; step++) {
      const x = rows(2);
      r = driver.decode({ seqs: [a, b], input: pack(x) });
      hist[0].push(x[0]!);
      hist[1].push(x[1]!);
      check(driver.readOutputF32(r), [reference(hist[0], gain, 5).at(-1)!, reference(hist[1], gain, 5).at(-1)!]);
    }
    expect(r.path).toBe('replay');

    const v = rows(6);
    r = driver.verify({ seqs: [a, b], k: 3, input: pack(v) });
    const out = driver.readOutputF32(r);
    check(out.subarray(0, 48), reference([...hist[0], ...v.slice(0, 3)], gain, 5).slice(-3));
    driver.accept([1, 3]);
    hist[0].push(v[0]!);
    hist[1].push(...v.slice(3));
    const x = rows(2);
    r = driver.decode({ seqs: [a, b], input: pack(x) });
    hist[0].push(x[0]!);
    hist[1].push(x[1]!);
    check(driver.readOutputF32(r), [reference(hist[0], gain, 5).at(-1)!, reference(hist[1], gain, 5).at(-1)!]);
    expect(layer.inspectState!(driver.stateOf(a, 0))).toEqual({ length: hist[0].length });
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  });

  it('refuses an eager step past the cache before launching, leaving host state as it was', () => {
    const { config, weights } = exampleSetup();
    const gpu = new CpuBackend();
    const layer = plugin.create({ gpu, layerType: 'sliding-window', config, layerIndex: 0, weights, limits });
    const driver = new StepDriver({ gpu, layers: [layer], limits, graphs: false });
    const s = driver.open();
    driver.prefill({ seqs: [s], lengths: [31], input: new SeededRandom(2).normals(31 * 16) });
    const sw = layer as SlidingWindowLayer;
    expect(() => driver.verify({ seqs: [s], k: 2, input: new SeededRandom(3).normals(32) })).toThrow(ReplayRoomError);
    expect(sw.occupancy()).toBe(31);
    expect(driver.stateOf(s, 0)).toMatchObject({ length: 31 });
  });

  it('names the bad field or tensor of a bad config or weights', () => {
    const gpu = new CpuBackend();
    const { config, weights } = exampleSetup();
    const create = (c: Record<string, unknown>, w = weights) => plugin.create({ gpu, layerType: 'sliding-window', config: c, layerIndex: 0, weights: w, limits });
    expect(() => create({ ...config, sliding_window: 0 })).toThrow(/config.sliding_window must be a positive integer/);
    expect(() => create({ hidden_size: 'x', sliding_window: 2 })).toThrow(InvalidArgumentError);
    expect(() => create(config, new MemoryWeightSource('w.safetensors', []))).toThrow(/w.safetensors: missing tensor 'gain'/);
    expect(() => create(config, new MemoryWeightSource('w.safetensors', [tensorOf('gain', new Float32Array(3), [3])]))).toThrow(WeightsError);
  });
});
