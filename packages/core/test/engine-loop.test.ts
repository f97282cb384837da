import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import {
  ARGMAX_ROW, EngineLoop, InvalidArgumentError, NgramProposer, SeededRandom, StepDriver, TokenHistory, adjustLogits, argmaxRow, generateAll, pickAt, positionLogprobs,
  probabilityFilter, sampleLogitsRow,
  type GenerateRequest, type LayerLimits, type SampledRow, type SampledTokens, type SamplingParams,
} from '../src/index.js';
import { BigramLayer } from './support/bigram-layer.js';

const V = 16;

/** Logits that make token t → (t·5 + 3) mod 16 the clear favourite, with random runners-up. */
function table(seed = 1): Float32Array {
  const rnd = new SeededRandom(seed);
  const t = rnd.normals(V * V);
  for (let i = 0; i < V; i++) t[i * V + ((i * 5 + 3) % V)]! += 6;
  return t;
}

/** The engine loop as `metrale generate` runs it: `generate(requests)` to completion. */
interface Runner {
  generate(requests: readonly GenerateRequest[]): ReturnType<typeof generateAll>;
}

function withRunner<T>(fn: (make: (spec?: number) => Runner) => T, limits: LayerLimits = { maxSeqs: 2, maxSeqLen: 40, maxBatch: 2, maxK: 5, maxRows: 16 }): T {
  const gpu = new CpuBackend();
  const layer = new BigramLayer(gpu, V, table());
  const driver = new StepDriver({ gpu, layers: [layer], limits });
  try {
    return fn((spec) => {
      const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: limits.maxRows, ...(spec ? { speculation: { proposer: new NgramProposer({ k: spec }), k: spec } } : {}) });
      return { generate: (requests) => generateAll(loop, requests, spec) };
    });
  } finally {
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  }
}

const follow = (t: number) => (t * 5 + 3) % V;

describe('the engine loop with a device token picker', () => {
  it('plain greedy decode steps take their tokens from the picker; logprobs, adjustments and sampling read the logits', () => {
    const gpu = new CpuBackend();
    const layer = new BigramLayer(gpu, V, table(4));
    const limits: LayerLimits = { maxSeqs: 3, maxSeqLen: 40, maxBatch: 3, maxK: 1, maxRows: 16 };
    const driver = new StepDriver({ gpu, layers: [layer], limits });
    const specDriver = new StepDriver({ gpu, layers: [layer], limits: { ...limits, maxK: 4, maxRows: 16 } });
    const calls: number[] = [];
    // The argmax of the device rows, read back here: what a device kernel would give.
    const picker = {
      maxRows: 3,
      argmax(logits: bigint, rows: number, vocab: number) {
        calls.push(rows);
        const l = new Float32Array(gpu.download(logits, 4 * rows * vocab).buffer);
        return Int32Array.from({ length: rows }, (_, r) => l.subarray(r * vocab, (r + 1) * vocab).reduce((b, v, i, a) => (v > a[b]! ? i : b), 0));
      },
    };
    try {
      const requests: GenerateRequest[] = [{ prompt: [1, 2], maxTokens: 6 }, { prompt: [7], maxTokens: 5 }, { prompt: [4, 4, 4], maxTokens: 4 }];
      const plain = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16 }), requests).outputs.map((o) => o.tokens);
      const picked = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker }), requests).outputs.map((o) => o.tokens);
      expect(picked).toEqual(plain);
      expect(calls.length).toBeGreaterThan(0);
      // Verify steps (n-gram drafts, k = 3) accept from the picked ids: 3 sequences × 4 rows at most.
      const long: GenerateRequest[] = [{ prompt: [1, 2], maxTokens: 24 }, { prompt: [7], maxTokens: 20 }, { prompt: [4, 4, 4], maxTokens: 18 }];
      const want = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16 }), long).outputs.map((o) => o.tokens);
      const spec = (picker?: typeof pickerRef) => generateAll(new EngineLoop({
        driver: specDriver, vocabSize: V, prefillChunk: 16, speculation: { proposer: new NgramProposer({ k: 3, minN: 1 }), k: 3, adaptive: false }, ...(picker ? { picker } : {}),
      }), long, 3);
      const pickerRef = { maxRows: 12, argmax: picker.argmax };
      calls.length = 0;
      const specPicked = spec(pickerRef);
      expect(specPicked.outputs.map((o) => o.tokens)).toEqual(want);
      expect(spec().outputs.map((o) => o.tokens)).toEqual(want);
      expect(specPicked.stats.steps.verify).toBeGreaterThan(0);
      expect(calls.some((rows) => rows > 3)).toBe(true);
      for (const other of [{ logprobs: 2 }, { sampling: { repetitionPenalty: 1.3 } }, { sampling: { temperature: 0.8, seed: 5 } }] as const) {
        calls.length = 0;
        const want = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16 }), [{ ...requests[0]!, ...other }]).outputs[0]!.tokens;
        const got = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker }), [{ ...requests[0]!, ...other }]).outputs[0]!.tokens;
        expect(got, JSON.stringify(other)).toEqual(want);
        expect(calls, JSON.stringify(other)).toEqual([]);
      }
    } finally {
      driver.dispose();
      specDriver.dispose();
      layer.dispose();
      gpu.dispose();
    }
  });
});

