import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type ServeProcess } from '../support/serve-process.js';

// Structured output and tools through the official client, on the embedded model (random weights:
// whatever it writes is the grammar's doing). Greedy and short, as each token costs a CPU step.
const MODEL = 'metrale/embedded-qwen3-next';
let server: ServeProcess;
let client: OpenAI;

beforeAll(async () => {
  server = await startServer(['--max-model-len', '512']);
  await server.ready();
  client = server.client;
}, 60_000);

afterAll(async () => {
  expect(await server?.stop()).toBe(0);
});

const ask = [{ role: 'user' as const, content: 'Plan my trip.' }];

const WEATHER: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The forecast for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
      required: ['city', 'days'],
      additionalProperties: false,
    },
  },
};
const PICK: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: 'function',
  function: { name: 'pick', parameters: { type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['n'] } },
};

/** Throws unless `args` are valid arguments of get_weather. */
function checkWeather(args: unknown): void {
  const a = args as { city: unknown; days: unknown };
  expect(Object.keys(a).sort()).toEqual(['city', 'days']);
  expect(['Paris', 'Oslo']).toContain(a.city);
  expect(Number.isInteger(a.days) && (a.days as number) >= 1 && (a.days as number) <= 7).toBe(true);
}

async function badRequest(body: Record<string, unknown>): Promise<InstanceType<typeof OpenAI.BadRequestError>> {
  const err = await client.chat.completions.create({ model: MODEL, messages: ask, max_tokens: 4, ...body } as any).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(OpenAI.BadRequestError);
  return err as InstanceType<typeof OpenAI.BadRequestError>;
}

describe('response_format', () => {
  it('json_schema (strict): the answer parses and validates, enum and bounded integer alike', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, messages: ask, temperature: 0, max_tokens: 80,
      response_format: {
        type: 'json_schema',
        json_schema: {
          name: 'trip', strict: true,
          schema: {
            type: 'object',
            properties: { color: { type: 'string', enum: ['red', 'green', 'blue'] }, count: { type: 'integer', minimum: 1, maximum: 12 } },
            required: ['color', 'count'], additionalProperties: false,
          },
        },
      },
    });
    const choice = r.choices[0]!;
    expect(choice.finish_reason).toBe('stop');
    const answer = JSON.parse(choice.message.content!) as { color: string; count: number };
    expect(Object.keys(answer).sort()).toEqual(['color', 'count']);
    expect(['red', 'green', 'blue']).toContain(answer.color);
    expect(Number.isInteger(answer.count) && answer.count >= 1 && answer.count <= 12).toBe(true);
  }, 120_000);

  it('a schema the grammar engine refuses is a 400 naming it, with the reason', async () => {
    const err = await badRequest({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer', minimum: 5, maximum: 1 } } } });
    expect(err.param).toBe('response_format.json_schema.schema');
    expect(err.message).toMatch(/minimum greater than maximum/);
    const unknownKey = await badRequest({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {}, extra: 1 } } });
    expect(unknownKey.param).toBe('response_format.json_schema');
    // The server goes on serving structured requests after a refused one.
    const ok = await client.chat.completions.create({
      model: MODEL, messages: ask, temperature: 0, max_tokens: 20,
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'object', properties: { n: { enum: [1, 2] } }, required: ['n'] } } },
    });
    expect([1, 2]).toContain((JSON.parse(ok.choices[0]!.message.content!) as { n: number }).n);
  }, 120_000);
});

