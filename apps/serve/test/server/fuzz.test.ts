import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, startServer, type ServeProcess } from '../support/serve-process.js';

// Nothing a client sends may crash the server or disturb another request: a few hundred malformed,
// mistyped and out-of-range bodies against every POST endpoint, while a normal request streams.
let server: ServeProcess;

beforeAll(async () => {
  server = await startServer(['--max-model-len', '128']);
  await server.ready();
}, 60_000);

afterAll(async () => {
  expect(await server?.stop()).toBe(0);
});

/** xorshift32: the same bodies on every run. */
function generator(seed: number) {
  let s = seed >>> 0 || 1;
  const next = () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!;
  return { next, pick };
}

const WEIRD: unknown[] = [
  null, true, false, 0, -1, 1.5, 2 ** 53, -(2 ** 31), Number.MAX_SAFE_INTEGER, 1e308, '', 'x', '\u0000', '🙂'.repeat(50), '{"a":', [],
  [[]], [1, 'a'], [-5], [0.5], [[1, 2], 'x'], {}, { a: 1 }, { role: 'user' }, { role: 'user', content: [{ type: 'image_url' }] },
  { type: 'text' }, 'w'.repeat(2000), [2 ** 40], { include_usage: 'yes' }, [{ role: 'bogus', content: 'x' }],
];
const FIELDS = ['model', 'prompt', 'messages', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'seed', 'stop', 'stream', 'stream_options', 'n', 'tokens', 'logprobs', 'echo', 'ignore_eos', 'add_special_tokens'];
const ROUTES = ['/v1/completions', '/v1/chat/completions', '/tokenize', '/detokenize'];

describe('fuzzing the POST endpoints', () => {
  it('answers every body with JSON or an SSE stream, never a crash, and keeps serving', async () => {
    // A normal streaming request runs the whole time: it must finish as if alone.
    const aloneText = (await server.client.completions.create({ prompt: 'steady', max_tokens: 40, temperature: 0, ignore_eos: true } as any)).choices[0]!.text;
    const steady = (async () => {
      let text = '';
      const stream = await server.client.completions.create({ prompt: 'steady', max_tokens: 40, temperature: 0, ignore_eos: true, stream: true } as any) as any;
      for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
      return text;
    })();

    const g = generator(20261130);
    const statuses = new Map<number, number>();
    for (let round = 0; round < 300; round++) {
      const body: Record<string, unknown> = {};
      const count = 1 + Math.floor(g.next() * 4);
      for (let f = 0; f < count; f++) body[g.pick(FIELDS)] = g.pick(WEIRD);
      // Some bodies are valid apart from one bad field; some are not JSON at all.
      if (g.next() < 0.3) body.prompt ??= 'hello';
      if (g.next() < 0.3) body.messages ??= [{ role: 'user', content: 'hello' }];
      if (typeof body.max_tokens !== 'number' || body.max_tokens > 8) body.max_tokens = 4;
      const raw = g.next() < 0.1 ? JSON.stringify(body).slice(0, Math.floor(g.next() * 40)) : JSON.stringify(body);
      const r = await post(server.url, g.pick(ROUTES), raw);
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      expect([200, 400, 404, 413, 415, 429]).toContain(r.status);
      if (r.status !== 200) {
        expect(r.body.error, `${r.status} for ${raw}`).toBeDefined();
        expect(typeof r.body.error.message).toBe('string');
      }
    }
    console.log(`statuses: ${JSON.stringify(Object.fromEntries(statuses))}`);
    expect(statuses.get(400)).toBeGreaterThan(50);
    expect(statuses.get(200)).toBeGreaterThan(5);
    expect(await steady).toBe(aloneText);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  }, 120_000);
});