describe('the engine loop with a picker that samples', () => {
  it('greedy and sampled sequences of a decode step take their tokens and logprobs from sample, each by its own row; penalties read their rows', () => {
    const gpu = new CpuBackend();
    const layer = new BigramLayer(gpu, V, table(6));
    const limits: LayerLimits = { maxSeqs: 6, maxSeqLen: 40, maxBatch: 6, maxK: 1, maxRows: 16 };
    const driver = new StepDriver({ gpu, layers: [layer], limits });
    const calls: SampledRow[][] = [];
    // What a device kernel gives: each row's token (and logprobs) from its logits and its SampledRow alone.
    const sample = (logits: bigint, rows: readonly SampledRow[], vocab: number): SampledTokens => {
      calls.push([...rows]);
      const l = new Float32Array(gpu.download(logits, 4 * rows.length * vocab).buffer);
      const tokens = Int32Array.from(rows, (row, r) => {
        const params: SamplingParams | undefined = row.temperature > 0 ? { temperature: row.temperature, topK: row.topK, topP: row.topP, minP: row.minP } : undefined;
        return sampleLogitsRow(l, vocab, r, params, { float: () => row.uniform } as unknown as SeededRandom);
      });
      return { tokens, logprobs: rows.map((row, r) => (row.logprobs === undefined ? undefined : positionLogprobs(l, vocab, r, tokens[r]!, row.logprobs))) };
    };
    const argmaxCalls: number[] = [];
    // Steps whose every live sequence is plain greedy (here: the first request, once the others ended) still take argmax.
    const argmax = (logits: bigint, rows: number, vocab: number): Int32Array => {
      argmaxCalls.push(rows);
      return sample(logits, Array.from({ length: rows }, () => ARGMAX_ROW), vocab).tokens;
    };
    const picker = { maxRows: 6, argmax, sample };
    try {
      const requests: GenerateRequest[] = [
        { prompt: [1, 2], maxTokens: 7 },
        { prompt: [7], maxTokens: 6, sampling: { temperature: 0.8, seed: 5 } },
        { prompt: [4, 4, 4], maxTokens: 6, sampling: { temperature: 1.2, topK: 4, topP: 0.9, minP: 0.05, seed: 11 } },
        { prompt: [3], maxTokens: 5, sampling: { temperature: 0.9, seed: 2 }, logprobs: 2 },
        { prompt: [9, 1], maxTokens: 5, sampling: { temperature: 1, seed: 3, repetitionPenalty: 1.3 } },
        { prompt: [5], maxTokens: 4, logprobs: 1 },
      ];
      const host = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16 }), requests).outputs;
      const picked = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker }), requests).outputs;
      // The same draws, in the same order, from each sequence's own stream: the same tokens.
      expect(picked.map((o) => o.tokens)).toEqual(host.map((o) => o.tokens));
      expect(picked[3]!.logprobs).toEqual(host[3]!.logprobs);
      expect(picked[5]!.logprobs).toEqual(host[5]!.logprobs);
      expect(picked[5]!.logprobs).toHaveLength(4);
      expect(calls.length).toBeGreaterThan(0);
      expect(argmaxCalls.every((rows) => rows === 1)).toBe(true);
      // A prompt's first token: a call of its one row (the penalized one reads its row).
      expect(calls.slice(0, 5).map((c) => c.length)).toEqual([1, 1, 1, 1, 1]);
      expect(calls.slice(0, 5).map((c) => c[0]!.logprobs)).toEqual([undefined, undefined, undefined, 2, 1]);
      // A decode step: every live row in one call; the host-sampled one (penalties) as the cheapest
      // pick, with no draw taken from its stream.
      const first = calls.find((c) => c.length === 6)!;
      expect(first.length).toBe(6);
      expect(first[0]).toEqual({ temperature: 0, topK: 0, topP: 1, minP: 0, uniform: 0 });
      expect(first[2]).toMatchObject({ temperature: 1.2, topK: 4, topP: 0.9, minP: 0.05 });
      expect(first[3]).toMatchObject({ temperature: 0.9, logprobs: 2 });
      expect(first[4]).toEqual(ARGMAX_ROW);
      expect(first[5]).toEqual({ ...ARGMAX_ROW, logprobs: 1 });
      // A picker without sample leaves such steps to the host, as before.
      const argmaxOnly = generateAll(new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, picker: { maxRows: 5, argmax: picker.argmax } }), requests.slice(1, 3)).outputs;
      expect(argmaxOnly.map((o) => o.tokens)).toEqual(host.slice(1, 3).map((o) => o.tokens));
    } finally {
      driver.dispose();
      layer.dispose();
      gpu.dispose();
    }
  });
});

