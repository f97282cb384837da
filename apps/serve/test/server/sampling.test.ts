import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, startServer, type ServeProcess } from '../support/serve-process.js';

// The sampling fields of the API through the official openai client, on the embedded model: its
// lm head walks a fixed cycle of word tokens, so greedy text is a confident word salad that only
// the adjustments under test bend.

const MODEL = 'metrale/embedded-qwen3-next';
let server: ServeProcess;
/** The same model with a generation_config.json of sampling defaults (--generation-config DIR). */
let defaults: ServeProcess;
let configDir: string;

beforeAll(async () => {
  configDir = mkdtempSync(join(tmpdir(), 'metrale-generation-config-'));
  writeFileSync(join(configDir, 'generation_config.json'), JSON.stringify({ temperature: 0, repetition_penalty: 1.5, max_new_tokens: 4, do_sample: true, top_k: 20 }));
  [server, defaults] = await Promise.all([startServer(['--max-model-len', '256']), startServer(['--max-model-len', '256', '--generation-config', configDir])]);
  await Promise.all([server.ready(60_000), defaults.ready(60_000)]);
}, 120_000);

afterAll(async () => {
  expect(await server?.stop()).toBe(0);
  expect(await defaults?.stop()).toBe(0);
  rmSync(configDir, { recursive: true, force: true });
});

type Body = Record<string, unknown>;
const complete = (s: ServeProcess, body: Body) => s.client.completions.create({ model: MODEL, ...body } as any) as Promise<OpenAI.Completions.Completion>;
const text = async (s: ServeProcess, body: Body) => (await complete(s, body)).choices[0]!.text;
const tokenIds = async (t: string): Promise<number[]> => (await post(server.url, '/tokenize', { prompt: t })).body.tokens;
const words = (t: string) => t.split(' ').filter(Boolean);
const count = (list: readonly string[], w: string) => list.filter((x) => x === w).length;

const PROMPT = 'once upon a time';
/** A prompt whose last word the model continues with words the prompt already holds. */
const ECHOING = ' filing omap mashed merits filing';

describe('logprobs', () => {
  it('chat: every logprob ≤ 0, the greedy token is the top one, streamed as answered', async () => {
    const body = { model: MODEL, messages: [{ role: 'user' as const, content: 'hello there' }], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3, ignore_eos: true };
    const r = await server.client.chat.completions.create(body as any) as OpenAI.Chat.Completions.ChatCompletion;
    const content = r.choices[0]!.logprobs!.content!;
    expect(content).toHaveLength(r.usage!.completion_tokens);
    expect(content.map((c) => c.token).join('')).toBe(r.choices[0]!.message.content);
    for (const c of content) {
      expect(c.logprob).toBeLessThanOrEqual(0);
      expect(c.top_logprobs).toHaveLength(3);
      expect(c.top_logprobs[0]!).toEqual({ token: c.token, logprob: c.logprob, bytes: c.bytes });
      expect(c.top_logprobs[1]!.logprob).toBeLessThanOrEqual(c.logprob);
      expect(c.bytes).toEqual([...Buffer.from(c.token, 'utf8')]);
    }
    const streamed: OpenAI.Chat.Completions.ChatCompletionTokenLogprob[] = [];
    for await (const chunk of (await server.client.chat.completions.create({ ...body, stream: true } as any)) as any as AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) {
      streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
    }
    expect(streamed).toEqual(content);
    // logprobs without top_logprobs: each token's own logprob only; none asked: null.
    const own = await server.client.chat.completions.create({ ...body, top_logprobs: undefined } as any) as OpenAI.Chat.Completions.ChatCompletion;
    expect(own.choices[0]!.logprobs!.content!.map((c) => c.top_logprobs)).toEqual(content.map(() => []));
    expect((await server.client.chat.completions.create({ ...body, logprobs: undefined, top_logprobs: undefined } as any) as any).choices[0].logprobs).toBeNull();
  });

  it('completions: tokens, their logprobs, the sampled token with the top N, text offsets', async () => {
    const r = await complete(server, { prompt: PROMPT, max_tokens: 5, temperature: 0, logprobs: 2, ignore_eos: true });
    const lp = r.choices[0]!.logprobs!;
    expect(lp.tokens).toHaveLength(5);
    expect(lp.tokens!.join('')).toBe(r.choices[0]!.text);
    lp.token_logprobs!.forEach((v, i) => {
      expect(v).toBeLessThanOrEqual(0);
      const top = lp.top_logprobs![i]!;
      expect(Object.keys(top)).toHaveLength(2);
      // Greedy: the sampled token is the most likely one.
      expect(top[lp.tokens![i]!]).toBe(v);
      expect(Math.max(...Object.values(top))).toBe(v);
    });
    expect(lp.text_offset).toEqual(lp.tokens!.map((_, i) => lp.tokens!.slice(0, i).join('').length));
  });
});

