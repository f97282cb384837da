import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { embeddedTokenizerFiles, EMBEDDED_CONFIG } from '../../src/embedded/embedded-model.js';
import { GrammarEngine, GrammarEngineError } from '../../src/structured/grammar-engine.js';
import type { GrammarSpec } from '../../src/structured/grammar-spec.js';
import { readTokenizerVocabulary } from '../../src/structured/tokenizer-vocabulary.js';
import { HERMES_FORMAT, forcedToolCalls, glmFormat, type ToolDefinition } from '../../src/tools/tool-call-format.js';

// xgrammar over the embedded model's vocabulary (Qwen3's tokenizer, 151 669 tokens).
const V = EMBEDDED_CONFIG.vocab_size;
const EOS = [...EMBEDDED_CONFIG.eos_token_id];
const tokenizerPath = embeddedTokenizerFiles().tokenizer;
let engine: GrammarEngine;
let texts: string[];

/** Token text as the model would write it (byte-level: Ġ is a space, Ċ a newline). */
const plain = (s: string) => s.replace(/Ġ/g, ' ').replace(/Ċ/g, '\n');

const allowed = (mask: Int32Array, t: number) => ((mask[t >> 5]! >>> (t & 31)) & 1) === 1;

/**
 * Writes `text` through a constraint, always taking the longest allowed token that continues it,
 * and returns the time each mask took (ms). Fails when the constraint forbids the text.
 */
async function write(spec: GrammarSpec, text: string): Promise<{ ms: number[]; complete: boolean; endAllowsEos: boolean }> {
  const c = await engine.constraint(spec);
  const ms: number[] = [];
  let at = 0;
  try {
    for (;;) {
      const t0 = performance.now();
      const mask = c.allowedTokens();
      ms.push(performance.now() - t0);
      if (at === text.length) return { ms, complete: c.isComplete(), endAllowsEos: EOS.some((e) => allowed(mask, e)) && c.accept(EOS[0]!) && c.isComplete() };
      let best = -1;
      for (let t = 0; t < V; t++) if (allowed(mask, t) && texts[t]!.length > (best < 0 ? 0 : texts[best]!.length) && text.startsWith(texts[t]!, at)) best = t;
      if (best < 0) throw new Error(`the grammar allows no token for ${JSON.stringify(text.slice(at))}`);
      expect(c.accept(best)).toBe(true);
      at += texts[best]!.length;
    }
  } finally {
    c.release();
  }
}

beforeAll(() => {
  engine = new GrammarEngine({ tokenizerPath, vocabSize: V, stopTokenIds: EOS });
  texts = readTokenizerVocabulary(tokenizerPath, V).encoded.map(plain);
});

const SCHEMA = {
  type: 'object',
  properties: { color: { enum: ['red', 'green', 'blue'] }, count: { type: 'integer', minimum: 1, maximum: 12 } },
  required: ['color', 'count'],
  additionalProperties: false,
};

