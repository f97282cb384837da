import type { FastifyInstance } from 'fastify';
import { ApiError, notReady } from './api-error.js';
import { chatPrompt } from './chat-route.js';
import { RequestLifetime } from './request-lifetime.js';
import { checkModel } from './request-params.js';
import { detokenizeRequest, parseBody, tokenizeRequest } from './request-schemas.js';
import type { ServerContext } from './server-context.js';

/** POST /tokenize and /detokenize (as vLLM has them): the tokenizer threads alone, no engine step. */
export function registerTokenize(app: FastifyInstance, ctx: ServerContext): void {
  const model = () => {
    const m = ctx.model;
    if (!m) throw notReady(ctx.engine.state, ctx.engine.failure);
    return m;
  };
  app.post('/tokenize', async (request, reply) => {
    const body = parseBody(tokenizeRequest, request.body);
    const served = model();
    checkModel(body.model, served);
    // No deadline (nothing runs in the engine), but a long prompt stops when its client leaves.
    const lifetime = new RequestLifetime(reply, 0);
    try {
      const ids = 'prompt' in body
        ? await ctx.requireTokenizer('prompt').encode(body.prompt, body.add_special_tokens ?? true, lifetime.signal)
        : await chatPrompt(ctx, body.messages, body.add_generation_prompt ?? true, lifetime.signal);
      return { tokens: Array.from(ids), count: ids.length, max_model_len: served.maxModelLen };
    } finally {
      lifetime.dispose();
    }
  });
  app.post('/detokenize', async (request) => {
    const body = parseBody(detokenizeRequest, request.body);
    const served = model();
    checkModel(body.model, served);
    const bad = body.tokens.findIndex((t) => t >= served.vocabSize);
    if (bad >= 0) throw new ApiError(400, `tokens[${bad}]: token id ${body.tokens[bad]} is outside the vocabulary (${served.vocabSize} tokens)`, { param: `tokens[${bad}]` });
    return { prompt: await ctx.requireTokenizer('tokens').decode(body.tokens) };
  });
}