describe('logit_bias', () => {
  it('−100 on the greedy token takes another; +100 on a word makes it come', async () => {
    const greedy = words(await text(server, { prompt: PROMPT, max_tokens: 1, temperature: 0 }));
    const [id] = await tokenIds(` ${greedy[0]}`);
    const biased = words(await text(server, { prompt: PROMPT, max_tokens: 1, temperature: 0, logit_bias: { [id!]: -100 } }));
    expect(biased[0]).not.toBe(greedy[0]);
    const [omap] = await tokenIds(' omap');
    expect(words(await text(server, { prompt: PROMPT, max_tokens: 1, temperature: 0, logit_bias: { [omap!]: 100 } }))).toEqual(['omap']);
  });
});

describe('penalties', () => {
  it('repetition_penalty steers greedy output away from the words of the prompt', async () => {
    const inPrompt = (t: string) => words(t).filter((w) => words(ECHOING).includes(w)).length;
    const plain = await text(server, { prompt: ECHOING, max_tokens: 4, temperature: 0, ignore_eos: true });
    const penalised = await text(server, { prompt: ECHOING, max_tokens: 4, temperature: 0, ignore_eos: true, repetition_penalty: 1.5 });
    expect(inPrompt(plain)).toBeGreaterThan(0);
    expect(inPrompt(penalised)).toBeLessThan(inPrompt(plain));
  });

  it('frequency and presence penalties make a word the output keeps coming back to come less often', async () => {
    const [filing] = await tokenIds(' filing');
    const body = { prompt: PROMPT, max_tokens: 24, temperature: 0, ignore_eos: true, logit_bias: { [filing!]: 30 } };
    const favoured = count(words(await text(server, body)), 'filing');
    expect(favoured).toBeGreaterThan(2);
    for (const penalty of [{ frequency_penalty: 2 }, { presence_penalty: 2 }]) {
      expect(count(words(await text(server, { ...body, ...penalty })), 'filing'), JSON.stringify(penalty)).toBeLessThan(favoured);
    }
  });
});

describe('stop_token_ids and min_tokens', () => {
  it('a stop token id ends the answer with finish_reason "stop" (its text left out); min_tokens holds it back', async () => {
    const free = words(await text(server, { prompt: PROMPT, max_tokens: 6, temperature: 0, ignore_eos: true }));
    const [third] = await tokenIds(` ${free[2]}`);
    const stopped = await complete(server, { prompt: PROMPT, max_tokens: 6, temperature: 0, ignore_eos: true, stop_token_ids: [third] });
    expect(stopped.choices[0]!.finish_reason).toBe('stop');
    expect(words(stopped.choices[0]!.text)).toEqual(free.slice(0, 2));
    expect(stopped.usage!.completion_tokens).toBe(3);
    const [first] = await tokenIds(` ${free[0]}`);
    const early = await complete(server, { prompt: PROMPT, max_tokens: 6, temperature: 0, ignore_eos: true, stop_token_ids: [first] });
    expect(early.choices[0]!.finish_reason).toBe('stop');
    expect(early.usage!.completion_tokens).toBe(1);
    const held = await complete(server, { prompt: PROMPT, max_tokens: 6, temperature: 0, ignore_eos: true, stop_token_ids: [first], min_tokens: 3 });
    expect(held.usage!.completion_tokens).toBeGreaterThanOrEqual(3);
    expect(words(held.choices[0]!.text)[0]).not.toBe(free[0]);
    // Through chat too.
    const chat = await server.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, temperature: 0, stop_token_ids: [first], min_tokens: 2 } as any);
    expect(chat.usage!.completion_tokens).toBeGreaterThanOrEqual(2);
  });
});

