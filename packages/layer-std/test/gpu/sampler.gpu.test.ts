// The device sampler on CUDA (std.argmax, std.sample, std.logprobs) against the host sampler of @metrale/core and
// the CPU twin, at the Qwen3 vocabulary (151 936). Greedy: identical tokens, ties included.
// Sampled with a seed: the same draws give the same tokens as the CPU twin (the kernel's fixed-point sums may move
// a token only when a draw lands within ~1e-16 of a boundary, so a mismatch rate is reported and
// bounded, not assumed zero); every sampled token lies in the support the host filters keep; and
// over many draws the token frequencies follow the filtered distribution (total variation).
// Without a GPU the suite skips and says why.
import { CpuBackend } from '@metrale/cpu-backend';
import { ARGMAX_ROW, SeededRandom, fromBf16, positionLogprobs, sampleLogitsRow, toBf16, type GpuBackend, type SamplingParams } from '@metrale/core';
import { DeviceSampler, filteredProbs } from '@metrale/layer-std';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

const cuda = await cudaAvailable();
if (!cuda.available) console.warn(`[layer-std gpu] sampler tests skipped: ${cuda.reason}`);

const V = 151_936;
const ROWS = 8;
let gpu: GpuBackend;
const lines: string[] = [];

describe.skipIf(!cuda.available)('DeviceSampler on CUDA picks the tokens the host sampler picks', () => {
  const logits = new SeededRandom(3).normals(ROWS * V, 3);
  // Row 1: the maximum twice (greedy takes the lower index); row 2: a plateau at the top.
  logits[V + 9000] = 20;
  logits[V + 400] = 20;
  for (let i = 0; i < 64; i++) logits[2 * V + 1000 + 7 * i] = 12;
  let dev: bigint;
  let sampler: DeviceSampler;
  let cpu: CpuBackend;
  let cpuDev: bigint;
  let cpuSampler: DeviceSampler;

  beforeAll(() => {
    ensureFatbins();
    gpu = cuda.create!();
    sampler = new DeviceSampler(gpu, ROWS);
    dev = gpu.alloc(4 * ROWS * V);
    gpu.upload(dev, logits);
    cpu = new CpuBackend();
    cpuSampler = new DeviceSampler(cpu, ROWS);
    cpuDev = cpu.alloc(4 * ROWS * V);
    cpu.upload(cpuDev, logits);
  });
  afterAll(() => {
    sampler?.dispose();
    gpu?.dispose();
    cpuSampler?.dispose();
    cpu?.dispose();
    console.log(`[layer-std gpu] sampler:\n  ${lines.join('\n  ')}`);
  });

  it('greedy: identical tokens (ties to the lower index)', () => {
    const got = sampler.pick(dev, ROWS, V, undefined, gpu.defaultStream);
    expect(got).toEqual(cpuSampler.pick(cpuDev, ROWS, V, undefined, cpu.defaultStream));
    const want = Array.from({ length: ROWS }, (_, r) => sampleLogitsRow(logits, V, r, undefined, new SeededRandom(0)));
    expect(Array.from(got)).toEqual(want);
    expect(got[1]).toBe(400);
    lines.push(`greedy: ${ROWS} rows identical`);
  });

  it('greedy ids enqueued (argmaxAsync): two calls in flight, each read after the next is launched, equal argmax', () => {
    const want = sampler.argmax(dev, ROWS, V, gpu.defaultStream);
    const second = gpu.alloc(4 * 3 * V);
    gpu.copyDeviceAsync(second, dev + BigInt(4 * 5 * V), 4 * 3 * V, gpu.defaultStream);
    const a = sampler.argmaxAsync(dev, ROWS, V, gpu.defaultStream);
    // The next call's input copied from this call's ids on the device, in stream order, as a decode step takes them.
    const ids = gpu.alloc(4 * ROWS);
    gpu.copyDeviceAsync(ids, a.device, 4 * ROWS, gpu.defaultStream);
    const b = sampler.argmaxAsync(second, 3, V, gpu.defaultStream);
    expect(a.read()).toEqual(want);
    expect(b.read()).toEqual(want.slice(5));
    expect(new Int32Array(gpu.download(ids, 4 * ROWS).buffer)).toEqual(want);
    gpu.free(ids);
    gpu.free(second);
    lines.push(`greedy enqueued: two calls in flight, ids equal argmax's`);
  });

  const cases: [string, SamplingParams][] = [
    ['temperature 0.7', { temperature: 0.7 }],
    ['top-k 5', { temperature: 1, topK: 5 }],
    ['top-k 50 (plateau ties kept)', { temperature: 0.5, topK: 50 }],
    ['top-p 0.8', { temperature: 1.3, topP: 0.8 }],
    ['min-p 0.1', { temperature: 0.9, minP: 0.1 }],
    ['all filters', { temperature: 1.1, topK: 40, topP: 0.9, minP: 0.02 }],
    // Row 2's plateau holds the 5th largest: its slice's pool leaves out equal logits, so top-p comes from the digit passes.
    ['top-k 5 in a plateau', { temperature: 0.5, topK: 5 }],
    ['top-k 200, top-p 0.9', { temperature: 0.8, topK: 200, topP: 0.9 }],
    ['top-k 600 (past the pools: the top-k digit passes), top-p 0.9', { temperature: 0.8, topK: 600, topP: 0.9 }],
  ];
  for (const [name, params] of cases) {
    it(`${name}: same tokens for the same seeds as the CPU twin, inside the host's support`, () => {
      const rounds = 8;
      let same = 0;
      let sameHost = 0;
      const supports = Array.from({ length: ROWS }, (_, r) => filteredProbs(logits.subarray(r * V, (r + 1) * V), params.temperature!, params.topK ?? 0, params.topP ?? 1, params.minP ?? 0));
      for (let round = 0; round < rounds; round++) {
        const seeds = () => Array.from({ length: ROWS }, (_, r) => new SeededRandom(1000 * round + r));
        const got = sampler.pick(dev, ROWS, V, params, gpu.defaultStream, seeds());
        const want = cpuSampler.pick(cpuDev, ROWS, V, params, cpu.defaultStream, seeds());
        const host = seeds();
        const hostWant = Array.from({ length: ROWS }, (_, r) => sampleLogitsRow(logits, V, r, params, host[r]!));
        got.forEach((t, r) => {
          if (t === want[r]) same++;
          if (t === hostWant[r]) sameHost++;
          expect(supports[r]![t]!, `row ${r}: token ${t} is outside the filtered support`).toBeGreaterThan(0);
        });
      }
      const n = rounds * ROWS;
      lines.push(`${name.padEnd(30)} ${same}/${n} identical to the CPU twin, ${sameHost}/${n} to core's host sampler`);
      expect(same / n).toBeGreaterThanOrEqual(0.99);
      // The draw reaches the kernel as the host's f64: only the fixed-point sums can move a token.
      expect(sameHost / n).toBeGreaterThanOrEqual(0.99);
    });
  }

  it('sample: each row by its own parameters in one launch (greedy rows among sampled ones), as the CPU twin, greedy rows as argmax', () => {
    const mixed: (SamplingParams | undefined)[] = [undefined, { temperature: 0.7 }, { temperature: 1, topK: 5 }, undefined, { temperature: 1.3, topP: 0.8 }, { temperature: 0.9, minP: 0.1 }, { temperature: 0.5, topK: 50 }, undefined];
    const rowsOf = (round: number) => mixed.map((p, r) => {
      const u = new SeededRandom(3000 * round + r).float();
      return p ? { temperature: p.temperature!, topK: p.topK ?? 0, topP: p.topP ?? 1, minP: p.minP ?? 0, uniform: u } : { temperature: 0, topK: 0, topP: 1, minP: 0, uniform: 0 };
    });
    const greedy = sampler.argmax(dev, ROWS, V, gpu.defaultStream);
    let same = 0;
    const rounds = 8;
    for (let round = 0; round < rounds; round++) {
      const got = sampler.sample(dev, rowsOf(round), V, gpu.defaultStream).tokens;
      const want = cpuSampler.sample(cpuDev, rowsOf(round), V, cpu.defaultStream).tokens;
      got.forEach((t, r) => {
        if (t === want[r]) same++;
        if (!mixed[r]) expect(t, `row ${r} (greedy)`).toBe(greedy[r]);
        else expect(filteredProbs(logits.subarray(r * V, (r + 1) * V), mixed[r]!.temperature!, mixed[r]!.topK ?? 0, mixed[r]!.topP ?? 1, mixed[r]!.minP ?? 0)[t]!).toBeGreaterThan(0);
      });
    }
    lines.push(`per-row parameters, one launch: ${same}/${rounds * ROWS} identical to the CPU twin, greedy rows equal argmax`);
    expect(same / (rounds * ROWS)).toBeGreaterThanOrEqual(0.99);
  });

  it('logits rounded to bf16 (ties at the top-k cut) and peaked ones (most p round to 0): the CPU twin\'s tokens', () => {
    const rounded = fromBf16(toBf16(logits.subarray(0, ROWS * V)));
    for (let i = 4 * V; i < ROWS * V; i++) rounded[i] = 100 * logits[i]!; // rows 4..7 peaked instead (σ 300: the k-th largest p rounds to 0)
    const a = gpu.alloc(4 * ROWS * V);
    const b = cpu.alloc(4 * ROWS * V);
    gpu.upload(a, rounded);
    cpu.upload(b, rounded);
    let same = 0;
    const rounds = 4;
    for (const params of [{ temperature: 0.7, topK: 20, topP: 0.8 }, { temperature: 1, topK: 50 }]) {
      for (let round = 0; round < rounds; round++) {
        const seeds = () => Array.from({ length: ROWS }, (_, r) => new SeededRandom(7000 * round + r));
        const got = sampler.pick(a, ROWS, V, params, gpu.defaultStream, seeds());
        const want = cpuSampler.pick(b, ROWS, V, params, cpu.defaultStream, seeds());
        got.forEach((t, r) => (t === want[r] ? same++ : undefined));
      }
    }
    gpu.free(a);
    cpu.free(b);
    lines.push(`bf16-rounded and peaked rows: ${same}/${2 * rounds * ROWS} identical to the CPU twin`);
    expect(same / (2 * rounds * ROWS)).toBeGreaterThanOrEqual(0.99);
  });

  it('a row draws the same token alone as among other rows (its slices and sums do not depend on the batch)', () => {
    const mixed: SamplingParams[] = [{ temperature: 0.7 }, { temperature: 1, topK: 20, topP: 0.8 }, { temperature: 1.3, topP: 0.9 }, { temperature: 0.9, minP: 0.1 }];
    const rows = Array.from({ length: ROWS }, (_, r) => {
      const p = mixed[r % mixed.length]!;
      return { temperature: p.temperature!, topK: p.topK ?? 0, topP: p.topP ?? 1, minP: p.minP ?? 0, uniform: new SeededRandom(4000 + r).float(), logprobs: 3 };
    });
    const batched = sampler.sample(dev, rows, V, gpu.defaultStream);
    rows.forEach((row, r) => {
      const alone = sampler.sample(dev + BigInt(4 * r * V), [row], V, gpu.defaultStream);
      expect(alone.tokens[0], `row ${r}`).toBe(batched.tokens[r]);
      expect(alone.logprobs[0], `row ${r}`).toEqual(batched.logprobs[r]);
    });
    lines.push(`batch invariance: ${ROWS} rows alone give the tokens and logprobs they give batched`);
  });

  it('logprobs: each asking row\'s token, rank and top tokens exactly as core\'s positionLogprobs, its logprobs within 1e-9', () => {
    // Rows 1 and 2 hold ties at the top (a doubled maximum, a plateau of 64 equal logits wider than 20).
    const u = new SeededRandom(12);
    const asked = [20, 5, 20, 0, undefined, 1, 3, 20];
    const picked = asked.map((n, r) => {
      const row = r % 2 === 0 ? ARGMAX_ROW : { temperature: 0.8, topK: 0, topP: 0.95, minP: 0, uniform: u.float() };
      return n === undefined ? row : { ...row, logprobs: n };
    });
    const got = sampler.sample(dev, picked, V, gpu.defaultStream);
    let worst = 0;
    got.tokens.forEach((token, r) => {
      if (asked[r] === undefined) return expect(got.logprobs[r]).toBeUndefined();
      const want = positionLogprobs(logits, V, r, token, asked[r]!);
      const have = got.logprobs[r]!;
      expect({ token: have.token, rank: have.rank, top: have.top.map((t) => t.token) }, `row ${r}`).toEqual({ token, rank: want.rank, top: want.top.map((t) => t.token) });
      for (const [a, b] of [[have.logprob, want.logprob], ...have.top.map((t, j) => [t.logprob, want.top[j]!.logprob])] as [number, number][]) worst = Math.max(worst, Math.abs(a - b));
    });
    // A flat row with a few above it: the top tokens past those are the lowest ids of the flat value,
    // gathered across every thread's share of the row.
    const flat = new Float32Array(V).fill(0.25);
    for (const i of [150_000, 77_777, 5]) flat[i] = 1;
    flat[120_000] = -0;
    const flatDev = gpu.alloc(4 * V);
    gpu.upload(flatDev, flat);
    const one = sampler.sample(flatDev, [{ ...ARGMAX_ROW, logprobs: 20 }], V, gpu.defaultStream);
    gpu.free(flatDev);
    const wantFlat = positionLogprobs(flat, V, 0, 5, 20);
    expect(one.logprobs[0]!.top.map((t) => t.token)).toEqual([5, 77_777, 150_000, 0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]);
    expect(one.logprobs[0]!.top.map((t) => t.token)).toEqual(wantFlat.top.map((t) => t.token));
    expect(one.logprobs[0]!.rank).toBe(3);
    lines.push(`logprobs: ${asked.filter((n) => n !== undefined).length} rows' ranks and top tokens identical, largest logprob difference ${worst.toExponential(2)}; a flat row's ties to the lowest ids`);
    expect(worst).toBeLessThan(1e-9);
  });

  it('token frequencies over 4 096 draws follow the filtered distribution (top-p 0.95, temperature 2, 64 tokens)', () => {
    const v = 64;
    const row = new SeededRandom(8).normals(v, 1.5);
    const p = filteredProbs(row, 2, 0, 0.95, 0);
    const total = p.reduce((a, b) => a + b, 0);
    const small = gpu.alloc(4 * ROWS * v);
    gpu.upload(small, new Float32Array(ROWS * v).map((_, i) => row[i % v]!));
    const counts = new Float64Array(v);
    const draws = 4096;
    const rnd = Array.from({ length: ROWS }, (_, r) => new SeededRandom(77 + r));
    for (let i = 0; i < draws / ROWS; i++) for (const t of sampler.pick(small, ROWS, v, { temperature: 2, topP: 0.95 }, gpu.defaultStream, rnd)) counts[t]!++;
    gpu.free(small);
    let tv = 0;
    for (let t = 0; t < v; t++) tv += Math.abs(counts[t]! / draws - p[t]! / total);
    tv /= 2;
    lines.push(`frequencies vs filtered probabilities: total variation ${tv.toFixed(4)} over ${draws} draws`);
    expect(counts.every((c, t) => c === 0 || p[t]! > 0)).toBe(true);
    expect(tv).toBeLessThan(0.06);
  });
});
