import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import { EngineLoop, SeededRandom, StepDriver, generateAll, type EngineStepReport, type GenerateRequest, type LayerLimits } from '../src/index.js';
import { BigramLayer } from './support/bigram-layer.js';
import { PagedContextLayer } from './support/paged-context-layer.js';

const V = 24;

function table(seed = 3): Float32Array {
  return new SeededRandom(seed).normals(V * V);
}

interface Run {
  readonly outputs: number[][];
  readonly reports: EngineStepReport[];
}

interface Setup {
  readonly pages?: number;
  readonly pageSize?: number;
  readonly maxSeqs?: number;
  readonly prefillChunk?: number;
  readonly recurrent?: boolean;
  readonly prefixCaching?: boolean;
}

/** Runs `requests` (added in order, each after `delays[i]` steps) through a loop over a paged-context model. */
function run(requests: readonly GenerateRequest[], setup: Setup = {}, delays: readonly number[] = []): Run {
  const maxSeqs = setup.maxSeqs ?? 4;
  const limits: LayerLimits = { maxSeqs, maxSeqLen: 96, maxBatch: maxSeqs, maxK: 1, maxRows: 32 };
  const gpu = new CpuBackend();
  const layer = new PagedContextLayer(gpu, V, table(), maxSeqs, setup.recurrent ?? false);
  const driver = new StepDriver({ gpu, layers: [layer], limits, kvCache: { pageSize: setup.pageSize ?? 4, ...(setup.pages ? { pages: setup.pages } : {}) } });
  const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: setup.prefillChunk ?? 8, prefixCaching: setup.prefixCaching ?? true });
  const outputs: number[][] = requests.map(() => []);
  const reports: EngineStepReport[] = [];
  try {
    let step = 0;
    const pending = requests.map((r, id) => ({ r, id, at: delays[id] ?? 0 }));
    while (pending.length > 0 || !loop.idle) {
      for (let i = pending.length - 1; i >= 0; i--) {
        if (pending[i]!.at <= step) {
          loop.add({ ...pending[i]!.r, id: pending[i]!.id });
          pending.splice(i, 1);
        }
      }
      const report = loop.step();
      reports.push(report);
      for (const ev of report.events) {
        outputs[ev.id]!.push(...ev.tokens);
        if (ev.finish === 'error') throw new Error(`request ${ev.id} failed: ${ev.error}`);
      }
      step++;
    }
    return { outputs, reports };
  } finally {
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  }
}

const alone = (requests: readonly GenerateRequest[], setup: Setup = {}) => requests.map((r) => run([r], { ...setup, prefixCaching: false }).outputs[0]!);
const sum = (reports: readonly EngineStepReport[], key: 'preemptions' | 'prefixHits' | 'prefixQueries') => reports.reduce((a, r) => a + r[key], 0);
const prompt = (n: number, seed: number) => Array.from({ length: n }, (_, i) => (i * 7 + seed * 5) % V);

