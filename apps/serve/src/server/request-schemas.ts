import { MAX_LOGPROBS } from '@metrale/core';
import { z } from 'zod';
import { ApiError } from './api-error.js';

// The request bodies the server accepts, as OpenAI documents them (plus vLLM's top_k, min_p,
// repetition_penalty, min_tokens, stop_token_ids and ignore_eos). The objects keep fields they do
// not declare so that refused-fields.ts can refuse them by name: nothing a client asks for is
// silently dropped.

const tokenIds = z.array(z.number().int().min(0)).min(1);

const INT64 = 2n ** 63n;
/** Any 64-bit integer (exact-seed.ts reads one past 2^53 as a bigint); −1 asks for a random one, as in vLLM. */
const seed = z.union([z.number().int(), z.bigint()]).refine((v) => BigInt(v) >= -INT64 && BigInt(v) < INT64, 'must be a 64-bit integer');
const penalty = z.number().min(-2).max(2).nullish();

const sampling = {
  model: z.string().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  seed: seed.nullish(),
  presence_penalty: penalty,
  frequency_penalty: penalty,
  /** vLLM's extension: > 1 makes tokens of the prompt and the output less likely. */
  repetition_penalty: z.number().gt(0).nullish(),
  /** Token id (as a string) → a bias in [-100, 100] added to its logit. */
  logit_bias: z.record(z.string().regex(/^\d+$/, 'keys must be token ids'), z.number().min(-100).max(100)).nullish(),
  /** vLLM's extensions: more tokens that end the output (it keeps them), and how many come before any stop token may. */
  stop_token_ids: z.array(z.number().int().min(0)).nullish(),
  min_tokens: z.number().int().min(0).nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(16)]).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
  n: z.number().int().min(1).max(16).nullish(),
  /** vLLM's extension: generate up to max_tokens whatever the model's end-of-sequence says. */
  ignore_eos: z.boolean().nullish(),
};

export const completionRequest = z.looseObject({
  ...sampling,
  prompt: z.union([z.string(), z.array(z.string()).min(1), tokenIds, z.array(tokenIds).min(1)]),
  max_tokens: z.number().int().min(1).nullish(),
  /** The logprobs of each token and its position's N most likely tokens. */
  logprobs: z.number().int().min(0).max(MAX_LOGPROBS).nullish(),
  /** The prompt's text before the answer's (with its logprobs, when `logprobs` is set). */
  echo: z.boolean().nullish(),
});

const textPart = z.object({ type: z.literal('text'), text: z.string() });

// Structured output and tools, as OpenAI documents them; nested objects refuse keys they do not know.
const jsonSchemaObject = z.record(z.string(), z.unknown());
const toolName = z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1 to 64 letters, digits, underscores, dots or dashes');

const responseFormat = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('text') }),
  z.strictObject({ type: z.literal('json_object') }),
  z.strictObject({
    type: z.literal('json_schema'),
    json_schema: z.strictObject({ name: toolName, description: z.string().nullish(), schema: jsonSchemaObject, strict: z.boolean().nullish() }),
  }),
]);

const tool = z.strictObject({
  type: z.literal('function'),
  function: z.strictObject({ name: toolName, description: z.string().nullish(), parameters: jsonSchemaObject.nullish(), strict: z.boolean().nullish() }),
});

const toolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.strictObject({ type: z.literal('function'), function: z.strictObject({ name: z.string() }) }),
]);

/** A call in an earlier assistant message, sent back by the client. */
const messageToolCall = z.strictObject({
  id: z.string(),
  type: z.literal('function'),
  function: z.strictObject({ name: z.string(), arguments: z.string() }),
});

export const chatMessage = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
  content: z.union([z.string(), z.array(textPart)]).nullish(),
  name: z.string().nullish(),
  tool_calls: z.array(messageToolCall).nullish(),
  tool_call_id: z.string().nullish(),
});

export const chatRequest = z.looseObject({
  ...sampling,
  messages: z.array(chatMessage).min(1),
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  response_format: responseFormat.nullish(),
  tools: z.array(tool).max(128).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  logprobs: z.boolean().nullish(),
  /** With `logprobs`: each position's N most likely tokens too. */
  top_logprobs: z.number().int().min(0).max(MAX_LOGPROBS).nullish(),
});

export const tokenizeRequest = z.union([
  z.object({ model: z.string().nullish(), prompt: z.string(), add_special_tokens: z.boolean().nullish() }),
  z.object({ model: z.string().nullish(), messages: z.array(chatMessage).min(1), add_generation_prompt: z.boolean().nullish() }),
]);

export const detokenizeRequest = z.object({ model: z.string().nullish(), tokens: z.array(z.number().int().min(0)) });

export type CompletionRequest = z.infer<typeof completionRequest>;
export type ChatRequest = z.infer<typeof chatRequest>;
export type ChatMessage = z.infer<typeof chatMessage>;
export type ChatTool = z.infer<typeof tool>;
export type TokenizeRequest = z.infer<typeof tokenizeRequest>;
export type DetokenizeRequest = z.infer<typeof detokenizeRequest>;

/** `messages.0.content` → `messages[0].content`. */
function fieldName(path: readonly PropertyKey[]): string {
  return path.reduce<string>((acc, key) => (typeof key === 'number' ? `${acc}[${key}]` : acc ? `${acc}.${String(key)}` : String(key)), '');
}

/** The body parsed by `schema`, or a 400 naming the first field at fault. */
export function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new ApiError(400, 'the request body must be a JSON object');
  }
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  // A union reports its branches' issues; the deepest one names the field best.
  const issues = result.error.issues.flatMap((i) => ('errors' in i && Array.isArray(i.errors) ? (i.errors as z.core.$ZodIssue[][]).flat().map((e) => ({ ...e, path: [...i.path, ...e.path] })) : [i]));
  const issue = issues.reduce((a, b) => (b.path.length > a.path.length ? b : a), issues[0] ?? result.error.issues[0]!);
  const param = fieldName(issue.path);
  const missing = issue.code === 'invalid_type' && /received undefined/.test(issue.message);
  throw new ApiError(400, missing ? `${param} is required` : `${param || 'body'}: ${issue.message}`, { param: param || null });
}
