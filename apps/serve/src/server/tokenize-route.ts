import type { FastifyInstance } from 'fastify';
import { ApiError, notReady } from './api-error.js';
import { chatPrompt } from './chat-route.js';
import { checkModel } from './request-params.js';
import { detokenizeRequest, parseBody, tokenizeRequest } from './request-schemas.js';
import type { ServerContext } from './server-context.js';

/** POST /tokenize and /detokenize (as vLLM has them): the tokenizer alone, no engine step. */
export function registerTokenize(app: FastifyInstance, ctx: ServerContext): void {
  const model = () => {
    const m = ctx.model;
    if (!m) throw notReady(ctx.engine.state, ctx.engine.failure);
    return m;
  };
  app.post('/tokenize', async (request) => {
    const body = parseBody(tokenizeRequest, request.body);
    const served = model();
    checkModel(body.model, served);
    const tokens = 'prompt' in body
      ? ctx.requireCodec('prompt').encode(body.prompt, body.add_special_tokens ?? true)
      : chatPrompt(ctx, body.messages, body.add_generation_prompt ?? true);
    return { tokens, count: tokens.length, max_model_len: served.maxModelLen };
  });
  app.post('/detokenize', async (request) => {
    const body = parseBody(detokenizeRequest, request.body);
    const served = model();
    checkModel(body.model, served);
    const bad = body.tokens.findIndex((t) => t >= served.vocabSize);
    if (bad >= 0) throw new ApiError(400, `tokens[${bad}]: token id ${body.tokens[bad]} is outside the vocabulary (${served.vocabSize} tokens)`, { param: `tokens[${bad}]` });
    return { prompt: ctx.requireCodec('tokens').decode(body.tokens) };
  });
}
