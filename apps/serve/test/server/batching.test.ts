import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric, startServer, type ServeProcess } from '../support/serve-process.js';

const MODEL = 'metrale/embedded-qwen3-next';
let server: ServeProcess;
let waiting: ServeProcess;

beforeAll(async () => {
  // A small prefill chunk: the longer prompts below take several prefill steps while others decode.
  server = await startServer(['--max-batch', '16', '--prefill-chunk', '8']);
  // The same, each decode step's tokens read before the next launches.
  waiting = await startServer(['--max-batch', '16', '--prefill-chunk', '8', '--no-async-scheduling']);
  await Promise.all([server.ready(), waiting.ready()]);
}, 60_000);

afterAll(async () => {
  expect(await server?.stop()).toBe(0);
  expect(await waiting?.stop()).toBe(0);
});

const PROMPTS = Array.from({ length: 16 }, (_, i) =>
  i % 3 === 0 ? `Question ${i}: ${'tell me more about the sea and the ships that sail on it, '.repeat(1 + (i % 4))}` : `prompt number ${i} about ${['cats', 'stars', 'rivers', 'bread'][i % 4]}`);

interface Streamed {
  text: string;
  tokens: number;
  finish: string | null;
}

async function streamChat(client: OpenAI, content: string, maxTokens: number): Promise<Streamed> {
  const stream = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content }], max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  const out: Streamed = { text: '', tokens: 0, finish: null };
  for await (const chunk of stream) {
    if (chunk.usage) out.tokens = chunk.usage.completion_tokens;
    const c = chunk.choices[0];
    if (!c) continue;
    out.text += c.delta.content ?? '';
    out.finish = c.finish_reason ?? out.finish;
  }
  return out;
}

describe('continuous batching', () => {
  it('16 concurrent greedy streams return exactly what each returns alone', async () => {
    const alone: Streamed[] = [];
    for (const p of PROMPTS) alone.push(await streamChat(server.client, p, 24));
    const together = await Promise.all(PROMPTS.map((p) => streamChat(server.client, p, 24)));
    expect(together).toEqual(alone);
    // Several of them really generated (not all ended at once).
    expect(alone.filter((a) => a.tokens > 4).length).toBeGreaterThan(8);
    // Without async scheduling: the same streams.
    expect(await Promise.all(PROMPTS.map((p) => streamChat(waiting.client, p, 24)))).toEqual(alone);
  }, 120_000);

  it('a client that aborts mid-stream is cancelled and its slot freed; service goes on', async () => {
    const finishedAbort = await metric(server.url, 'vllm:request_success_total', { finished_reason: 'abort' });
    const controller = new AbortController();
    const stream = await server.client.completions.create(
      { model: MODEL, prompt: 'an endless story', max_tokens: 1500, temperature: 0, stream: true, ignore_eos: true } as any,
      { signal: controller.signal },
    ) as unknown as AsyncIterable<OpenAI.Completions.Completion>;
    let chunks = 0;
    try {
      for await (const _chunk of stream) {
        if (++chunks === 5) {
          controller.abort();
          break;
        }
      }
    } catch (error) {
      expect((error as Error).name).toMatch(/Abort/);
    }
    expect(chunks).toBe(5);
    // The engine drops it before its next step: nothing stays in flight or holds a slot.
    const until = Date.now() + 5000;
    const settled = async () => (await metric(server.url, 'vllm:request_success_total', { finished_reason: 'abort' })) === finishedAbort + 1
      && (await metric(server.url, 'vllm:num_requests_running')) + (await metric(server.url, 'vllm:num_requests_waiting')) === 0;
    while (Date.now() < until && !(await settled())) await new Promise((r) => setTimeout(r, 20));
    expect(await metric(server.url, 'vllm:num_requests_running')).toBe(0);
    expect(await metric(server.url, 'vllm:request_success_total', { finished_reason: 'abort' })).toBe(finishedAbort + 1);
    // The next request is served as usual, with the same text as before the abort.
    const after = await streamChat(server.client, PROMPTS[1]!, 24);
    expect(after.tokens).toBeGreaterThan(0);
    expect(await metric(server.url, 'vllm:num_requests_running')).toBe(0);
  }, 60_000);

  it('a long prompt prefills in chunks while a running stream keeps decoding', async () => {
    // Stream A decodes; B's prompt (~300 tokens, --prefill-chunk 8) needs dozens of prefill steps.
    const a = await server.client.completions.create({ model: MODEL, prompt: 'keep going', max_tokens: 120, temperature: 0, ignore_eos: true, stream: true } as any) as any;
    const arrivals: number[] = [];
    let bSent = 0;
    let bFirst = 0;
    const readA = (async () => {
      for await (const chunk of a) {
        if (chunk.choices[0]?.text) arrivals.push(performance.now());
        if (arrivals.length === 5 && !bSent) {
          bSent = performance.now();
          void (async () => {
            const b = await server.client.completions.create({ model: MODEL, prompt: 'the sea and the ships '.repeat(60), max_tokens: 2, temperature: 0, stream: true } as any) as any;
            for await (const c of b) if (c.choices[0]?.text && !bFirst) bFirst = performance.now();
          })();
        }
      }
    })();
    await readA;
    const until = Date.now() + 10_000;
    while (!bFirst && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    expect(bFirst).toBeGreaterThan(0);
    // A kept receiving tokens while B's prompt was being prefilled (not stalled behind it).
    const during = arrivals.filter((t) => t > bSent && t < bFirst).length;
    expect(during).toBeGreaterThanOrEqual(10);
  }, 60_000);

  it('metrics add up: tokens, requests, time to first token', async () => {
    const before = {
      prompt: await metric(server.url, 'vllm:prompt_tokens_total'),
      generated: await metric(server.url, 'vllm:generation_tokens_total'),
      ttft: await metric(server.url, 'vllm:time_to_first_token_seconds_count'),
      length: await metric(server.url, 'vllm:request_success_total', { finished_reason: 'length' }),
      chat2xx: await metric(server.url, 'http_requests_total', { handler: '/v1/chat/completions', status: '2xx' }),
    };
    const results = await Promise.all([6, 7, 8, 9, 10].map((n) => server.client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: `count to ${n}` }], max_tokens: n, temperature: 0, ignore_eos: true,
    } as any))) as OpenAI.Chat.Completions.ChatCompletion[];
    const usage = results.reduce((a, r) => ({ p: a.p + r.usage!.prompt_tokens, c: a.c + r.usage!.completion_tokens }), { p: 0, c: 0 });
    expect(usage.c).toBe(40);
    expect(await metric(server.url, 'vllm:prompt_tokens_total')).toBe(before.prompt + usage.p);
    expect(await metric(server.url, 'vllm:generation_tokens_total')).toBe(before.generated + usage.c);
    expect(await metric(server.url, 'vllm:time_to_first_token_seconds_count')).toBe(before.ttft + 5);
    expect(await metric(server.url, 'vllm:request_success_total', { finished_reason: 'length' })).toBe(before.length + 5);
    expect(await metric(server.url, 'http_requests_total', { handler: '/v1/chat/completions', status: '2xx' })).toBe(before.chat2xx + 5);
    // Every generated token but each request's first has an inter-token latency sample.
    const itl = await metric(server.url, 'vllm:inter_token_latency_seconds_count');
    const ttft = await metric(server.url, 'vllm:time_to_first_token_seconds_count');
    expect(itl).toBe((await metric(server.url, 'vllm:generation_tokens_total')) - ttft);
    expect(await metric(server.url, 'vllm:iteration_tokens_total_count')).toBeGreaterThan(0);
  }, 60_000);
});
