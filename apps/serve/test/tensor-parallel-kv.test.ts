import { CpuBackend } from '@metrale/cpu-backend';
import { Checkpoint, EngineLoop, F32_PRECISION, generateAll, type GenerateRequest } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { startTensorParallel } from '../src/parallel/tensor-parallel-group.js';
import type { RankSetup } from '../src/parallel/rank-setup.js';
import { loadRegistry } from '../src/plugins/load-registry.js';
import { readModelFixture } from './support/model-fixtures.js';

// Each rank of a tensor-parallel group sizes its KV page pool from its own device's free memory,
// and every rank hands out pages for the same calls. The leader's pool, which the engine loop plans
// with, is capped at the smallest follower's: a follower with less memory never runs out first.

const fx = readModelFixture('qwen3-next-tiny');
const ref = new URL('../dist/rank-worker.js', import.meta.url);
const halfMemory = new URL('./support/half-memory-rank-worker.mjs', import.meta.url);
const KV_BYTES = 96 * 1024;

async function group(workerUrl: URL) {
  const plugins = { cwd: process.cwd(), packageDir: process.cwd(), plugins: [], preferPlugins: [] };
  const registry = await loadRegistry(plugins);
  const setup: RankSetup = {
    modelDir: fx.dir, backend: 'cpu', precision: F32_PRECISION,
    limits: { maxSeqs: 4, maxBatch: 4, maxK: 1, maxSeqLen: 256, maxRows: 64 }, graphs: true, prefillLastRows: true, expertParallel: false,
    plugins, kvCache: { pageSize: 16, memory: { bytes: KV_BYTES }, snapshots: 0 },
  };
  const gpu = new CpuBackend();
  const g = await startTensorParallel(2, setup, registry, Checkpoint.open(fx.dir), gpu, { workerUrl });
  return { g, gpu };
}

const prompt = (n: number, seed: number) => Array.from({ length: n }, (_, i) => 2 + ((i * 13 + seed * 7) % 50));

describe('tensor-parallel KV pools on the CPU backend', () => {
  it('the leader takes the smallest follower\'s page count; filling it preempts, and no rank runs out', async () => {
    const even = await group(ref);
    const evenPages = even.g.driver.kvInfo.pages;
    const requests: GenerateRequest[] = [0, 1, 2, 3].map((s) => ({ prompt: prompt(40 + 9 * s, s), maxTokens: 40 }));
    const alone = requests.map((r) => generateAll(new EngineLoop({ driver: even.g.driver, vocabSize: even.g.stack.vocabSize, prefillChunk: 32 }), [r]).outputs[0]!.tokens);
    await even.g.dispose();
    even.gpu.dispose();

    const uneven = await group(halfMemory);
    try {
      const pages = uneven.g.driver.kvInfo.pages;
      expect(pages).toBeLessThan(evenPages);
      // Four sequences of up to 97 tokens need 4 × 7 pages: more than this pool holds.
      expect(pages).toBeLessThan(28);
      const loop = new EngineLoop({ driver: uneven.g.driver, vocabSize: uneven.g.stack.vocabSize, prefillChunk: 32 });
      requests.forEach((r, id) => loop.add({ ...r, id }));
      const out: number[][] = requests.map(() => []);
      let preemptions = 0;
      while (!loop.idle) {
        const report = loop.step();
        preemptions += report.preemptions;
        for (const ev of report.events) {
          expect(ev.finish, `request ${ev.id}`).not.toBe('error');
          out[ev.id]!.push(...ev.tokens);
        }
      }
      expect(uneven.g.driver.broken).toBeUndefined();
      expect(preemptions).toBeGreaterThan(0);
      expect(out).toEqual(alone);
    } finally {
      await uneven.g.dispose();
      uneven.gpu.dispose();
    }
  }, 300_000);
});
