import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { ApiError } from './api-error.js';
import { runAdmitted } from './admitted-request.js';
import { runChoices } from './choice-runner.js';
import type { GenerationParams } from './generation.js';
import { TokenTexts, completionLogprobs } from './logprobs-format.js';
import { checkMinTokens, checkModel, checkTokenIds, completionBudget, refuseUnsupported, samplingOf, stopStrings, stopTokensOf, withChoices } from './request-params.js';
import { completionRequest, parseBody, type CompletionRequest } from './request-schemas.js';
import type { ServerContext } from './server-context.js';

/** OpenAI's default max_tokens for /v1/completions. */
const DEFAULT_MAX_TOKENS = 16;

/** How many prompts `prompt` holds: a string, strings, token ids, or lists of token ids. */
function promptCount(prompt: CompletionRequest['prompt']): number {
  return typeof prompt === 'string' || typeof prompt[0] === 'number' ? 1 : prompt.length;
}

/** `prompt` as its prompts, each a text or token ids. */
function promptList(prompt: CompletionRequest['prompt']): (string | number[])[] {
  if (typeof prompt === 'string') return [prompt];
  if (prompt.length > 0 && typeof prompt[0] === 'number') return [prompt as number[]];
  return prompt as (string | number[])[];
}

/** The prompts as token-id lists; texts are tokenized on the tokenizer threads. */
function promptsOf(prompts: readonly (string | number[])[], ctx: ServerContext, signal: AbortSignal): Promise<ArrayLike<number>[]> {
  return Promise.all(prompts.map((p) => (typeof p === 'string' ? ctx.requireTokenizer('prompt').encode(p, true, signal) : p)));
}

/** A prompt's text for `echo`: as given, or its token ids decoded (vLLM's too). */
function promptText(prompt: string | number[], ctx: ServerContext): string {
  if (typeof prompt === 'string') return prompt;
  return ctx.codec ? ctx.codec.decode(prompt) : prompt.map((t) => `<${t}>`).join('');
}

/** POST /v1/completions. */
export function registerCompletions(app: FastifyInstance, ctx: ServerContext): void {
  app.post('/v1/completions', async (request, reply) => {
    const arrived = performance.now();
    const body = parseBody(completionRequest, request.body);
    refuseUnsupported(body, 'completion');
    const served = ctx.servedOrUnavailable();
    checkModel(body.model, served);
    const sampling = samplingOf(body, served);
    const stopTokenIds = stopTokensOf(body, served);
    const n = body.n ?? 1;
    return runAdmitted(ctx, reply, promptCount(body.prompt) * n, arrived, async (lifetime, ticket) => {
      const given = promptList(body.prompt);
      const prompts = await promptsOf(given, ctx, lifetime.signal);
      const stop = stopStrings(body.stop);
      const params: GenerationParams[] = prompts.map((prompt, i) => {
        const field = prompts.length > 1 ? `prompt[${i}]` : 'prompt';
        if (prompt.length === 0) throw new ApiError(400, `${field}: the prompt has no tokens`, { param: field });
        if (Array.isArray(prompt)) checkTokenIds(prompt, served, field);
        const maxTokens = completionBudget(prompt.length, body.max_tokens, DEFAULT_MAX_TOKENS, served, field, 'max_tokens');
        checkMinTokens(body, maxTokens);
        return {
          prompt, maxTokens, ...sampling, stop, stopTokenIds,
          ...(body.logprobs != null ? { logprobs: body.logprobs } : {}), ...(body.echo ? { echo: promptText(given[i]!, ctx) } : {}),
        };
      });
      const id = `cmpl-${randomUUID()}`;
      const created = Math.floor(Date.now() / 1000);
      const head = { id, object: 'text_completion', created, model: served.name };
      const texts = new TokenTexts(ctx.codec);
      // A stream's text offsets go on from the text each choice has sent (as vLLM counts them).
      const sent = new Array<number>(params.length * n).fill(0);
      return runChoices({
        ctx, reply, arrived, lifetime, ticket, n,
        params: withChoices(params, n),
        promptTokens: prompts.reduce((a, p) => a + p.length, 0),
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
        format: {
          chunk: (index, text, finish, items) => {
            const logprobs = body.logprobs != null && items.length > 0 ? completionLogprobs(items, texts, sent[index]!) : null;
            sent[index]! += (text ?? '').length;
            return { ...head, choices: [{ index, text: text ?? '', logprobs, finish_reason: finish }] };
          },
          usageChunk: (usage) => ({ ...head, choices: [], usage }),
          response: (results, usage) => ({
            ...head,
            choices: results.map((r, index) => ({ index, text: r.text, logprobs: body.logprobs != null ? completionLogprobs(r.logprobs, texts, 0) : null, finish_reason: r.finishReason })),
            usage,
          }),
        },
      });
    });
  });
}