describe('the engine loop with a picker that samples, speculating', () => {
  it('a verify step picks every row on the device as a decode would draw it: a seeded request emits the tokens it emits without speculation, on either path, alone or among others', () => {
    const gpu = new CpuBackend();
    // Favourites weak enough that sampled drafts are both accepted and rejected.
    const t = new SeededRandom(31).normals(V * V);
    for (let i = 0; i < V; i++) t[i * V + follow(i)]! += 2.5;
    const layer = new BigramLayer(gpu, V, t);
    const limits: LayerLimits = { maxSeqs: 4, maxSeqLen: 64, maxBatch: 4, maxK: 4, maxRows: 16 };
    const driver = new StepDriver({ gpu, layers: [layer], limits });
    const calls: SampledRow[][] = [];
    // What a device kernel gives: each row as the host sampler picks it with the row's draw.
    const sample = (logits: bigint, rows: readonly SampledRow[], vocab: number): SampledTokens => {
      calls.push([...rows]);
      const l = new Float32Array(gpu.download(logits, 4 * rows.length * vocab).buffer);
      const tokens = Int32Array.from(rows, (row, r) => {
        if (!(row.temperature > 0)) return argmaxRow(l, vocab, r);
        const params: SamplingParams = { temperature: row.temperature, topK: row.topK, topP: row.topP, minP: row.minP };
        return sampleLogitsRow(l, vocab, r, params, { float: () => row.uniform } as unknown as SeededRandom);
      });
      return { tokens, logprobs: rows.map((row, r) => (row.logprobs === undefined ? undefined : positionLogprobs(l, vocab, r, tokens[r]!, row.logprobs))) };
    };
    const picker = { maxRows: 16, argmax: (l: bigint, rows: number, vocab: number) => sample(l, Array.from({ length: rows }, () => ARGMAX_ROW), vocab).tokens, sample };
    const run = (reqs: GenerateRequest[], withPicker: boolean, speculate = true) => generateAll(new EngineLoop({
      driver, vocabSize: V, prefillChunk: 16, ...(speculate ? { speculation: { proposer: new NgramProposer({ k: 3, minN: 1 }), k: 3, adaptive: false } } : {}),
      ...(withPicker ? { picker } : {}),
    }), reqs, 3);
    const requests: GenerateRequest[] = [
      { prompt: [1, 8, 11, 10, 5, 12, 1, 8, 11], maxTokens: 18, sampling: { temperature: 0.9, topP: 0.9, seed: 4 }, logprobs: 2 },
      { prompt: [2, 13, 4, 2, 13, 4], maxTokens: 16, sampling: { temperature: 1.2, topK: 4, minP: 0.05, seed: 9 } },
      { prompt: [3, 15, 14, 3, 15], maxTokens: 12 },
    ];
    try {
      const plain = run(requests, false, false);
      const host = run(requests, false);
      calls.length = 0;
      const device = run(requests, true);
      for (const r of [host, device]) {
        expect(r.outputs.map((o) => o.tokens)).toEqual(plain.outputs.map((o) => o.tokens));
        expect(r.outputs[0]!.logprobs!.map((p) => [p.token, p.rank, p.top.map((x) => x.token)])).toEqual(plain.outputs[0]!.logprobs!.map((p) => [p.token, p.rank, p.top.map((x) => x.token)]));
      }
      // The verify steps went to the device (k rows a sequence, sampled ones with draws); some drafts
      // were accepted, some not, alike on both paths.
      expect(calls.some((c) => c.length > 3 && c.some((r) => r.temperature > 0) && c.some((r) => r.logprobs !== undefined))).toBe(true);
      const s = device.stats.speculation!;
      expect(s.accepted).toBeGreaterThan(0);
      expect(s.accepted).toBeLessThan(s.drafted);
      expect(s).toEqual(host.stats.speculation);
      // A seeded request's tokens do not depend on the others in its steps, on either path.
      for (const withPicker of [false, true]) {
        for (const i of [0, 1]) expect(run([requests[i]!], withPicker).outputs[0]!.tokens, `request ${i} alone, picker ${withPicker}`).toEqual(plain.outputs[i]!.tokens);
      }
    } finally {
      driver.dispose();
      layer.dispose();
      gpu.dispose();
    }
  });
});

