import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import { EngineLoop, InvalidArgumentError, NgramProposer, SeededRandom, StepDriver, generateAll, type GenerateRequest, type LayerLimits } from '../src/index.js';
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

  it('sampling with a seed is reproducible and, with rejection sampling, speculation still runs', () => {
    withRunner((make) => {
      const req: GenerateRequest = { prompt: [1, 8, 11], maxTokens: 12, sampling: { temperature: 1.5, topK: 6, topP: 0.95, seed: 5 } };
      expect(make().generate([req]).outputs[0]!.tokens).toEqual(make().generate([req]).outputs[0]!.tokens);
      const a = make(3).generate([req]).outputs[0]!.tokens;
      expect(make(3).generate([req]).outputs[0]!.tokens).toEqual(a);
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
        out.logprobs!.forEach((list, i) => {
          expect(list).toHaveLength(3);
          expect(list[0]!.token).toBe(out.tokens[i]);
          expect(list[0]!.logprob).toBeLessThanOrEqual(0);
          expect(list[1]!.logprob).toBeLessThanOrEqual(list[0]!.logprob);
        });
      }
    });
  });
});
