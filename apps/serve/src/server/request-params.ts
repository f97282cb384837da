import type { SamplingParams, Seed } from '@metrale/core';
import type { SamplingDefaults } from '../engine/generation-defaults.js';
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
  /** The model's generation_config.json defaults that requests override. */
  readonly samplingDefaults: SamplingDefaults;
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

/** vLLM raises a temperature this close to 0 (but not 0) to this, away from overflow. */
const MIN_TEMPERATURE = 0.01;

/** A token id field's value, or a 400 naming `field` when the vocabulary has no such token. */
function tokenInVocab(token: number, served: ServedModel, field: string): number {
  if (token >= served.vocabSize) throw new ApiError(400, `${field}: token id ${token} is outside the vocabulary (${served.vocabSize} tokens)`, { param: field });
  return token;
}

/**
 * OpenAI's and vLLM's sampling fields as the engine's. Each field a request leaves out takes the
 * model's generation_config.json value (vLLM's `--generation-config auto`), else OpenAI's default:
 * temperature 1 (0 is greedy), top_p 1, top_k and min_p off, penalties off. A seed of −1 or none
 * asks for a random one (the engine draws it).
 */
export function samplingOf(body: Common, served: ServedModel): { sampling?: SamplingParams; seed?: Seed } {
  const d = served.samplingDefaults;
  let temperature = body.temperature ?? d.temperature ?? 1;
  if (temperature > 0 && temperature < MIN_TEMPERATURE) temperature = MIN_TEMPERATURE;
  const topP = body.top_p ?? d.top_p ?? 1;
  const topK = body.top_k ?? d.top_k ?? 0;
  const minP = body.min_p ?? d.min_p ?? 0;
  const repetition = body.repetition_penalty ?? d.repetition_penalty ?? 1;
  const presence = body.presence_penalty ?? 0;
  const frequency = body.frequency_penalty ?? 0;
  const bias = new Map(Object.entries(body.logit_bias ?? {}).map(([key, v]) => [tokenInVocab(Number(key), served, `logit_bias.${key}`), v]));
  const minTokens = body.min_tokens ?? 0;
  const sampling: SamplingParams = {
    ...(temperature > 0 ? { temperature } : {}),
    ...(temperature > 0 && topP < 1 ? { topP } : {}),
    ...(temperature > 0 && topK > 0 ? { topK } : {}),
    ...(temperature > 0 && minP > 0 ? { minP } : {}),
    ...(repetition !== 1 ? { repetitionPenalty: repetition } : {}),
    ...(presence !== 0 ? { presencePenalty: presence } : {}),
    ...(frequency !== 0 ? { frequencyPenalty: frequency } : {}),
    ...(bias.size > 0 ? { logitBias: bias } : {}),
    ...(minTokens > 0 ? { minTokens } : {}),
  };
  const seed = body.seed == null || BigInt(body.seed) === -1n ? undefined : body.seed;
  return { ...(Object.keys(sampling).length > 0 ? { sampling } : {}), ...(seed !== undefined && temperature > 0 ? { seed } : {}) };
}

/** The tokens that end a request's output: the model's end-of-sequence tokens (unless ignore_eos) and its stop_token_ids. */
export function stopTokensOf(body: Common, served: ServedModel): number[] {
  const own = (body.stop_token_ids ?? []).map((t, i) => tokenInVocab(t, served, `stop_token_ids[${i}]`));
  return [...new Set([...(body.ignore_eos ? [] : served.eosTokenIds), ...own])];
}

/** 400 when min_tokens asks for more tokens than the request may generate. */
export function checkMinTokens(body: Common, maxTokens: number): void {
  if ((body.min_tokens ?? 0) > maxTokens) {
    throw new ApiError(400, `min_tokens (${body.min_tokens}) must not exceed the tokens the request may generate (${maxTokens})`, { param: 'min_tokens' });
  }
}

export function stopStrings(stop: string | readonly string[] | null | undefined): string[] {
  if (stop == null) return [];
  return (typeof stop === 'string' ? [stop] : [...stop]).filter((s) => s.length > 0);
}

/**
 * Tokens a prompt may generate: `asked` when given, else `fallback` (or what the context has left
 * when there is none), at most the model's generation_config max_new_tokens (as vLLM caps it); a
 * prompt that does not fit is a 400 that names both numbers.
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
  return Math.min(maxTokens, served.samplingDefaults.max_tokens ?? maxTokens);
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
  return params.flatMap((p) => Array.from({ length: count }, (_, j) => (j > 0 && p.seed !== undefined ? { ...p, seed: BigInt(p.seed) + BigInt(j) } : p)));
}