describe('the engine loop, run to completion (generateAll)', () => {
  it('greedy decoding follows the model, for more requests than slots (the third waits for one)', () => {
    withRunner((make) => {
      const reqs: GenerateRequest[] = [{ prompt: [1, 2], maxTokens: 6 }, { prompt: [7], maxTokens: 3 }, { prompt: [4, 4, 4], maxTokens: 5 }];
      const { outputs, stats } = make().generate(reqs);
      outputs.forEach((o, i) => {
        let t = reqs[i]!.prompt[reqs[i]!.prompt.length - 1]!;
        const want = Array.from({ length: reqs[i]!.maxTokens }, () => (t = follow(t)));
        expect(o.tokens).toEqual(want);
        expect(o.finishReason).toBe('length');
      });
      expect(stats.generatedTokens).toBe(14);
      // Two slots: the first two prompts prefill together, the third once a slot frees up.
      expect(stats.steps.prefill).toBe(2);
    });
  });

  it('greedy output is token for token the same with n-gram speculation, and drafts are accepted', () => {
    withRunner((make) => {
      const reqs: GenerateRequest[] = [{ prompt: [1, 8, 11, 10, 5, 12], maxTokens: 20 }, { prompt: [2, 13, 4], maxTokens: 17 }];
      const base = make().generate(reqs);
      for (const k of [1, 2, 4]) {
        const sped = make(k).generate(reqs);
        expect(sped.outputs.map((o) => o.tokens)).toEqual(base.outputs.map((o) => o.tokens));
        const s = sped.stats.speculation!;
        expect(s.accepted).toBeGreaterThan(0);
        expect(s.acceptanceRate).toBeGreaterThan(0.5);
        expect(sped.stats.steps.verify + sped.stats.steps.decode).toBeLessThan(base.stats.steps.decode);
      }
    });
  });

  it('stops at a stop token (included); refuses a request longer than a sequence holds, up front', () => {
    withRunner((make) => {
      const out = make(3).generate([{ prompt: [1], maxTokens: 30, stopTokenIds: [follow(follow(1))] }]).outputs[0]!;
      expect(out.tokens).toEqual([follow(1), follow(follow(1))]);
      expect(out.finishReason).toBe('stop');
    });
    withRunner((make) => {
      // 10 rows less one verify's overhang of 3: 7 tokens of prompt + generation at most.
      expect(() => make(3).generate([{ prompt: [1, 2, 3], maxTokens: 5 }])).toThrow(/3 prompt tokens \+ 5 to generate exceed the 7 a sequence holds/);
      expect(make(3).generate([{ prompt: [1, 2, 3], maxTokens: 4 }]).outputs[0]!.finishReason).toBe('length');
    }, { maxSeqs: 1, maxSeqLen: 10, maxBatch: 1, maxK: 4, maxRows: 8 });
  });

  it('collects the prompt logits of every row, across prefill chunks', () => {
    withRunner((make) => {
      const prompt = [3, 9, 1, 0, 15, 2, 7, 7, 8, 4];
      const out = make().generate([{ prompt, maxTokens: 1, promptLogits: true }, { prompt: [5, 6], maxTokens: 1, promptLogits: true }]).outputs;
      const t = table();
      prompt.forEach((tok, p) => {
        for (let j = 0; j < V; j++) expect(out[0]!.promptLogits![p * V + j]).toBeCloseTo(t[tok * V + j]! + 1e-3 * p * (j % 3), 5);
      });
      expect(out[1]!.promptLogits).toHaveLength(2 * V);
    }, { maxSeqs: 2, maxSeqLen: 20, maxBatch: 2, maxK: 1, maxRows: 4 });
  });

  it('sampling with a seed is reproducible, and speculating gives the same tokens', () => {
    withRunner((make) => {
      const req: GenerateRequest = { prompt: [1, 8, 11], maxTokens: 12, sampling: { temperature: 1.5, topK: 6, topP: 0.95, seed: 5 } };
      const plain = make().generate([req]).outputs[0]!.tokens;
      expect(make().generate([req]).outputs[0]!.tokens).toEqual(plain);
      const a = make(3).generate([req]).outputs[0]!.tokens;
      expect(a).toEqual(plain);
      expect(a).toHaveLength(12);
    });
  });

  it('refuses bad requests and speculation wider than the driver verifies', () => {
    withRunner((make) => {
      expect(() => make().generate([{ prompt: [], maxTokens: 1 }])).toThrow(/prompt is empty/);
      expect(() => make().generate([{ prompt: [V], maxTokens: 1 }])).toThrow(/outside the vocabulary/);
      expect(() => make().generate([{ prompt: [1], maxTokens: 1, sampling: { temperature: 1, topP: 2 } }])).toThrow(/topP/);
      expect(() => make(5)).toThrow(InvalidArgumentError);
      expect(() => make().generate([{ prompt: [1], maxTokens: 1, logprobs: 21 }])).toThrow(/logprobs must be an integer in 0\.\.20/);
    });
  });

  it('reports the logprobs of every generated token: the greedy token first, with and without speculation', () => {
    withRunner((make) => {
      const req: GenerateRequest = { prompt: [1, 8, 11, 10, 5, 12], maxTokens: 9, logprobs: 3 };
      for (const spec of [undefined, 2]) {
        const out = make(spec).generate([req]).outputs[0]!;
        expect(out.logprobs).toHaveLength(out.tokens.length);
        out.logprobs!.forEach((entry, i) => {
          expect(entry).toMatchObject({ token: out.tokens[i], rank: 1 });
          expect(entry.top).toHaveLength(3);
          expect(entry.top[0]).toEqual({ token: entry.token, logprob: entry.logprob });
          expect(entry.logprob).toBeLessThanOrEqual(0);
          expect(entry.top[1]!.logprob).toBeLessThanOrEqual(entry.logprob);
        });
      }
      // logprobs 0: each token's own logprob, no top list.
      const own = make().generate([{ ...req, logprobs: 0 }]).outputs[0]!;
      expect(own.logprobs!.map((e) => e.top)).toEqual(own.tokens.map(() => []));
    });
  });

  it("reports the prompt's logprobs (none for its first token), across prefill chunks", () => {
    withRunner((make) => {
      const prompt = [3, 9, 1, 0, 15, 2, 7];
      const out = make().generate([{ prompt, maxTokens: 2, promptLogprobs: 2 }]).outputs[0]!;
      const t = table();
      expect(out.promptLogprobs).toHaveLength(prompt.length);
      expect(out.promptLogprobs![0]).toBeNull();
      for (let p = 1; p < prompt.length; p++) {
        const logits = Float32Array.from({ length: V }, (_, j) => t[prompt[p - 1]! * V + j]! + 1e-3 * (p - 1) * (j % 3));
        expect(out.promptLogprobs![p]!.token).toBe(prompt[p]);
        expect(out.promptLogprobs![p]!.logprob).toBeCloseTo(positionLogprobs(logits, V, 0, prompt[p]!, 2).logprob, 5);
        expect(out.promptLogprobs![p]!.top).toHaveLength(2);
      }
      expect(out.logprobs).toBeUndefined();
    }, { maxSeqs: 1, maxSeqLen: 20, maxBatch: 1, maxK: 1, maxRows: 3 });
  });
});