describe('seed', () => {
  const sampled = { prompt: PROMPT, max_tokens: 10, temperature: 1.5, ignore_eos: true };

  it('the same seed gives the same text, other seeds other text, no seed a random one', async () => {
    const [a, b, c] = await Promise.all([text(server, { ...sampled, seed: 11 }), text(server, { ...sampled, seed: 11 }), text(server, { ...sampled, seed: 12 })]);
    expect(b).toBe(a);
    expect(c).not.toBe(a);
    // Without a seed, and with −1 (a random one), answers differ. The embedded model is confident:
    // one answer of ten tokens comes about a third of the time, so three draws all alike happen
    // about once in 27 runs; twelve draws all alike, about once in half a million.
    const draws = (body: Body) => Promise.all(Array.from({ length: 12 }, () => text(server, body)));
    expect(new Set(await draws(sampled)).size).toBeGreaterThan(1);
    expect(new Set(await draws({ ...sampled, seed: -1 })).size).toBeGreaterThan(1);
  });

  it('a 64-bit seed is taken exactly: 2^63 − 1 repeats, 2^63 − 2 (the same double) differs', async () => {
    // JSON numbers past 2^53 cannot be written from JavaScript numbers: the body is written by hand.
    const ask = async (seed: string) => {
      const r = await post(server.url, '/v1/completions', `{"prompt": "${PROMPT}", "max_tokens": 10, "temperature": 1.5, "ignore_eos": true, "seed": ${seed}}`);
      expect(r.status, r.body?.error?.message).toBe(200);
      return r.body.choices[0].text as string;
    };
    const top = await ask('9223372036854775807');
    expect(await ask('9223372036854775807')).toBe(top);
    expect(await ask('9223372036854775806')).not.toBe(top);
    // Through the client, a large seed that a double holds exactly repeats too.
    expect(await text(server, { ...sampled, seed: 2 ** 62 + 2 ** 40 })).toBe(await text(server, { ...sampled, seed: 2 ** 62 + 2 ** 40 }));
  });
});

describe('echo', () => {
  it('puts the prompt first, streamed or not; with logprobs, the prompt tokens as vLLM reports them', async () => {
    const plain = await text(server, { prompt: PROMPT, max_tokens: 3, temperature: 0 });
    const r = await complete(server, { prompt: PROMPT, max_tokens: 3, temperature: 0, echo: true, logprobs: 3 });
    expect(r.choices[0]!.text).toBe(PROMPT + plain);
    let streamed = '';
    for await (const chunk of (await server.client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 3, temperature: 0, echo: true, stream: true } as any)) as any) streamed += chunk.choices[0]?.text ?? '';
    expect(streamed).toBe(PROMPT + plain);
    const lp = r.choices[0]!.logprobs!;
    const prompt = await tokenIds(PROMPT);
    expect(lp.tokens).toHaveLength(prompt.length + 3);
    expect(lp.token_logprobs![0]).toBeNull();
    expect(lp.top_logprobs![0]).toBeNull();
    // Prompt token n's position holds the distribution the model gives after the first n tokens:
    // the same as a completion of those n tokens reports for its first token.
    const n = prompt.length - 1;
    const after = (await complete(server, { prompt: prompt.slice(0, n), max_tokens: 1, temperature: 0, logprobs: 3 })).choices[0]!.logprobs!;
    const best = (m: Record<string, number>) => Math.max(...Object.values(m));
    expect(best(lp.top_logprobs![n]!)).toBeCloseTo(best(after.top_logprobs![0]!), 4);
    expect(lp.token_logprobs![n]!).toBeLessThanOrEqual(best(lp.top_logprobs![n]!));
    expect(lp.top_logprobs![n]![lp.tokens![n]!]).toBe(lp.token_logprobs![n]);
  });
});

