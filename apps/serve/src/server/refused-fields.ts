import { ApiError } from './api-error.js';

// A field the server does not implement is refused by name, never silently dropped: a client
// that asks for best_of and gets an answer without it would trust an answer it did not get.
// A value that asks for nothing (a length_penalty of 1, `use_beam_search: false`, an empty `tools`) is the same
// request as no field at all, and clients send such defaults, so those values pass.

/** True when the value asks for nothing beyond what the field's absence gives. */
type Inert = (value: unknown) => boolean;

const is = (...values: unknown[]): Inert => (v) => values.includes(v);
const empty: Inert = (v) => (Array.isArray(v) && v.length === 0) || (v !== null && typeof v === 'object' && Object.keys(v).length === 0);
const never: Inert = () => false;
const any: Inert = () => true;

/**
 * Fields of OpenAI's and vLLM's request bodies that metrale does not implement (yet), with the
 * values that change nothing. `null` always passes (OpenAI's clients send it for "default").
 */
const NOT_IMPLEMENTED: Readonly<Record<string, Inert>> = {
  // OpenAI
  top_logprobs: is(0),
  best_of: is(1),
  suffix: is(''),
  // Chat implements tools, tool_choice and response_format (its schema's keys); completions does not.
  tools: empty,
  tool_choice: is('none', 'auto'),
  functions: empty,
  function_call: is('none', 'auto'),
  response_format: (v) => v !== null && typeof v === 'object' && (v as { type?: unknown }).type === 'text' && Object.keys(v).length === 1,
  modalities: (v) => Array.isArray(v) && v.length === 1 && v[0] === 'text',
  audio: never,
  prediction: never,
  reasoning_effort: never,
  verbosity: never,
  web_search_options: never,
  store: is(false),
  service_tier: is('auto', 'default'),
  // vLLM's extensions
  length_penalty: is(1),
  include_stop_str_in_output: is(false),
  skip_special_tokens: is(true),
  spaces_between_special_tokens: is(true),
  use_beam_search: is(false),
  prompt_logprobs: never,
  allowed_token_ids: never,
  bad_words: empty,
  truncate_prompt_tokens: never,
  guided_json: never,
  guided_regex: never,
  guided_choice: never,
  guided_grammar: never,
  guided_decoding_backend: never,
  guided_whitespace_pattern: never,
  structural_tag: never,
  structured_outputs: never,
  logits_processors: empty,
  continue_final_message: is(false),
  chat_template: never,
  chat_template_kwargs: empty,
  documents: empty,
  mm_processor_kwargs: empty,
  return_tokens_as_token_ids: is(false),
  return_token_ids: is(false),
  priority: is(0),
  cache_salt: never,
};

/**
 * Fields that change nothing about the answer, accepted whatever their value: identifiers and
 * hints for OpenAI's own bookkeeping (`metadata` only matters with `store`, refused above;
 * `parallel_tool_calls` only with `tools`, which completions refuses and chat implements).
 */
const IGNORABLE: Readonly<Record<string, Inert>> = {
  user: any,
  metadata: any,
  safety_identifier: any,
  prompt_cache_key: any,
  prompt_cache_retention: any,
  parallel_tool_calls: any,
};

/** Where a body's fields are checked: the fields it implements, and extra inert values of its own. */
export interface FieldScope {
  /** Fields the endpoint implements (its schema's keys). */
  readonly implemented: ReadonlySet<string>;
  /** Endpoint-specific fields and their inert values (chat's add_special_tokens defaults to false). */
  readonly own?: Readonly<Record<string, Inert>>;
}

/**
 * 400 for the first field of `body` the endpoint does not implement, named as `prefix + field`:
 * a known one unless its value asks for nothing, an unknown one always (OpenAI refuses
 * "Unrecognized request argument supplied" too).
 */
export function refuseFields(body: Readonly<Record<string, unknown>>, scope: FieldScope, prefix = ''): void {
  for (const [field, value] of Object.entries(body)) {
    if (scope.implemented.has(field) || value === null || value === undefined) continue;
    const param = `${prefix}${field}`;
    const inert = scope.own?.[field] ?? NOT_IMPLEMENTED[field] ?? IGNORABLE[field];
    if (!inert) {
      throw new ApiError(400, `Unrecognized request argument supplied: ${param}. This server does not know the field; remove it from the request.`, { param, code: 'unsupported_parameter' });
    }
    if (!inert(value)) {
      throw new ApiError(400, `${param} is not supported by this server yet; remove it from the request (or send its default).`, { param, code: 'unsupported_parameter' });
    }
  }
}

export const inertValue = { is, empty, never, any };
