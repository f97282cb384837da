import OpenAI from 'openai';
import type { EngineSetup } from '../../src/engine/build-engine.js';
import { EngineClient } from '../../src/engine/engine-client.js';
import { createServer, type CreateServerOptions } from '../../src/server/create-server.js';
import { ServerContext, type ServerLimits } from '../../src/server/server-context.js';
import { ServerMetrics } from '../../src/server/server-metrics.js';

const FAKE_ENGINE = new URL('./fake-engine-worker.mjs', import.meta.url);

export interface FakeEngineOptions {
  /** Tokens each running request gets per step (default 1). */
  readonly tokensPerStep?: number;
  /** Milliseconds between steps (default 0: as fast as the worker's loop turns). */
  readonly stepMs?: number;
  /** The engine fails after this many steps, as after a device fault. */
  readonly faultAfterSteps?: number;
  readonly maxBatch?: number;
}

export interface InProcessServer {
  readonly url: string;
  readonly client: OpenAI;
  readonly ctx: ServerContext;
  readonly engine: EngineClient;
  readonly server: ReturnType<typeof createServer>;
  close(): Promise<void>;
}

/**
 * The real HTTP server (createServer, ServerContext, EngineClient) over a fake engine worker
 * (fake-engine-worker.mjs): tokens as fast or as slow as a test needs, and engine failures on
 * demand, without a model or the CLI. The model is 'fake-model'; prompts are token ids.
 */
export async function startInProcess(
  o: { engine?: FakeEngineOptions; server?: CreateServerOptions; limits?: Partial<ServerLimits> } = {},
): Promise<InProcessServer> {
  const setup = { backend: 'cpu', maxBatch: o.engine?.maxBatch ?? 8, prefillChunk: 1, graphs: false, plugins: { cwd: process.cwd(), packageDir: process.cwd(), plugins: [], preferPlugins: [] }, fake: o.engine } as EngineSetup;
  const engine = new EngineClient(setup, { workerUrl: FAKE_ENGINE, ...(o.engine?.faultAfterSteps !== undefined ? { faultAfterSteps: o.engine.faultAfterSteps } : {}) });
  const ctx = new ServerContext(engine, new ServerMetrics({ processMetrics: false }), { maxQueue: 64, generationTimeoutMs: 0, tokenizerThreads: 1, ...o.limits });
  const server = createServer(ctx, o.server);
  await engine.whenReady();
  const url = await server.listen({ port: 0, host: '127.0.0.1' });
  return {
    url, ctx, engine, server,
    client: new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 30_000 }),
    async close() {
      await server.close();
      await engine.shutdown();
    },
  };
}