describe('the engine loop over a shared KV page pool', () => {
  it('preempts the youngest sequence when the pool runs out, and every answer equals the request alone', () => {
    const requests: GenerateRequest[] = [0, 1, 2, 3].map((i) => ({ prompt: prompt(10 + 3 * i, i), maxTokens: 30 }));
    const want = alone(requests);
    // 24 pages of 4 rows: each request needs 10 to 12 pages by its end, so four together do not fit.
    const { outputs, reports } = run(requests, { pages: 24 });
    expect(outputs).toEqual(want);
    expect(sum(reports, 'preemptions')).toBeGreaterThan(0);
    // The pool never held more than it has, and it is empty at the end.
    for (const r of reports) expect(r.kvUsage).toBeLessThanOrEqual(1);
    expect(reports.at(-1)!.kvUsage).toBe(0);
  });

  it('a preempted sampled request draws on from where its random stream stood', () => {
    const requests: GenerateRequest[] = [0, 1, 2].map((i) => ({ prompt: prompt(9, i), maxTokens: 28, sampling: { temperature: 1.3, topP: 0.95, seed: 11 + i } }));
    const want = alone(requests);
    const { outputs, reports } = run(requests, { pages: 16 });
    expect(sum(reports, 'preemptions')).toBeGreaterThan(0);
    expect(outputs).toEqual(want);
  });

  it('refuses up front a request that can never fit the pool, naming the sizes', () => {
    const gpu = new CpuBackend();
    const layer = new PagedContextLayer(gpu, V, table(), 2);
    const driver = new StepDriver({ gpu, layers: [layer], limits: { maxSeqs: 2, maxSeqLen: 96, maxBatch: 2, maxK: 1, maxRows: 32 }, kvCache: { pageSize: 4, pages: 5 } });
    const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: 8 });
    expect(() => loop.add({ id: 1, prompt: prompt(12, 0), maxTokens: 9 })).toThrow(/12 prompt tokens \+ 9 to generate need 6 KV-cache pages of 4 tokens, but the cache holds 5 pages \(20 tokens\)/);
    loop.add({ id: 2, prompt: prompt(12, 0), maxTokens: 8 });
    expect(loop.waiting).toBe(1);
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  });

  it('maxPages caps a pool sized from memory (a tensor-parallel leader at its smallest follower), and refuses a bad cap', () => {
    const gpu = new CpuBackend();
    const layer = new PagedContextLayer(gpu, V, table(), 2);
    const limits = { maxSeqs: 2, maxSeqLen: 96, maxBatch: 2, maxK: 1, maxRows: 32 };
    const sized = new StepDriver({ gpu, layers: [layer], limits, kvCache: { pageSize: 4, memory: { bytes: 1 << 20 } } });
    const full = sized.kvInfo.pages;
    sized.dispose();
    expect(full).toBeGreaterThan(7);
    const capped = new StepDriver({ gpu, layers: [layer], limits, kvCache: { pageSize: 4, memory: { bytes: 1 << 20 }, maxPages: 7 } });
    expect(capped.kvInfo.pages).toBe(7);
    capped.dispose();
    const above = new StepDriver({ gpu, layers: [layer], limits, kvCache: { pageSize: 4, memory: { bytes: 1 << 20 }, maxPages: full + 100 } });
    expect(above.kvInfo.pages).toBe(full);
    above.dispose();
    expect(() => new StepDriver({ gpu, layers: [layer], limits, kvCache: { pageSize: 4, maxPages: 0 } })).toThrow(/kvCache.maxPages must be a positive integer, got 0/);
    layer.dispose();
    gpu.dispose();
  });

  it('a request sharing a cached prefix starts on its blocks, prefills only the rest, and answers the same', () => {
    const shared = prompt(30, 4);
    const requests: GenerateRequest[] = [{ prompt: [...shared, 1, 2, 3], maxTokens: 12 }, { prompt: [...shared, 5, 6], maxTokens: 12 }];
    const want = alone(requests);
    const { outputs, reports } = run(requests, {}, [0, 8]);
    expect(outputs).toEqual(want);
    // 30 shared tokens: 7 full blocks of 4 (28 tokens) are found.
    expect(sum(reports, 'prefixHits')).toBe(28);
    expect(sum(reports, 'prefixQueries')).toBe(33 + 32);
    const prefilled = reports.reduce((a, r) => a + r.prefillRows, 0);
    expect(prefilled).toBe(33 + 32 - 28);
  });

  it('the same prompt twice: at most its prompt less one token is taken from the cache', () => {
    const p = prompt(16, 2);
    const { outputs, reports } = run([{ prompt: p, maxTokens: 5 }, { prompt: p, maxTokens: 5 }], {}, [0, 6]);
    expect(outputs[1]).toEqual(outputs[0]);
    // 15 of 16 tokens may come from the cache: 3 blocks of 4.
    expect(sum(reports, 'prefixHits')).toBe(12);
  });

  it('with a recurrent layer, a prefix starts only where a state snapshot was saved (chunk ends on a block boundary)', () => {
    const shared = prompt(30, 6);
    const requests: GenerateRequest[] = [{ prompt: [...shared, 9, 9], maxTokens: 10 }, { prompt: [...shared, 3], maxTokens: 10 }];
    const want = alone(requests, { recurrent: true });
    const { outputs, reports } = run(requests, { recurrent: true }, [0, 8]);
    expect(outputs).toEqual(want);
    // Chunks of 8: snapshots at 8, 16, 24 and 32 (the first prompt's end); the shared 30 tokens hold 7 blocks, so 24 are reused.
    expect(sum(reports, 'prefixHits')).toBe(24);
  });

  it('a full-block hit is reused after its sequence finished, until the pool needs the pages', () => {
    const p = prompt(20, 1);
    const { reports } = run([{ prompt: p, maxTokens: 2 }, { prompt: p, maxTokens: 2 }], { pages: 12 }, [0, 5]);
    expect(sum(reports, 'prefixHits')).toBe(16);
  });

  it('--no-prefix-caching: no hits, the same answers', () => {
    const p = prompt(20, 3);
    const on = run([{ prompt: p, maxTokens: 6 }, { prompt: p, maxTokens: 6 }], {}, [0, 5]);
    const off = run([{ prompt: p, maxTokens: 6 }, { prompt: p, maxTokens: 6 }], { prefixCaching: false }, [0, 5]);
    expect(off.outputs).toEqual(on.outputs);
    expect(sum(off.reports, 'prefixHits')).toBe(0);
    expect(sum(off.reports, 'prefixQueries')).toBe(0);
    expect(sum(on.reports, 'prefixHits')).toBeGreaterThan(0);
  });

  it('a model with a layer that cannot resume at a prefix gets no hits', () => {
    const gpu = new CpuBackend();
    const layer = new BigramLayer(gpu, V, table());
    const driver = new StepDriver({ gpu, layers: [layer], limits: { maxSeqs: 2, maxSeqLen: 64, maxBatch: 2, maxK: 1, maxRows: 32 } });
    const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: 8 });
    expect(driver.canResume).toBe(false);
    expect(loop.prefixCaching).toBe(false);
    const p = prompt(20, 3);
    const { outputs } = generateAll(loop, [{ prompt: p, maxTokens: 3 }, { prompt: p, maxTokens: 3 }]);
    expect(outputs[1]!.tokens).toEqual(outputs[0]!.tokens);
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  });
});
