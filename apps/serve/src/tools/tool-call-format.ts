/** A tool a chat request offers (OpenAI's `tools[i].function`), its parameters a JSON schema. */
export interface ToolDefinition {
  readonly name: string;
  readonly description?: string;
  readonly parameters: Readonly<Record<string, unknown>>;
}

/** A call the model made: the tool's name and its arguments as JSON text (OpenAI's `function`). */
export interface ParsedToolCall {
  readonly name: string;
  readonly arguments: string;
}

/** An xgrammar structural-tag format (see @mlc-ai/web-xgrammar's structural_tag.d.ts). */
export type StructuralFormat = Record<string, unknown>;

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

/**
 * How a model's chat template writes tool calls: `<tool_call>` blocks, each holding one call in
 * the family's own syntax. It parses them out of generated text and, for `tool_choice` required
 * or named, builds the grammar that makes the model write them.
 */
export interface ToolCallFormat {
  readonly name: 'hermes' | 'glm';
  readonly open: string;
  readonly close: string;
  /** One call from the text between `open` and `close`; undefined when it is not one. */
  parseCall(inner: string, tools: readonly ToolDefinition[]): ParsedToolCall | undefined;
  /** The structural-tag format of one call of `tool`, arguments held to its schema. */
  callTag(tool: ToolDefinition): StructuralFormat;
  /** What the template puts between two calls. */
  readonly separator: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * Qwen3 and Qwen3-Next (the Hermes form): `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`,
 * the arguments a JSON object written with `tojson`.
 */
export const HERMES_FORMAT: ToolCallFormat = {
  name: 'hermes',
  open: OPEN,
  close: CLOSE,
  separator: '\n',
  parseCall(inner) {
    let call: unknown;
    try {
      call = JSON.parse(inner.trim());
    } catch {
      return undefined;
    }
    if (!isObject(call) || typeof call.name !== 'string') return undefined;
    const args = call.arguments ?? call.parameters ?? {};
    return { name: call.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) };
  },
  callTag(tool) {
    return {
      type: 'tag',
      begin: `${OPEN}\n{"name": ${JSON.stringify(tool.name)}, "arguments": `,
      content: { type: 'json_schema', json_schema: tool.parameters },
      end: `}\n${CLOSE}`,
    };
  },
};

/** The properties of a tool's parameters, in the schema's order, with which are required. */
function properties(tool: ToolDefinition): { key: string; schema: Record<string, unknown>; required: boolean }[] {
  const props = isObject(tool.parameters.properties) ? tool.parameters.properties : {};
  const required = new Set(Array.isArray(tool.parameters.required) ? tool.parameters.required.filter((r): r is string => typeof r === 'string') : []);
  return Object.entries(props).map(([key, schema]) => ({ key, schema: isObject(schema) ? schema : {}, required: required.has(key) }));
}

/** GLM writes a string argument as it is and anything else as JSON (its template's `v | tojson if v is not string`). */
const isStringSchema = (schema: Readonly<Record<string, unknown>>): boolean =>
  schema.type === 'string' || (Array.isArray(schema.enum) && schema.enum.length > 0 && schema.enum.every((v) => typeof v === 'string'));

/**
 * GLM-4.5, GLM-4.7 and GLM-5: `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`,
 * with a newline after the name and around each tag in GLM-4.5's template (`spaced`), none in
 * the later ones'. A string argument is written raw, any other as JSON.
 */
