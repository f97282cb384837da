import { GrammarRefusedError, type EngineClient } from '../engine/engine-client.js';
import type { GrammarSpec } from '../structured/grammar-spec.js';
import { forcedToolCalls, type ToolCallFormat, type ToolDefinition } from '../tools/tool-call-format.js';
import { ApiError } from './api-error.js';
import type { ChatRequest } from './request-schemas.js';

/** What a chat request's `response_format`, `tools` and `tool_choice` ask of its answer. */
export interface ChatStructure {
  /** OpenAI's tool objects for the chat template (absent: no tools). */
  readonly templateTools?: readonly unknown[];
  /** The grammar the output follows, and the request field a refusal of it names. */
  readonly grammar?: { readonly spec: GrammarSpec; readonly field: string };
  /** Tool calls are parsed out of the answer (tool_choice auto, required or named). */
  readonly tools?: { readonly format: ToolCallFormat; readonly definitions: readonly ToolDefinition[] };
}

const NO_PARAMETERS = { type: 'object', properties: {} } as const;

/**
 * Reads the structure fields of a chat request (400s naming the field: duplicate or unknown tool
 * names, a tool choice without tools, a forced tool call together with a JSON response format).
 * `json_object` and `json_schema` constrain the answer to JSON; `required` forces one or more
 * calls of the offered tools (one, with `parallel_tool_calls: false`) and a named choice one call
 * of that tool, in `format` (the template's), arguments held to the tool's schema; `auto` lets the
 * model choose and parses what it wrote.
 */
export function chatStructure(body: ChatRequest, format: ToolCallFormat): ChatStructure {
  const offered = body.tools ?? [];
  const definitions: ToolDefinition[] = offered.map((t) => ({
    name: t.function.name,
    ...(t.function.description != null ? { description: t.function.description } : {}),
    parameters: t.function.parameters ?? NO_PARAMETERS,
  }));
  const seen = new Map<string, number>();
  definitions.forEach((d, i) => {
    if (seen.has(d.name)) throw new ApiError(400, `tools[${i}].function.name: '${d.name}' is offered twice (also tools[${seen.get(d.name)}]); tool names must be unique`, { param: `tools[${i}].function.name` });
    seen.set(d.name, i);
  });
  const choice = body.tool_choice ?? (definitions.length > 0 ? 'auto' : 'none');
  const forced = choice !== 'none' && choice !== 'auto';
  if (forced && definitions.length === 0) {
    throw new ApiError(400, 'tool_choice: a required or named tool choice needs tools; send `tools`, or tool_choice "none"', { param: 'tool_choice' });
  }
  const responseType = body.response_format?.type;
  if (forced && (responseType === 'json_object' || responseType === 'json_schema')) {
    throw new ApiError(400, `response_format: a ${responseType} answer cannot also be a forced tool call; drop one of response_format and tool_choice`, { param: 'response_format' });
  }
  let grammar: ChatStructure['grammar'];
  if (typeof choice === 'object') {
    const index = definitions.findIndex((d) => d.name === choice.function.name);
    if (index < 0) {
      throw new ApiError(400, `tool_choice.function.name: no tool named '${choice.function.name}' is offered (tools: ${definitions.map((d) => d.name).join(', ')})`, { param: 'tool_choice.function.name' });
    }
    grammar = { spec: { kind: 'structural_tag', tag: forcedToolCalls(format, [definitions[index]!], true) }, field: `tools[${index}].function.parameters` };
  } else if (choice === 'required') {
    grammar = { spec: { kind: 'structural_tag', tag: forcedToolCalls(format, definitions, body.parallel_tool_calls === false) }, field: 'tools' };
  } else if (body.response_format?.type === 'json_schema') {
    grammar = { spec: { kind: 'json_schema', schema: JSON.stringify(body.response_format.json_schema.schema) }, field: 'response_format.json_schema.schema' };
  } else if (body.response_format?.type === 'json_object') {
    grammar = { spec: { kind: 'json_object' }, field: 'response_format' };
  }
  return {
    ...(offered.length > 0 ? { templateTools: offered } : {}),
    ...(grammar ? { grammar } : {}),
    ...(definitions.length > 0 && choice !== 'none' ? { tools: { format, definitions } } : {}),
  };
}

/** Has the engine compile the request's grammar; a refusal is a 400 naming its field, with xgrammar's reason. */
export async function prepareGrammar(engine: EngineClient, grammar: NonNullable<ChatStructure['grammar']>): Promise<void> {
  try {
    await engine.prepareGrammar(grammar.spec);
  } catch (error) {
    // The engine stopped or failed while it compiled: not the request's fault.
    if (!(error instanceof GrammarRefusedError)) throw new ApiError(503, `the grammar could not be compiled: ${(error as Error).message}`, { code: 'shutting_down' });
    throw new ApiError(400, `${grammar.field}: the grammar engine cannot use it: ${error.message}`, { param: grammar.field });
  }
}
