import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { startInProcess } from '../support/in-process-server.js';
import { startServer } from '../support/serve-process.js';
import { writeTinyQwen3Next } from '../support/tiny-qwen3-next.js';

const dir = mkdtempSync(join(tmpdir(), 'metrale-fault-serve-'));
writeTinyQwen3Next(dir);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('a device fault after the model is ready', () => {
  it('/health answers 503 once the engine has failed, and generation requests 503 naming why', async () => {
    // The fake engine fails on its third step, as engine-worker.ts fails after a device fault.
    const s = await startInProcess({ engine: { faultAfterSteps: 3, stepMs: 5 } });
    try {
      expect((await fetch(`${s.url}/health`)).status).toBe(200);
      const during = await s.client.completions.create({ model: 'fake-model', prompt: [1, 2, 3], max_tokens: 100 }).catch((e: unknown) => e);
      expect(during).toBeInstanceOf(OpenAI.InternalServerError);
      expect((during as Error).message).toMatch(/simulated device fault/);
      const health = await fetch(`${s.url}/health`);
      expect(health.status).toBe(503);
      expect(await health.json()).toMatchObject({ status: 'failed', error: expect.stringMatching(/device is unusable/) });
      const after = await s.client.completions.create({ model: 'fake-model', prompt: [1, 2, 3], max_tokens: 2 }).catch((e: unknown) => e);
      expect(after).toBeInstanceOf(OpenAI.APIError);
      expect((after as InstanceType<typeof OpenAI.APIError>).status).toBe(503);
      expect((after as InstanceType<typeof OpenAI.APIError>).code).toBe('engine_failed');
    } finally {
      await s.close();
    }
  }, 30_000);

  it('metrale serve detects a device that stopped working after a failed step, fails the engine and exits 1', async () => {
    // --fault-after-steps: the worker makes its device unusable after 4 steps (testing).
    const server = await startServer(['--model', dir, '--fault-after-steps', '4']);
    try {
      await server.ready();
      const err = await server.client.completions.create({ model: dir, prompt: [4, 5, 6], max_tokens: 50, ignore_eos: true } as any).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.InternalServerError);
      expect((err as Error).message).toMatch(/disposed|device/);
      expect(await server.exited).toBe(1);
      const failed = await server.logLine((l) => l.msg === 'the engine failed');
      expect(failed.err).toMatch(/the device is unusable after a failed step/);
    } finally {
      await server.stop();
    }
  }, 60_000);
});
