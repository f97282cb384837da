import type { SamplingParams } from '@metrale/core';
import { ApiError } from './api-error.js';
import type { GenerationParams } from './generation.js';
import { refuseFields, inertValue, type FieldScope } from './refused-fields.js';
import { chatMessage, chatRequest, completionRequest, type ChatRequest, type CompletionRequest } from './request-schemas.js';

/** What a request is checked against. */
export interface ServedModel {
  readonly name: string;
  readonly maxModelLen: number;
  readonly vocabSize: number;
  readonly eosTokenIds: readonly number[];
}

type Common = CompletionRequest | ChatRequest;

/** 404 for a model this server does not serve (an absent `model` means the served one). */
export function checkModel(model: string | null | undefined, served: ServedModel): void {
  if (model != null && model !== served.name) {
    throw new ApiError(404, `the model '${model}' does not exist; this server serves '${served.name}'`, { param: 'model', code: 'model_not_found' });
  }
}

const keys = (shape: object): ReadonlySet<string> => new Set(Object.keys(shape));
const { is, empty, never } = inertValue;

const SCOPES = {
  completion: { implemented: keys(completionRequest.shape), own: { add_special_tokens: is(true) } },
  // vLLM's chat defaults: no special tokens added to the rendered template, the generation prompt on.
  chat: { implemented: keys(chatRequest.shape), own: { add_special_tokens: is(false), add_generation_prompt: is(true), echo: is(false) } },
  message: {
    implemented: keys(chatMessage.shape),
    // What OpenAI's clients send back with an assistant message of an earlier answer.
    own: { refusal: never, annotations: empty, function_call: never, audio: never, reasoning_content: never },
  },
  streamOptions: { implemented: new Set(['include_usage']), own: { include_obfuscation: is(false), continuous_usage_stats: is(false) } },
} satisfies Record<string, FieldScope>;

/** Fields metrale does not implement are refused by name (see refused-fields.ts), nested ones too. */
export function refuseUnsupported(body: CompletionRequest, endpoint: 'completion'): void;
export function refuseUnsupported(body: ChatRequest, endpoint: 'chat'): void;
export function refuseUnsupported(body: Common, endpoint: 'completion' | 'chat'): void {
  refuseFields(body, SCOPES[endpoint]);
  if (body.stream_options) refuseFields(body.stream_options, SCOPES.streamOptions, 'stream_options.');
  if (endpoint === 'chat') (body as ChatRequest).messages.forEach((m, i) => refuseFields(m, SCOPES.message, `messages[${i}].`));
}

/**
 * OpenAI's sampling fields as the engine's: temperature defaults to 1 (OpenAI's default) and 0
 * means greedy; top_k ≤ 0 and top_p = 1 switch those filters off.
 */
export function samplingOf(body: Common): { sampling?: SamplingParams; seed?: number } {
  const temperature = body.temperature ?? 1;
  const seed = body.seed ?? undefined;
  if (temperature === 0) return {};
  const sampling: SamplingParams = {
    temperature,
    ...(body.top_p != null && body.top_p < 1 ? { topP: body.top_p } : {}),
    ...(body.top_k != null && body.top_k > 0 ? { topK: body.top_k } : {}),
    ...(body.min_p != null && body.min_p > 0 ? { minP: body.min_p } : {}),
  };
  return { sampling, ...(seed !== undefined ? { seed } : {}) };
}

export function stopStrings(stop: string | readonly string[] | null | undefined): string[] {
  if (stop == null) return [];
  return (typeof stop === 'string' ? [stop] : [...stop]).filter((s) => s.length > 0);
}

/**
 * Tokens a prompt may generate: `asked` when given, else `fallback` (or what the context has left
 * when there is none); a prompt that does not fit is a 400 that names both numbers.
 */
export function completionBudget(
  promptTokens: number, asked: number | null | undefined, fallback: number | undefined, served: ServedModel, promptField: string, maxField: string,
): number {
  const limit = served.maxModelLen;
  if (promptTokens >= limit) {
    throw new ApiError(400, `This model's maximum context length is ${limit} tokens. However, the prompt has ${promptTokens} tokens, which leaves no room to generate. Please shorten the prompt.`, { param: promptField, code: 'context_length_exceeded' });
  }
  const maxTokens = asked ?? Math.min(fallback ?? Number.POSITIVE_INFINITY, limit - promptTokens);
  if (promptTokens + maxTokens > limit) {
    throw new ApiError(400, `This model's maximum context length is ${limit} tokens. However, you requested ${promptTokens + maxTokens} tokens (${promptTokens} in the prompt, ${maxTokens} in ${maxField}). Please reduce the length of the prompt or ${maxField}.`, { param: maxField, code: 'context_length_exceeded' });
  }
  return maxTokens;
}

/** Token-id prompts must lie inside the vocabulary. */
export function checkTokenIds(ids: readonly number[], served: ServedModel, field: string): void {
  const bad = ids.findIndex((t) => t >= served.vocabSize);
  if (bad >= 0) throw new ApiError(400, `${field}[${bad}]: token id ${ids[bad]} is outside the vocabulary (${served.vocabSize} tokens)`, { param: `${field}[${bad}]` });
}

/**
 * `n` choices per prompt: each prompt's generation `n` times, in OpenAI's order (prompt i's choices
 * at i·n … i·n + n − 1). With a seed, choice j samples with seed + j so that the choices differ and
 * a repeated request repeats them all.
 */
export function withChoices(params: readonly GenerationParams[], n: number | null | undefined): GenerationParams[] {
  const count = n ?? 1;
  return params.flatMap((p) => Array.from({ length: count }, (_, j) => (j > 0 && p.seed !== undefined ? { ...p, seed: p.seed + j } : p)));
}
