import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '@metrale/cpu-backend';
import { Checkpoint, EngineLoop, KvCacheSizeError, StepDriver, WeightsError, generateAll, resolvePrecision, type GenerateRequest } from '@metrale/core';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_MAX_MODEL_LEN, buildEngine, resolveModel, servedModelLen, servingLimits, startEngine, type EngineSetup } from '../src/engine/build-engine.js';
import { loadRegistry } from '../src/plugins/load-registry.js';
import { writeTinyQwen3Next } from './support/tiny-qwen3-next.js';

// The engine as `metrale serve` builds it (the worker's buildEngine), on the tiny hybrid
// qwen3_next (Gated DeltaNet + attention): a KV page pool sized from memory, preemption when it
// runs out, and prefix caching over attention pages and GDN state snapshots.

const root = mkdtempSync(join(tmpdir(), 'metrale-kv-engine-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const modelDir = join(root, 'tiny');
writeTinyQwen3Next(modelDir, { dtype: 'f32' });

async function withEngine<T>(over: Partial<EngineSetup>, fn: (engine: ReturnType<typeof buildEngine>, gpu: CpuBackend) => T): Promise<T> {
  const setup = {
    modelDir, backend: 'cpu', maxBatch: 4, maxModelLen: 512, prefillChunk: 32, graphs: true,
    plugins: { cwd: process.cwd(), packageDir: process.cwd(), plugins: [], preferPlugins: [] }, ...over,
  } as EngineSetup;
  const registry = await loadRegistry(setup.plugins);
  const { info, checkpoint } = resolveModel(setup, registry);
  const gpu = new CpuBackend();
  const engine = buildEngine(setup, info, checkpoint, gpu, registry);
  try {
    return fn(engine, gpu);
  } finally {
    engine.dispose();
    gpu.dispose();
  }
}

const prompt = (n: number, seed: number) => Array.from({ length: n }, (_, i) => 2 + ((i * 11 + seed * 17) % 60));

describe('the serving engine over a KV page pool (tiny qwen3_next, CPU)', () => {
  it('preempts when the pool runs out; every answer equals the same request alone', async () => {
    const requests: GenerateRequest[] = [
      { prompt: prompt(40, 1), maxTokens: 48 },
      { prompt: prompt(52, 2), maxTokens: 40 },
      { prompt: prompt(30, 3), maxTokens: 56, sampling: { temperature: 0.9, seed: 7 } },
      { prompt: prompt(45, 4), maxTokens: 44 },
    ];
    const alone = await withEngine({ prefixCaching: false }, (e) => requests.map((r) => generateAll(e.loop, [r]).outputs[0]!.tokens));
    // Two attention layers × K and V × 2 heads × 8 dims × 4 bytes: 256 bytes a token, 4 KiB a page of 16.
    // About 13 pages (the block table and a state snapshot come out of the budget too): two of these
    // sequences at their longest, not four.
    const together = await withEngine({ kvCacheMemory: 14 * 4096 + 512 }, (e) => {
      expect(e.kv.pageSize).toBe(16);
      expect(e.kv.pages).toBeLessThan(14);
      let preemptions = 0;
      const loop = e.loop;
      requests.forEach((r, id) => loop.add({ ...r, id }));
      const out: number[][] = requests.map(() => []);
      while (!loop.idle) {
        const report = loop.step();
        preemptions += report.preemptions;
        expect(report.kvUsage).toBeLessThanOrEqual(1);
        for (const ev of report.events) {
          expect(ev.finish).not.toBe('error');
          out[ev.id]!.push(...ev.tokens);
        }
      }
      console.log(`kv pool of ${e.kv.pages} pages: ${preemptions} preemptions`);
      expect(preemptions).toBeGreaterThan(1);
      return out;
    });
    expect(together).toEqual(alone);
  }, 300_000);

  it('a second step driver over the same built model binds its caches again, with the same answers', async () => {
    const requests: GenerateRequest[] = [{ prompt: prompt(40, 6), maxTokens: 16 }, { prompt: prompt(70, 7), maxTokens: 12 }];
    await withEngine({}, (e, gpu) => {
      const first = generateAll(e.loop, requests).outputs.map((o) => o.tokens);
      // A benchmark's or a test's next driver: a smaller pool, snapshots of GDN state bound again.
      for (const pages of [24, 40]) {
        const driver = new StepDriver({ gpu, layers: e.stack.layers, limits: e.limits, kvCache: { pageSize: 16, pages, snapshots: 3 } });
        try {
          expect(driver.kvInfo.pages).toBe(pages);
          const loop = new EngineLoop({ driver, vocabSize: e.stack.vocabSize, prefillChunk: 32 });
          expect(generateAll(loop, requests).outputs.map((o) => o.tokens)).toEqual(first);
        } finally {
          driver.dispose();
        }
      }
    });
  }, 300_000);

  it('a request sharing a prefix starts on its cached blocks and GDN snapshot, with the same answer', async () => {
    const shared = prompt(200, 5);
    const a: GenerateRequest = { prompt: [...shared, 3, 4, 5], maxTokens: 12 };
    const b: GenerateRequest = { prompt: [...shared, 9, 8], maxTokens: 12 };
    const cold = await withEngine({ prefixCaching: false }, (e) => generateAll(e.loop, [b]).outputs[0]!.tokens);
    await withEngine({}, (e) => {
      expect(e.kv.prefixCaching).toBe(true);
      expect(e.kv.snapshots).toBeGreaterThan(0);
      generateAll(e.loop, [a]);
      e.loop.add({ ...b, id: 1 });
      let hits = 0, queries = 0, rows = 0;
      const tokens: number[] = [];
      while (!e.loop.idle) {
        const r = e.loop.step();
        hits += r.prefixHits;
        queries += r.prefixQueries;
        rows += r.prefillRows;
        for (const ev of r.events) tokens.push(...ev.tokens);
      }
      expect(tokens).toEqual(cold);
      // Snapshots at chunk ends of 32: the last one inside the 200 shared tokens is at 192.
      expect(hits).toBe(192);
      expect(queries).toBe(202);
      expect(rows).toBe(202 - 192);
    });
  }, 300_000);

  it('startEngine serves a stack built from a config and weights (the benches\' path) as buildEngine serves the checkpoint', async () => {
    const requests: GenerateRequest[] = [{ prompt: prompt(70, 8), maxTokens: 10 }, { prompt: prompt(33, 9), maxTokens: 6 }];
    const expected = await withEngine({}, (e) => generateAll(e.loop, requests).outputs.map((o) => o.tokens));
    const setup = { backend: 'cpu', maxBatch: 4, maxModelLen: 512, prefillChunk: 32, graphs: true } as EngineSetup;
    const registry = await loadRegistry({ cwd: process.cwd(), packageDir: process.cwd(), plugins: [], preferPlugins: [] });
    const checkpoint = Checkpoint.open(modelDir);
    const limits = servingLimits(setup, servedModelLen(setup, checkpoint.config, modelDir));
    const gpu = new CpuBackend();
    const stack = registry.architectures.forConfig(checkpoint.config, modelDir).build({
      gpu, config: checkpoint.config, weights: checkpoint.weights, limits, precision: resolvePrecision('auto', checkpoint.config), plugins: registry.layers,
    });
    checkpoint.close();
    const engine = startEngine(setup, gpu, stack, limits, { float: 1, fp8: 0, total: 1 });
    try {
      expect(engine.kv).toMatchObject({ prefixCaching: true, pageSize: 16 });
      expect(engine.deviceWeightBytes.total).toBe(1);
      expect(generateAll(engine.loop, requests).outputs.map((o) => o.tokens)).toEqual(expected);
    } finally {
      engine.dispose();
      gpu.dispose();
    }
  }, 300_000);

  it('engines started in turn over one stack (the long-context bench) size their pools from the same free memory', async () => {
    const setup = { backend: 'cpu', maxBatch: 4, maxModelLen: 512, prefillChunk: 32, graphs: true } as EngineSetup;
    const registry = await loadRegistry({ cwd: process.cwd(), packageDir: process.cwd(), plugins: [], preferPlugins: [] });
    const checkpoint = Checkpoint.open(modelDir);
    const limits = servingLimits(setup, servedModelLen(setup, checkpoint.config, modelDir));
    const gpu = new CpuBackend({ memoryLimit: 64 << 20 });
    const stack = registry.architectures.forConfig(checkpoint.config, modelDir).build({
      gpu, config: checkpoint.config, weights: checkpoint.weights, limits, precision: resolvePrecision('auto', checkpoint.config), plugins: registry.layers,
    });
    checkpoint.close();
    // A utilization that leaves the pool about 256 KiB past the weights: memory bounds it, not the slots.
    const { free, total } = gpu.memoryInfo();
    const sized = { ...setup, gpuMemoryUtilization: (total - free + (256 << 10)) / total };
    const kept = { ...stack, dispose() {} };
    const requests: GenerateRequest[] = [{ prompt: prompt(70, 8), maxTokens: 10 }, { prompt: prompt(33, 9), maxTokens: 6 }];
    const serve = (over: Partial<EngineSetup>) => {
      const engine = startEngine({ ...sized, ...over }, gpu, kept, limits, { float: 1, fp8: 0, total: 1 });
      try {
        return { kv: engine.kv, tokens: generateAll(engine.loop, requests).outputs.map((o) => o.tokens) };
      } finally {
        engine.dispose();
      }
    };
    try {
      const first = serve({});
      expect(first.kv.pages).toBeLessThan(limits.maxSeqs * Math.ceil(limits.maxSeqLen / first.kv.pageSize));
      expect(first.kv.snapshots).toBeGreaterThan(0);
      // The first engine's pages and snapshot entries went with it.
      expect(gpu.memoryInfo().free).toBe(free);
      const again = serve({});
      expect(again).toEqual(first);
      // Without prefix caching no snapshots are kept: their share goes to pages.
      const uncached = serve({ prefixCaching: false });
      expect(uncached.kv.pages).toBeGreaterThanOrEqual(first.kv.pages);
      expect(uncached.tokens).toEqual(first.tokens);
      expect(gpu.memoryInfo().free).toBe(free);
    } finally {
      stack.dispose();
      gpu.dispose();
    }
  }, 300_000);

  it('serves --max-model-len, else the model\'s max_position_embeddings, never more than it', () => {
    const config = { max_position_embeddings: 1000 };
    expect(servedModelLen({}, config, 'c')).toBe(1000);
    expect(servedModelLen({ maxModelLen: 500 }, config, 'c')).toBe(500);
    expect(servedModelLen({}, {}, 'c')).toBe(DEFAULT_MAX_MODEL_LEN);
    expect(() => servedModelLen({ maxModelLen: 2000 }, config, 'c')).toThrow(WeightsError);
    expect(() => servedModelLen({ maxModelLen: 2000 }, config, 'c')).toThrow(/--max-model-len 2000 exceeds the model's max_position_embeddings \(1000\)/);
  });

  it('refuses, with the sizes, a request longer than the pool holds; and a budget that holds no page', async () => {
    await withEngine({ kvCacheMemory: 8 * 4096 + 4 * 4 * 33 + 1024 }, (e) => {
      expect(() => e.loop.add({ id: 1, prompt: prompt(120, 1), maxTokens: 20 })).toThrow(/need 9 KV-cache pages of 16 tokens, but the cache holds 8 pages \(128 tokens\)/);
    });
    await expect(withEngine({ kvCacheMemory: 1000 }, () => undefined)).rejects.toThrow(KvCacheSizeError);
  }, 120_000);
});