describe('captureGraphs', () => {
  it('captures every bucket\'s decode graph (and verify graph, speculating) before the first request; requests then replay and answer as without it', () => {
    const gpu = new CpuBackend();
    const layer = new BigramLayer(gpu, V, table());
    const limits: LayerLimits = { maxSeqs: 5, maxSeqLen: 40, maxBatch: 5, maxK: 3, maxRows: 16 };
    const run = (warm: boolean, spec?: number) => {
      const driver = new StepDriver({ gpu, layers: [layer], limits });
      const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: 2, ...(spec ? { speculation: { proposer: new NgramProposer({ k: spec }), k: spec } } : {}) });
      let keys: string[] = [];
      if (warm) {
        loop.captureGraphs();
        expect(loop.idle).toBe(true);
        keys = Object.keys(driver.graphs.describe()).sort();
      }
      const before = Object.keys(driver.graphs.describe()).length;
      const { outputs } = generateAll(loop, [0, 1, 2].map((i) => ({ prompt: [1 + i, 7, 1 + i, 7], maxTokens: 8 })), spec);
      const captured = Object.keys(driver.graphs.describe()).length - before;
      // The loop refuses to warm up with requests in it.
      loop.add({ id: 1, prompt: [1], maxTokens: 2 });
      expect(() => loop.captureGraphs()).toThrow(/captureGraphs runs on an idle loop/);
      driver.dispose();
      return { tokens: outputs.map((o) => o.tokens), captured, keys };
    };
    const buckets = [1, 2, 4, 5];
    const cold = run(false);
    const warm = run(true);
    expect(warm.keys).toEqual(buckets.map((b) => `decode:${b}:1`).sort());
    expect(warm.tokens).toEqual(cold.tokens);
    expect(cold.captured).toBeGreaterThan(0);
    expect(warm.captured).toBe(0);
    const coldSpec = run(false, 2);
    const warmSpec = run(true, 2);
    // Every bucket's verify of k drafts (and narrower ones, where a sequence had fewer tokens left than drafts).
    expect(warmSpec.keys).toEqual(expect.arrayContaining([...buckets.map((b) => `decode:${b}:1`), ...buckets.map((b) => `verify:${b}:3`)]));
    expect(warmSpec.tokens).toEqual(coldSpec.tokens);
    expect(warmSpec.captured).toBeLessThan(coldSpec.captured);
    expect(warmSpec.tokens).toEqual(cold.tokens);
    layer.dispose();
    gpu.dispose();
  });
});

