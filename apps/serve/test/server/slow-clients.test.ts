import type { Socket } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startInProcess, type InProcessServer } from '../support/in-process-server.js';

// Clients that stop reading, and requests that outlive the generation deadline, against the real
// HTTP server over a fake engine that generates far faster than a model (thousands of steps a
// second): without backpressure, every event would pile up in the server.
let fast: InProcessServer;
let bounded: InProcessServer;
const sockets = new Map<InProcessServer, Socket[]>();

beforeAll(async () => {
  [fast, bounded] = await Promise.all([
    startInProcess({ engine: { tokensPerStep: 10 } }),
    startInProcess({ engine: { tokensPerStep: 100, stepMs: 5 }, limits: { generationTimeoutMs: 1500 } }),
  ]);
  for (const s of [fast, bounded]) {
    sockets.set(s, []);
    s.server.server.on('connection', (socket: Socket) => sockets.get(s)!.push(socket));
  }
});

afterAll(async () => {
  await Promise.all([fast?.close(), bounded?.close()]);
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The text of `tokens` tokens from the fake engine (ids 100 … 999; no tokenizer, so `<id>` each). */
function fakeText(tokens: number): string {
  const cycle = Array.from({ length: 900 }, (_, i) => `<${100 + i}>`).join('');
  return cycle.repeat(Math.floor(tokens / 900)) + cycle.slice(0, 5 * (tokens % 900));
}

/** Waits until `s` has no generation in flight. */
async function idle(s: InProcessServer, timeoutMs = 30_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (s.engine.inFlight > 0 && Date.now() < until) await sleep(20);
  expect(s.engine.inFlight).toBe(0);
}

describe('a reader that stops reading', () => {
  it("does not grow the server's memory: its socket buffer stays at its mark, the text waits merged, none of it lost", async () => {
    const tokens = 600_000;
    const stream = await fast.client.completions.create({ model: 'fake-model', prompt: [1, 2, 3], max_tokens: tokens, stream: true });
    const reader = stream[Symbol.asyncIterator]();
    const first = await reader.next();
    // The reader stops while 60 000 steps of 10 tokens are generated: ~12 MB of events if each
    // were written as it came. The kernel's socket buffers and the client's take a few MB.
    await idle(fast);
    expect(sockets.get(fast)!.at(-1)!.writableLength).toBeLessThan(64 * 1024);
    let text = first.done ? '' : first.value.choices[0]?.text ?? '';
    let events = 1;
    let finish: string | null = null;
    for (let r = await reader.next(); !r.done; r = await reader.next()) {
      events++;
      text += r.value.choices[0]?.text ?? '';
      finish = r.value.choices[0]?.finish_reason ?? finish;
    }
    const expected = fakeText(tokens);
    expect(text.length).toBe(expected.length);
    expect(text === expected).toBe(true);
    expect(finish).toBe('length');
    // What the buffers did not take waited and came merged: far fewer events than steps.
    expect(events).toBeLessThan(tokens / 10 / 2);
  }, 60_000);
});

describe('the generation deadline (--generation-timeout)', () => {
  it('answers 504 when a generation runs past it, and frees its engine slot', async () => {
    const t0 = Date.now();
    const err = await bounded.client.completions.create({ model: 'fake-model', prompt: [1, 2, 3], max_tokens: 9_000_000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(504);
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('generation_timeout');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1400);
    await idle(bounded, 2000);
  }, 30_000);

  it('ends the stream of a reader that stopped reading at the deadline, and frees its engine slot then', async () => {
    const stream = await bounded.client.completions.create({ model: 'fake-model', prompt: [1, 2, 3], max_tokens: 9_000_000, stream: true });
    const reader = stream[Symbol.asyncIterator]();
    await reader.next();
    const t0 = Date.now();
    // The reader stops reading; its generation stops at the deadline, not at max_tokens.
    await idle(bounded, 5000);
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(await bounded.ctx.metrics.text()).toMatch(/^vllm:request_success_total\{[^}]*finished_reason="abort"\} [1-9]/m);
    // Reading again, it finds what was sent before the deadline, then the deadline's error. (A
    // reader whose socket buffer is still full by then is disconnected instead: choice-stream.test.ts.)
    const rest = (async () => {
      for (let r = await reader.next(); !r.done; r = await reader.next());
    })();
    await expect(rest).rejects.toThrow(/generation deadline/);
  }, 30_000);
});
