import { request } from 'node:http';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, startServer, type ServeProcess } from '../support/serve-process.js';

const MODEL = 'metrale/embedded-qwen3-next';
let server: ServeProcess;

beforeAll(async () => {
  // A short context, so the too-long prompt case is cheap.
  server = await startServer(['--max-model-len', '256']);
  await server.ready();
}, 60_000);

afterAll(async () => {
  expect(await server?.stop()).toBe(0);
});

describe('models and health', () => {
  it('lists the embedded model and answers /health', async () => {
    const models = await server.client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL]);
    expect((await server.client.models.retrieve(MODEL)).id).toBe(MODEL);
    const health = await fetch(`${server.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: 'ok', model: MODEL });
    // The CPU backend does not capture decode graphs ahead (the GPU serve test checks a CUDA server does).
    const ready = await server.logLine((l) => l.msg === 'ready');
    expect(ready).toMatchObject({ backend: 'cpu' });
    expect(ready.graph_capture_ms).toBeUndefined();
  });
});

describe('chat completions', () => {
  it('answers greedily, the same text twice, with usage', async () => {
    const ask = () => server.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Write a poem about the sea.' }], max_tokens: 24, temperature: 0 });
    const a = await ask();
    const b = await ask();
    expect(a.object).toBe('chat.completion');
    expect(a.choices[0]!.message.role).toBe('assistant');
    expect(a.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(b.choices[0]!.message.content).toBe(a.choices[0]!.message.content);
    expect(a.usage!.total_tokens).toBe(a.usage!.prompt_tokens + a.usage!.completion_tokens);
    expect(a.usage!.completion_tokens).toBeLessThanOrEqual(24);
    if (a.choices[0]!.finish_reason === 'length') expect(a.usage!.completion_tokens).toBe(24);
  });

  it('streams the same text as the whole answer, then usage and [DONE]', async () => {
    const body = { model: MODEL, messages: [{ role: 'user' as const, content: 'Tell me a story' }], max_completion_tokens: 20, temperature: 0, ignore_eos: true } as const;
    const whole = await server.client.chat.completions.create(body as any);
    const stream = await server.client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } } as any) as unknown as AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>;
    let text = '';
    let role: string | undefined;
    let finish: string | null = null;
    let usage: OpenAI.Completions.CompletionUsage | undefined | null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) {
        usage = chunk.usage;
        expect(chunk.choices).toEqual([]);
        continue;
      }
      const c = chunk.choices[0]!;
      role ??= c.delta.role ?? undefined;
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
    expect(role).toBe('assistant');
    expect(chunks).toBeGreaterThan(3);
    expect(text).toBe(whole.choices[0]!.message.content);
    expect(finish).toBe('length');
    expect(usage).toEqual(whole.usage);
    expect(usage!.completion_tokens).toBe(20);
  });

  it('logs one structured line per generation, with its usage', async () => {
    const r = await server.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'log me, please, 7 times' }], max_tokens: 7, temperature: 0, ignore_eos: true } as any);
    // Log lines travel through the child's stdout pipe: they may arrive after the response.
    const line = await server.logLine((l) => l.msg === 'generation' && l.completion_tokens === 7 && l.prompt_tokens === r.usage!.prompt_tokens);
    expect(line).toMatchObject({ route: '/v1/chat/completions', stream: false, choices: 1, finish: ['length'] });
    expect(typeof line.reqId).toBe('string');
    expect(typeof line.ms).toBe('number');
  });

  it('ends the stream with data: [DONE]', async () => {
    const r = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, stream: true }),
    });
    expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = (await r.text()).split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(events.slice(0, -1).every((e) => e.startsWith('data: {'))).toBe(true);
  });

  it('samples reproducibly with a seed and differently without temperature 0', async () => {
    const ask = (seed: number) => server.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 16, temperature: 1.2, top_p: 0.95, seed, ignore_eos: true } as any);
    const [a, b, c] = await Promise.all([ask(7), ask(7), ask(8)]);
    expect(b.choices[0]!.message.content).toBe(a.choices[0]!.message.content);
    expect(c.choices[0]!.message.content).not.toBe(a.choices[0]!.message.content);
  });
});

describe('completions', () => {
  it('completes text and token-id prompts, several prompts at once', async () => {
    const one = await server.client.completions.create({ model: MODEL, prompt: 'The capital of France is', max_tokens: 8, temperature: 0, ignore_eos: true } as any);
    expect(one.object).toBe('text_completion');
    expect(one.usage!.completion_tokens).toBe(8);
    expect(one.choices[0]!.finish_reason).toBe('length');
    const ids = (await post(server.url, '/tokenize', { prompt: 'The capital of France is' })).body.tokens as number[];
    const byIds = await server.client.completions.create({ model: MODEL, prompt: ids, max_tokens: 8, temperature: 0, ignore_eos: true } as any);
    expect(byIds.choices[0]!.text).toBe(one.choices[0]!.text);
    const both = await server.client.completions.create({ model: MODEL, prompt: ['The capital of France is', 'a b c'], max_tokens: 8, temperature: 0, ignore_eos: true } as any);
    expect(both.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(both.choices[0]!.text).toBe(one.choices[0]!.text);
    expect(both.usage!.completion_tokens).toBe(16);
  });

  it('defaults max_tokens to 16, as OpenAI does', async () => {
    const r = await server.client.completions.create({ model: MODEL, prompt: 'a b c', temperature: 0, ignore_eos: true } as any);
    expect(r.usage!.completion_tokens).toBe(16);
  });

  it('stops before a stop string and leaves it out of the text', async () => {
    const free = await server.client.completions.create({ model: MODEL, prompt: 'once upon a time', max_tokens: 30, temperature: 0, ignore_eos: true } as any);
    const words = free.choices[0]!.text.split(' ').filter(Boolean);
    expect(words.length).toBeGreaterThan(6);
    // A stop string that spans a token boundary: the end of one word and the start of the next.
    const stop = `${words[4]!.slice(-2)} ${words[5]!.slice(0, 2)}`;
    const cut = free.choices[0]!.text.indexOf(stop);
    for (const stream of [false, true]) {
      const body = { model: MODEL, prompt: 'once upon a time', max_tokens: 30, temperature: 0, ignore_eos: true, stop: [stop, 'never-seen'], stream };
      let text = '';
      let finish: string | null = null;
      if (stream) {
        for await (const chunk of (await server.client.completions.create(body as any)) as any as AsyncIterable<OpenAI.Completions.Completion>) {
          text += chunk.choices[0]?.text ?? '';
          finish = chunk.choices[0]?.finish_reason ?? finish;
        }
      } else {
        const r = await server.client.completions.create(body as any) as OpenAI.Completions.Completion;
        text = r.choices[0]!.text;
        finish = r.choices[0]!.finish_reason;
        expect(r.usage!.completion_tokens).toBeLessThan(30);
      }
      expect(text).toBe(free.choices[0]!.text.slice(0, cut));
      expect(finish).toBe('stop');
    }
  });
});

describe('n choices per prompt', () => {
  it('completions: n per prompt in OpenAI order, prompt tokens counted once', async () => {
    const one = await server.client.completions.create({ model: MODEL, prompt: ['once upon', 'a b c'], max_tokens: 5, temperature: 0, ignore_eos: true } as any);
    const r = await server.client.completions.create({ model: MODEL, prompt: ['once upon', 'a b c'], max_tokens: 5, temperature: 0, ignore_eos: true, n: 2 } as any);
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    expect(r.choices.map((c) => c.text)).toEqual([one.choices[0]!.text, one.choices[0]!.text, one.choices[1]!.text, one.choices[1]!.text]);
    expect(r.usage).toEqual({ prompt_tokens: one.usage!.prompt_tokens, completion_tokens: 20, total_tokens: one.usage!.prompt_tokens + 20 });
  });

  it('chat: sampled choices differ from each other, and a seed repeats them all, streamed or not', async () => {
    const body = { model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 12, temperature: 1.3, seed: 5, ignore_eos: true, n: 3 };
    const a = await server.client.chat.completions.create(body as any) as any;
    const b = await server.client.chat.completions.create(body as any) as any;
    const texts = (r: any) => r.choices.map((c: any) => c.message.content);
    expect(texts(a)).toEqual(texts(b));
    expect(new Set(texts(a)).size).toBe(3);
    expect(a.usage.completion_tokens).toBe(36);
    const streamed = ['', '', ''];
    const finished: (string | null)[] = [null, null, null];
    for await (const chunk of (await server.client.chat.completions.create({ ...body, stream: true } as any)) as any) {
      for (const c of chunk.choices) {
        streamed[c.index] += c.delta.content ?? '';
        if (c.finish_reason) finished[c.index] = c.finish_reason;
      }
    }
    expect(streamed).toEqual(texts(a));
    expect(finished).toEqual(['length', 'length', 'length']);
  });
});

describe('tokenize and detokenize', () => {
  it('round-trips text, and tokenizes chat messages as the chat endpoint does', async () => {
    const t = await post(server.url, '/tokenize', { prompt: 'Hello world, hello metrale' });
    expect(t.status).toBe(200);
    expect(t.body.count).toBe(t.body.tokens.length);
    expect(t.body.max_model_len).toBe(256);
    const d = await post(server.url, '/detokenize', { tokens: t.body.tokens });
    expect(d.body.prompt).toBe('Hello world, hello metrale');
    const chat = await post(server.url, '/tokenize', { messages: [{ role: 'user', content: 'hi' }] });
    const answer = await server.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
    expect(chat.body.count).toBe(answer.usage!.prompt_tokens);
  });
});

describe('errors, as OpenAI error objects', () => {
  it('400 for malformed JSON, a body that is not an object, and invalid fields, naming the field', async () => {
    const bad = await post(server.url, '/v1/chat/completions', '{"messages": [');
    expect(bad.status).toBe(400);
    expect(bad.body.error.type).toBe('invalid_request_error');
    expect((await post(server.url, '/v1/completions', '[1,2]')).status).toBe(400);
    const field = await post(server.url, '/v1/chat/completions', { messages: [{ role: 'user', content: 5 }] });
    expect(field.status).toBe(400);
    expect(field.body.error.param).toBe('messages[0].content');
    const missing = await post(server.url, '/v1/completions', { max_tokens: 3 });
    expect(missing.body.error).toMatchObject({ param: 'prompt', message: 'prompt is required' });
    const range = await post(server.url, '/v1/completions', { prompt: 'x', temperature: 9 });
    expect(range.body.error.param).toBe('temperature');
    const vocab = await post(server.url, '/v1/completions', { prompt: [1, 2, 99999999] });
    expect(vocab.status).toBe(400);
    expect(vocab.body.error.param).toBe('prompt[2]');
    const n = await post(server.url, '/v1/completions', { prompt: 'x', n: 17 });
    expect(n.body.error.param).toBe('n');
  });

  it('400 through the openai client, with the param', async () => {
    const err = await server.client.chat.completions.create({ model: MODEL, messages: [], max_tokens: 2 }).catch((e: any) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.param).toBe('messages');
  });

  it('404 for an unknown model and an unknown route', async () => {
    const err = await server.client.chat.completions.create({ model: 'gpt-9', messages: [{ role: 'user', content: 'hi' }] }).catch((e: any) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.message).toMatch(/gpt-9/);
    expect(err.message).toMatch(new RegExp(MODEL));
    const route = await fetch(`${server.url}/v1/nothing`);
    expect(route.status).toBe(404);
    expect(((await route.json()) as any).error.message).toMatch(/no route/);
  });

  it('400 naming both numbers for a prompt longer than the context', async () => {
    const long = 'word '.repeat(300);
    const count = (await post(server.url, '/tokenize', { prompt: long })).body.count as number;
    expect(count).toBeGreaterThan(256);
    const err = await server.client.completions.create({ model: MODEL, prompt: long, max_tokens: 4 }).catch((e: any) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.code).toBe('context_length_exceeded');
    expect(err.message).toMatch(/256 tokens/);
    expect(err.message).toMatch(new RegExp(`${count} tokens`));
    const over = await server.client.completions.create({ model: MODEL, prompt: 'hello', max_tokens: 400 }).catch((e: any) => e);
    expect(over).toBeInstanceOf(OpenAI.BadRequestError);
    expect(over.message).toMatch(/256/);
    expect(over.message).toMatch(/400 in max_tokens/);
  });

  it('413 for an oversized body, 415 for a form, 400 for plain text; the server stays up', async () => {
    // Only the header is sent: the server answers from the declared length, before any body.
    const big = await new Promise<{ status: number; body: any }>((resolve, reject) => {
      const req = request(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': String(9 * 1024 * 1024) } }, (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
      });
      req.on('error', reject);
      req.flushHeaders();
    });
    expect(big.status).toBe(413);
    expect(big.body.error.type).toBe('invalid_request_error');
    const form = await post(server.url, '/v1/completions', 'prompt=hi', { 'content-type': 'application/x-www-form-urlencoded' });
    expect(form.status).toBe(415);
    expect(form.body.error).toBeDefined();
    const text = await post(server.url, '/v1/completions', 'prompt=hi', { 'content-type': 'text/plain' });
    expect(text.status).toBe(400);
    expect(text.body.error.message).toMatch(/JSON object/);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });
});