describe('logit adjustments in the engine loop', () => {
  /** Greedy decoding of the bigram table with the adjustments applied by hand, token by token. */
  function expected(prompt: number[], maxTokens: number, p: SamplingParams, stop: number[] = []): number[] {
    const t = table();
    const out: number[] = [];
    let last = prompt[prompt.length - 1]!;
    for (let i = 0; i < maxTokens; i++) {
      const pos = prompt.length - 1 + i;
      const row = Float32Array.from({ length: V }, (_, j) => t[last * V + j]! + 1e-3 * pos * (j % 3));
      const history = new TokenHistory(prompt);
      for (const x of out) history.push(x);
      adjustLogits(row, p, history, stop);
      last = row.indexOf(Math.max(...row));
      out.push(last);
      if (stop.includes(last)) break;
    }
    return out;
  }

  it('penalties and bias change greedy output as computed directly, with and without speculation', () => {
    withRunner((make) => {
      // A prompt that already holds the tokens the model favours next, so the repetition penalty
      // bites; a bias that makes one token win every step, until the output penalties undo it.
      const favour = new Map([[5, 8]]);
      const cases: [number[], number, SamplingParams, SamplingParams][] = [
        [[1, 8, 11, 10, 5, 12, 1, 8], 8, { repetitionPenalty: 8 }, {}],
        [[1, 8], 12, { logitBias: favour, frequencyPenalty: 2 }, { logitBias: favour }],
        [[1, 8], 12, { logitBias: favour, presencePenalty: 2 }, { logitBias: favour }],
        [[1, 8], 8, { logitBias: new Map([[follow(8), -100]]) }, {}],
      ];
      for (const [prompt, maxTokens, p, base] of cases) {
        const plain = make().generate([{ prompt, maxTokens, sampling: base }]).outputs[0]!.tokens;
        const want = expected(prompt, maxTokens, p);
        expect(want).not.toEqual(plain);
        for (const spec of [undefined, 2]) expect(make(spec).generate([{ prompt, maxTokens, sampling: p }]).outputs[0]!.tokens).toEqual(want);
      }
      // A repetition penalty makes the prompt's favourite next token lose its lead.
      expect(expected([1, 8, 11, 10, 5, 12, 1, 8], 1, { repetitionPenalty: 8 })[0]).not.toBe(follow(8));
    });
  });

  it('min tokens holds the stop tokens back until reached', () => {
    withRunner((make) => {
      const stop = [follow(1)];
      const early = make().generate([{ prompt: [1], maxTokens: 6, stopTokenIds: stop }]).outputs[0]!;
      expect(early).toMatchObject({ tokens: stop, finishReason: 'stop' });
      for (const spec of [undefined, 2]) {
        const held = make(spec).generate([{ prompt: [1], maxTokens: 6, stopTokenIds: stop, sampling: { minTokens: 3 } }]).outputs[0]!;
        expect(held.tokens).toEqual(expected([1], 6, { minTokens: 3 }, stop));
        expect(held.tokens.length).toBeGreaterThanOrEqual(3);
        expect(held.tokens.slice(0, 3)).not.toContain(stop[0]);
      }
      expect(() => make().generate([{ prompt: [1], maxTokens: 2, sampling: { minTokens: 3 } }])).toThrow(/minTokens \(3\) exceeds maxTokens \(2\)/);
      expect(() => make().generate([{ prompt: [1], maxTokens: 2, stopTokenIds: [V] }])).toThrow(/stop token 16 is outside the vocabulary/);
      expect(() => make().generate([{ prompt: [1], maxTokens: 2, sampling: { logitBias: new Map([[V + 3, 1]]) } }])).toThrow(/logit bias token 19/);
    });
  });

  it('a sampled request without a seed draws a random one; with a 64-bit seed it repeats', () => {
    withRunner((make) => {
      const req: GenerateRequest = { prompt: [1, 8, 11], maxTokens: 16, sampling: { temperature: 3 } };
      const runs = [0, 1, 2].map(() => make().generate([req]).outputs[0]!.tokens.join(','));
      expect(new Set(runs).size).toBeGreaterThan(1);
      const seeded: GenerateRequest = { ...req, sampling: { temperature: 3, seed: 2n ** 63n - 1n } };
      for (const spec of [undefined, 2]) expect(make(spec).generate([seeded]).outputs[0]!.tokens).toEqual(make(spec).generate([seeded]).outputs[0]!.tokens);
    });
  });
});