describe('xgrammar over the served vocabulary', () => {
  it('reads Qwen3\'s tokenizer as byte-level, every id filled', () => {
    const v = readTokenizerVocabulary(tokenizerPath, V);
    expect(v.vocabType).toBe('byte_level');
    expect(v.prependSpace).toBe(false);
    expect(v.encoded).toHaveLength(V);
    const json = JSON.parse(readFileSync(tokenizerPath, 'utf8')) as { added_tokens: { id: number; content: string }[] };
    expect(v.encoded[json.added_tokens.find((t) => t.content === '<tool_call>')!.id]).toBe('<tool_call>');
  });

  it('a JSON schema admits valid answers, ends with end-of-sequence only, and masks a step in well under a millisecond', async () => {
    const spec: GrammarSpec = { kind: 'json_schema', schema: JSON.stringify(SCHEMA) };
    const t0 = performance.now();
    await engine.prepare(spec);
    const compileMs = performance.now() - t0;
    const t1 = performance.now();
    await engine.prepare(spec);
    // Compiled once: the second time is a cache hit.
    expect(performance.now() - t1).toBeLessThan(50);
    const { ms, complete, endAllowsEos } = await write(spec, '{"color": "green", "count": 11}');
    expect(complete).toBe(false);
    expect(endAllowsEos).toBe(true);
    const sorted = [...ms].sort((a, b) => a - b);
    const median = sorted[sorted.length >> 1]!;
    console.log(`json_schema: compile ${compileMs.toFixed(0)} ms (vocabulary included), ${ms.length} masks, median ${median.toFixed(3)} ms, max ${sorted.at(-1)!.toFixed(3)} ms`);
    expect(median).toBeLessThan(2);
  }, 120_000);

  it('the schema forbids what it does not allow: a value out of range, a colour not in the enum, an extra property', async () => {
    const spec: GrammarSpec = { kind: 'json_schema', schema: JSON.stringify(SCHEMA) };
    for (const bad of ['{"color": "green", "count": 13}', '{"color": "pink"', '{"color": "red", "count": 1, "x"']) {
      await expect(write(spec, bad)).rejects.toThrow(/allows no token/);
    }
  }, 60_000);

  it('rolls back: after drafts are taken back, the constraint allows what it allowed before them', async () => {
    const c = await engine.constraint({ kind: 'json_schema', schema: JSON.stringify(SCHEMA) });
    try {
      const id = (text: string) => texts.indexOf(text);
      expect(c.accept(id('{"'))).toBe(true);
      const before = c.allowedTokens();
      for (const t of ['color', '":', ' "']) expect(c.accept(id(t))).toBe(true);
      expect(c.allowedTokens()).not.toEqual(before);
      c.rollback(3);
      expect(c.allowedTokens()).toEqual(before);
      // A token the grammar forbids is refused and moves nothing.
      expect(c.accept(id('}'))).toBe(false);
      expect(c.allowedTokens()).toEqual(before);
    } finally {
      c.release();
    }
  }, 60_000);

  it('json_object admits any object and nothing else', async () => {
    expect((await write({ kind: 'json_object' }, '{"a": [1, {"b": null}], "c": "x"}')).endAllowsEos).toBe(true);
    await expect(write({ kind: 'json_object' }, '[1]')).rejects.toThrow(/allows no token/);
  }, 60_000);

  it('a bad schema is refused with xgrammar\'s reason, and later schemas still compile', async () => {
    await expect(engine.prepare({ kind: 'json_schema', schema: '{"type": "foo"}' })).rejects.toThrow(GrammarEngineError);
    await expect(engine.prepare({ kind: 'json_schema', schema: '{"type": "integer", "minimum": 5, "maximum": 1}' })).rejects.toThrow(/minimum greater than maximum/);
    await expect(engine.prepare({ kind: 'json_schema', schema: '{"$ref": "#/nope"}' })).rejects.toThrow(/Cannot find field nope/);
    const after: GrammarSpec = { kind: 'json_schema', schema: '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}' };
    expect((await write(after, '{"n": 42}')).endAllowsEos).toBe(true);
  }, 60_000);

  it('a structural tag forces a tool call in the template\'s format, with its arguments\' schema', async () => {
    const tag = JSON.stringify({
      type: 'structural_tag',
      format: {
        type: 'tag', begin: '<tool_call>\n{"name": "get_weather", "arguments": ', end: '}\n</tool_call>',
        content: { type: 'json_schema', json_schema: { type: 'object', properties: { days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['days'] } },
      },
    });
    expect((await write({ kind: 'structural_tag', tag }, '<tool_call>\n{"name": "get_weather", "arguments": {"days": 3}}\n</tool_call>')).endAllowsEos).toBe(true);
    await expect(write({ kind: 'structural_tag', tag }, '<tool_call>\n{"name": "get_time"')).rejects.toThrow(/allows no token/);
  }, 60_000);

  const weather: ToolDefinition = {
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1, maximum: 7 }, units: { enum: ['c', 'f'] } }, required: ['city', 'days'] },
  };
  const time: ToolDefinition = { name: 'get_time', parameters: { type: 'object', properties: {} } };

  it('forced Hermes calls: one or more of the offered tools, joined as the template joins them', async () => {
    const any: GrammarSpec = { kind: 'structural_tag', tag: forcedToolCalls(HERMES_FORMAT, [weather, time], false) };
    const one = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>';
    expect((await write(any, one)).endAllowsEos).toBe(true);
    expect((await write(any, `${one}\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>`)).endAllowsEos).toBe(true);
    // Text instead of a call, a day out of range, or a tool not offered: refused.
    for (const bad of ['Sure', '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 9', '<tool_call>\n{"name": "get_date"']) {
      await expect(write(any, bad)).rejects.toThrow(/allows no token/);
    }
    const single: GrammarSpec = { kind: 'structural_tag', tag: forcedToolCalls(HERMES_FORMAT, [weather, time], true) };
    expect((await write(single, one)).endAllowsEos).toBe(true);
    await expect(write(single, `${one}\n<tool_call>`)).rejects.toThrow(/allows no token/);
  }, 120_000);

  it('forced GLM calls: raw strings, JSON numbers, enum values, optional arguments, both layouts', async () => {
    for (const spaced of [true, false]) {
      const nl = spaced ? '\n' : '';
      const spec: GrammarSpec = { kind: 'structural_tag', tag: forcedToolCalls(glmFormat(spaced), [weather], true) };
      const arg = (k: string, v: string) => `<arg_key>${k}</arg_key>${nl}<arg_value>${v}</arg_value>${nl}`;
      expect((await write(spec, `<tool_call>get_weather${nl}${arg('city', 'New York')}${arg('days', '3')}</tool_call>`)).endAllowsEos).toBe(true);
      expect((await write(spec, `<tool_call>get_weather${nl}${arg('city', 'Oslo')}${arg('days', '7')}${arg('units', 'f')}</tool_call>`)).endAllowsEos).toBe(true);
      await expect(write(spec, `<tool_call>get_weather${nl}${arg('city', 'Oslo')}${arg('days', '7')}${arg('units', 'k')}`)).rejects.toThrow(/allows no token/);
      await expect(write(spec, `<tool_call>get_weather${nl}${arg('days', '3')}`)).rejects.toThrow(/allows no token/);
    }
  }, 120_000);
});
