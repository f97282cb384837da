import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { ApiError } from './api-error.js';
import { runAdmitted } from './admitted-request.js';
import { runChoices } from './choice-runner.js';
import type { GenerationParams } from './generation.js';
import { checkModel, checkTokenIds, completionBudget, refuseUnsupported, samplingOf, stopStrings, withChoices } from './request-params.js';
import { completionRequest, parseBody, type CompletionRequest } from './request-schemas.js';
import type { ServerContext } from './server-context.js';

/** OpenAI's default max_tokens for /v1/completions. */
const DEFAULT_MAX_TOKENS = 16;

/** How many prompts `prompt` holds: a string, strings, token ids, or lists of token ids. */
function promptCount(prompt: CompletionRequest['prompt']): number {
  return typeof prompt === 'string' || typeof prompt[0] === 'number' ? 1 : prompt.length;
}

/** `prompt` as token-id lists; texts are tokenized on the tokenizer threads. */
async function promptsOf(prompt: CompletionRequest['prompt'], ctx: ServerContext, signal: AbortSignal): Promise<ArrayLike<number>[]> {
  if (typeof prompt === 'string') return [await ctx.requireTokenizer('prompt').encode(prompt, true, signal)];
  if (prompt.length > 0 && typeof prompt[0] === 'number') return [prompt as number[]];
  return Promise.all((prompt as (string | number[])[]).map((p) => (typeof p === 'string' ? ctx.requireTokenizer('prompt').encode(p, true, signal) : p)));
}

/** POST /v1/completions. */
export function registerCompletions(app: FastifyInstance, ctx: ServerContext): void {
  app.post('/v1/completions', async (request, reply) => {
    const arrived = performance.now();
    const body = parseBody(completionRequest, request.body);
    refuseUnsupported(body, 'completion');
    const served = ctx.servedOrUnavailable();
    checkModel(body.model, served);
    const n = body.n ?? 1;
    return runAdmitted(ctx, reply, promptCount(body.prompt) * n, arrived, async (lifetime, ticket) => {
      const prompts = await promptsOf(body.prompt, ctx, lifetime.signal);
      const sampling = samplingOf(body);
      const stop = stopStrings(body.stop);
      const params: GenerationParams[] = prompts.map((prompt, i) => {
        const field = prompts.length > 1 ? `prompt[${i}]` : 'prompt';
        if (prompt.length === 0) throw new ApiError(400, `${field}: the prompt has no tokens`, { param: field });
        if (Array.isArray(prompt)) checkTokenIds(prompt, served, field);
        const maxTokens = completionBudget(prompt.length, body.max_tokens, DEFAULT_MAX_TOKENS, served, field, 'max_tokens');
        return { prompt, maxTokens, ...sampling, stop, stopTokenIds: body.ignore_eos ? [] : served.eosTokenIds };
      });
      const id = `cmpl-${randomUUID()}`;
      const created = Math.floor(Date.now() / 1000);
      const head = { id, object: 'text_completion', created, model: served.name };
      return runChoices({
        ctx, reply, arrived, lifetime, ticket, n,
        params: withChoices(params, n),
        promptTokens: prompts.reduce((a, p) => a + p.length, 0),
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
        format: {
          chunk: (index, text, finish) => ({ ...head, choices: [{ index, text: text ?? '', logprobs: null, finish_reason: finish }] }),
          usageChunk: (usage) => ({ ...head, choices: [], usage }),
          response: (results, usage) => ({
            ...head,
            choices: results.map((r, index) => ({ index, text: r.text, logprobs: null, finish_reason: r.finishReason })),
            usage,
          }),
        },
      });
    });
  });
}
