import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { runAdmitted } from './admitted-request.js';
import { ApiError } from './api-error.js';
import { runChoices } from './choice-runner.js';
import { TokenTexts, chatLogprobs, type TokenLogprobs } from './logprobs-format.js';
import { checkMinTokens, checkModel, completionBudget, refuseUnsupported, samplingOf, stopStrings, stopTokensOf, withChoices } from './request-params.js';
import { chatRequest, parseBody, type ChatMessage } from './request-schemas.js';
import type { ServerContext } from './server-context.js';

/** Messages as the chat template sees them: text parts joined, no content as empty text. */
export function templateMessages(messages: readonly ChatMessage[]): { role: string; content: string }[] {
  return messages.map((m) => ({
    role: m.role === 'developer' ? 'system' : m.role,
    content: typeof m.content === 'string' ? m.content : (m.content ?? []).map((p) => p.text).join(''),
  }));
}

/** The prompt's token ids: the messages through the checkpoint's chat template, on a tokenizer thread. */
export function chatPrompt(ctx: ServerContext, messages: readonly ChatMessage[], addGenerationPrompt: boolean, signal?: AbortSignal): Promise<Int32Array> {
  return ctx.requireTokenizer('messages').chat(templateMessages(messages), addGenerationPrompt, 'messages', signal);
}

/** POST /v1/chat/completions. */
export function registerChat(app: FastifyInstance, ctx: ServerContext): void {
  app.post('/v1/chat/completions', async (request, reply) => {
    const arrived = performance.now();
    const body = parseBody(chatRequest, request.body);
    refuseUnsupported(body, 'chat');
    if ((body.top_logprobs ?? 0) > 0 && !body.logprobs) {
      throw new ApiError(400, 'top_logprobs needs logprobs: true', { param: 'top_logprobs' });
    }
    const served = ctx.servedOrUnavailable();
    checkModel(body.model, served);
    const sampling = samplingOf(body, served);
    const stopTokenIds = stopTokensOf(body, served);
    const n = body.n ?? 1;
    return runAdmitted(ctx, reply, n, arrived, async (lifetime, ticket) => {
      const prompt = await chatPrompt(ctx, body.messages, true, lifetime.signal);
      const asked = body.max_completion_tokens ?? body.max_tokens;
      const field = body.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
      const maxTokens = completionBudget(prompt.length, asked, undefined, served, 'messages', field);
      checkMinTokens(body, maxTokens);
      const id = `chatcmpl-${randomUUID()}`;
      const created = Math.floor(Date.now() / 1000);
      const head = { id, object: 'chat.completion.chunk', created, model: served.name };
      const texts = new TokenTexts(ctx.codec);
      const logprobs = (items: readonly TokenLogprobs[]) => (body.logprobs ? { content: chatLogprobs(items, texts) } : null);
      return runChoices({
        ctx, reply, arrived, lifetime, ticket, n,
        params: withChoices([{
          prompt, maxTokens, ...sampling, stop: stopStrings(body.stop), stopTokenIds, ...(body.logprobs ? { logprobs: body.top_logprobs ?? 0 } : {}),
        }], n),
        promptTokens: prompt.length,
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
        format: {
          opening: (index) => ({ ...head, choices: [{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] }),
          chunk: (index, text, finish, items) => ({
            ...head, choices: [{ index, delta: text === null ? {} : { content: text }, logprobs: items.length > 0 ? logprobs(items) : null, finish_reason: finish }],
          }),
          usageChunk: (usage) => ({ ...head, choices: [], usage }),
          response: (results, usage) => ({
            id, object: 'chat.completion', created, model: served.name,
            choices: results.map((r, index) => ({ index, message: { role: 'assistant', content: r.text }, logprobs: logprobs(r.logprobs), finish_reason: r.finishReason })),
            usage,
          }),
        },
      });
    });
  });
}