describe("generation_config.json's sampling defaults (--generation-config)", () => {
  it('apply where a request says nothing, and give way to what it says', async () => {
    // temperature 0, repetition_penalty 1.5 and max_new_tokens 4 from the file.
    const r = await complete(defaults, { prompt: ECHOING, ignore_eos: true });
    expect(r.usage!.completion_tokens).toBe(4);
    expect(r.choices[0]!.text).toBe(await text(server, { prompt: ECHOING, max_tokens: 4, temperature: 0, repetition_penalty: 1.5, ignore_eos: true }));
    // The request's own values win; max_new_tokens still caps max_tokens, as in vLLM.
    const own = await complete(defaults, { prompt: ECHOING, repetition_penalty: 1, max_tokens: 10, ignore_eos: true });
    expect(own.usage!.completion_tokens).toBe(4);
    expect(own.choices[0]!.text).toBe(await text(server, { prompt: ECHOING, max_tokens: 4, temperature: 0, ignore_eos: true }));
    const hot = { prompt: ECHOING, temperature: 1.5, repetition_penalty: 1, top_k: 20, seed: 3, max_tokens: 4, ignore_eos: true };
    expect(await text(defaults, { ...hot, top_k: undefined })).toBe(await text(server, hot));
  });
});

describe('validation: a 400 naming the field', () => {
  const completion = { model: MODEL, prompt: PROMPT, max_tokens: 4 };
  const chat = { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 };
  const cases: ['chat' | 'completions', Body, string][] = [
    ['completions', { presence_penalty: 2.5 }, 'presence_penalty'],
    ['chat', { frequency_penalty: -3 }, 'frequency_penalty'],
    ['completions', { repetition_penalty: 0 }, 'repetition_penalty'],
    ['chat', { logit_bias: { abc: 1 } }, 'logit_bias.abc'],
    ['completions', { logit_bias: { 5: 101 } }, 'logit_bias.5'],
    ['chat', { logit_bias: { 99999999: 1 } }, 'logit_bias.99999999'],
    ['completions', { stop_token_ids: [-1] }, 'stop_token_ids[0]'],
    ['chat', { stop_token_ids: [3, 99999999] }, 'stop_token_ids[1]'],
    ['completions', { min_tokens: -1 }, 'min_tokens'],
    ['completions', { min_tokens: 5 }, 'min_tokens'],
    ['chat', { seed: 1.5 }, 'seed'],
    ['completions', { logprobs: 21 }, 'logprobs'],
    ['completions', { logprobs: true }, 'logprobs'],
    ['completions', { echo: 'yes' }, 'echo'],
    ['chat', { logprobs: 2 }, 'logprobs'],
    ['chat', { logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    ['chat', { top_logprobs: 2 }, 'top_logprobs'],
  ];

  it('for each bad value', async () => {
    for (const [endpoint, extra, param] of cases) {
      const err = await (endpoint === 'chat' ? server.client.chat.completions.create({ ...chat, ...extra } as any) : server.client.completions.create({ ...completion, ...extra } as any)).catch((e: unknown) => e);
      expect(err, `${endpoint} ${JSON.stringify(extra)}`).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).param, `${endpoint} ${JSON.stringify(extra)}`).toBe(param);
    }
    const wide = await post(server.url, '/v1/completions', `{"prompt": "x", "max_tokens": 2, "seed": 9223372036854775808}`);
    expect(wide.status).toBe(400);
    expect(wide.body.error.param).toBe('seed');
  });
});