describe('tools', () => {
  it('tool_choice "required" gives a tool call with valid arguments and finish_reason "tool_calls"', async () => {
    // Greedy on random weights writes the call a character at a time: about a hundred CPU steps.
    // One call (parallel_tool_calls false): past a call the grammar allows another or the end, and
    // this model's end-of-sequence logit may lose to the newline that starts the next one.
    const r = await client.chat.completions.create({
      model: MODEL, messages: ask, temperature: 0, max_tokens: 120, tools: [WEATHER, PICK], tool_choice: 'required', parallel_tool_calls: false,
    }, { timeout: 170_000 });
    const choice = r.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    const calls = choice.message.tool_calls!;
    expect(calls).toHaveLength(1);
    for (const call of calls) {
      expect(call.type).toBe('function');
      expect(call.id).toMatch(/^call_/);
      const fn = (call as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall).function;
      expect(['get_weather', 'pick']).toContain(fn.name);
      if (fn.name === 'get_weather') checkWeather(JSON.parse(fn.arguments));
      else expect((JSON.parse(fn.arguments) as { n: number }).n).toBeGreaterThanOrEqual(1);
    }
  }, 180_000);

  it('a named tool choice streams one call of that tool as tool_calls deltas, ending with "tool_calls"', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL, messages: ask, temperature: 0, max_tokens: 80, tools: [WEATHER, PICK], stream: true,
      tool_choice: { type: 'function', function: { name: 'pick' } },
    }, { timeout: 170_000 });
    const calls: { name: string; arguments: string }[] = [];
    let finish: string | null = null;
    let content = '';
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      content += c.delta.content ?? '';
      for (const d of c.delta.tool_calls ?? []) {
        calls[d.index] ??= { name: '', arguments: '' };
        calls[d.index]!.name += d.function?.name ?? '';
        calls[d.index]!.arguments += d.function?.arguments ?? '';
      }
      finish = c.finish_reason ?? finish;
    }
    expect(content).toBe('');
    expect(finish).toBe('tool_calls');
    expect(calls).toHaveLength(1);
    expect(calls[0]!.name).toBe('pick');
    const n = (JSON.parse(calls[0]!.arguments) as { n: number }).n;
    expect(Number.isInteger(n) && n >= 1 && n <= 9).toBe(true);
  }, 180_000);

  it('tool_choice "auto" renders the tools into the prompt and parses nothing the model did not call', async () => {
    const plain = await client.chat.completions.create({ model: MODEL, messages: ask, temperature: 0, max_tokens: 4 });
    const r = await client.chat.completions.create({ model: MODEL, messages: ask, temperature: 0, max_tokens: 4, tools: [WEATHER] });
    // Qwen3's template lists the tools in a system block.
    expect(r.usage!.prompt_tokens).toBeGreaterThan(plain.usage!.prompt_tokens + 50);
    expect(r.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(r.choices[0]!.finish_reason).not.toBe('tool_calls');
  }, 60_000);

  it('takes a conversation with an earlier call and its answer', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, temperature: 0, max_tokens: 2, tools: [WEATHER],
      messages: [
        ...ask,
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo", "days": 2}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'rain' },
      ],
    });
    expect(r.choices).toHaveLength(1);
  }, 60_000);

  it('refuses unknown and duplicate tool names, a choice without tools, and a forced call with a JSON format, naming the field', async () => {
    expect((await badRequest({ tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'get_time' } } })).param).toBe('tool_choice.function.name');
    expect((await badRequest({ tools: [WEATHER, WEATHER] })).param).toBe('tools[1].function.name');
    expect((await badRequest({ tool_choice: 'required' })).param).toBe('tool_choice');
    expect((await badRequest({ tools: [WEATHER], tool_choice: 'required', response_format: { type: 'json_object' } })).param).toBe('response_format');
    expect((await badRequest({ tools: [{ type: 'function', function: { name: 'bad name!' } }] })).param).toBe('tools[0].function.name');
    const badArgs = await badRequest({ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'nope' } } }], tool_choice: { type: 'function', function: { name: 'f' } } });
    expect(badArgs.param).toBe('tools[0].function.parameters');
    expect(badArgs.message).toMatch(/Unsupported type "nope"/);
  }, 60_000);
});

describe('grammar compiles off the engine thread', () => {
  it('a new schema\'s compile does not stall a running stream: its gaps stay far under the compile', async () => {
    // A schema of 12 nested objects, new to this server: its compile takes seconds here.
    const properties: Record<string, unknown> = {};
    for (let i = 0; i < 12; i++) {
      properties[`item_${i}`] = {
        type: 'object',
        properties: { name: { type: 'string', maxLength: 24 }, size: { type: 'integer', minimum: 0, maximum: 999 }, kind: { enum: [`a${i}`, `b${i}`] } },
        required: ['name', 'size', 'kind'], additionalProperties: false,
      };
    }
    const schema = { type: 'object', properties, required: Object.keys(properties), additionalProperties: false };
    const stream = await client.completions.create({ model: MODEL, prompt: 'keep going', max_tokens: 440, temperature: 0, ignore_eos: true, stream: true } as any) as any;
    const arrivals: number[] = [];
    let window: { from: number; to: number } | undefined;
    let structured: Promise<OpenAI.Chat.Completions.ChatCompletion> | undefined;
    let warmup: Promise<unknown> | undefined;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.text) arrivals.push(performance.now());
      // First an unconstrained request of the same shape, so the batch of two has run once (its
      // first steps capture graphs): what follows measures the compile, not that warm-up.
      if (arrivals.length === 5 && !warmup) warmup = client.chat.completions.create({ model: MODEL, messages: ask, temperature: 0, max_tokens: 4 });
      if (arrivals.length >= 30 && !structured) {
        await warmup;
        const from = performance.now();
        structured = client.chat.completions.create({
          model: MODEL, messages: ask, temperature: 0, max_tokens: 4, response_format: { type: 'json_schema', json_schema: { name: 'wide', strict: true, schema } },
        });
        void structured.then(() => (window = { from, to: performance.now() }), () => undefined);
      }
    }
    const answer = await structured!;
    // Four tokens of what the schema forces first.
    const content = answer.choices[0]!.message.content!;
    expect(content.length).toBeGreaterThan(1);
    expect('{"item_0": {"name": "'.startsWith(content)).toBe(true);
    // The stream outlived the structured request, so the whole compile lies inside it.
    expect(window).toBeDefined();
    const { from, to } = window!;
    expect(arrivals[arrivals.length - 1]!).toBeGreaterThan(to);
    const during = arrivals.filter((t) => t >= from && t <= to);
    const gaps = during.slice(1).map((t, i) => t - during[i]!);
    const before = arrivals.filter((t) => t < from);
    const usual = before.slice(1).map((t, i) => t - before[i]!).sort((x, y) => x - y)[before.length >> 1]!;
    const worst = Math.max(...gaps);
    console.log(`structured request with a new schema: ${(to - from).toFixed(0)} ms (compile included); the stream meanwhile: ${during.length} tokens, worst gap ${worst.toFixed(0)} ms (median gap before ${usual.toFixed(1)} ms)`);
    expect(to - from).toBeGreaterThan(500);
    expect(during.length).toBeGreaterThan(10);
    expect(worst).toBeLessThan((to - from) / 4);
  }, 120_000);
});