export function glmFormat(spaced: boolean): ToolCallFormat {
  const nl = spaced ? '\n' : '';
  const argValue = (schema: Record<string, unknown>): StructuralFormat => {
    if (Array.isArray(schema.enum) && isStringSchema(schema)) return { type: 'or', elements: (schema.enum as string[]).map((value) => ({ type: 'const_string', value })) };
    // A raw string runs up to the closing tag, so it holds no '<'.
    if (isStringSchema(schema)) return { type: 'regex', pattern: '[^<]*' };
    return { type: 'json_schema', json_schema: schema };
  };
  return {
    name: 'glm',
    open: OPEN,
    close: CLOSE,
    separator: nl,
    parseCall(inner, tools) {
      const at = inner.search(/\n|<arg_key>/);
      const name = (at < 0 ? inner : inner.slice(0, at)).trim();
      if (!name) return undefined;
      const tool = tools.find((t) => t.name === name);
      const types = new Map(tool ? properties(tool).map((p) => [p.key, p.schema]) : []);
      const args: Record<string, unknown> = {};
      for (const m of inner.slice(at < 0 ? inner.length : at).matchAll(/<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*?)<\/arg_value>/g)) {
        const key = m[1]!.trim();
        const raw = m[2]!;
        const schema = types.get(key);
        if (schema && isStringSchema(schema)) args[key] = raw;
        else {
          try {
            args[key] = JSON.parse(raw);
          } catch {
            args[key] = raw;
          }
        }
      }
      return { name, arguments: JSON.stringify(args) };
    },
    callTag(tool) {
      const elements: StructuralFormat[] = [];
      for (const p of properties(tool)) {
        const arg: StructuralFormat = {
          type: 'sequence',
          elements: [
            { type: 'const_string', value: `<arg_key>${p.key}</arg_key>${nl}<arg_value>` },
            argValue(p.schema),
            { type: 'const_string', value: `</arg_value>${nl}` },
          ],
        };
        elements.push(p.required ? arg : { type: 'or', elements: [arg, { type: 'grammar', grammar: 'root ::= ""' }] });
      }
      // A tool without parameters: the name, then the closing tag.
      const content: StructuralFormat = elements.length > 0 ? { type: 'sequence', elements } : { type: 'grammar', grammar: 'root ::= ""' };
      return { type: 'tag', begin: `${OPEN}${tool.name}${nl}`, content, end: CLOSE };
    },
  };
}

/**
 * The format of the served model's template: GLM's when the template writes `<arg_key>` tags,
 * Hermes's when it writes `<tool_call>` otherwise; without a template, by architecture
 * (`glm_moe_dsa` → GLM, anything else → Hermes, as Qwen3-Next).
 */
export function toolCallFormatFor(template: string | undefined, modelType: string): ToolCallFormat {
  if (template?.includes('<arg_key>')) return glmFormat(/<\/arg_key>\s*\\n|<\/arg_key>\n/.test(template));
  if (template?.includes(OPEN)) return HERMES_FORMAT;
  return modelType.startsWith('glm') ? glmFormat(false) : HERMES_FORMAT;
}

/** The calls in a finished output and the text before the first; no calls when a block does not parse (the text stays content). */
export function parseToolCalls(format: ToolCallFormat, text: string, tools: readonly ToolDefinition[]): { content: string; calls: ParsedToolCall[] } {
  const first = text.indexOf(format.open);
  if (first < 0) return { content: text, calls: [] };
  const calls: ParsedToolCall[] = [];
  let at = first;
  while (at >= 0) {
    const end = text.indexOf(format.close, at + format.open.length);
    if (end < 0) return { content: text, calls: [] };
    const call = format.parseCall(text.slice(at + format.open.length, end), tools);
    if (!call) return { content: text, calls: [] };
    calls.push(call);
    at = text.indexOf(format.open, end + format.close.length);
  }
  return { content: text.slice(0, first), calls };
}

/**
 * The structural tag that forces calls: of any of `tools` (`required`; one or more, joined as the
 * template joins them, unless `single`), or of the one named. A format that joins calls with
 * nothing (GLM-4.7, GLM-5) is held to one call: xgrammar's repeated tags need a separator.
 */
export function forcedToolCalls(format: ToolCallFormat, tools: readonly ToolDefinition[], single: boolean): string {
  const tags = tools.map((t) => format.callTag(t));
  const one = single || format.separator === '';
  const body: StructuralFormat = tags.length === 1 && one
    ? tags[0]!
    : one ? { type: 'or', elements: tags } : { type: 'tags_with_separator', tags, separator: format.separator, at_least_one: true, stop_after_first: false };
  return JSON.stringify({ type: 'structural_tag', format: body });
}
