import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyServerOptions } from 'fastify';
import { ApiError } from './api-error.js';
import { registerChat } from './chat-route.js';
import { registerCompletions } from './completions-route.js';
import type { ServerContext } from './server-context.js';
import { registerTokenize } from './tokenize-route.js';

const GENERATION_ROUTES = new Set(['/v1/completions', '/v1/chat/completions']);
const MODEL_PATH = '/v1/models/';

export interface CreateServerOptions {
  /** fastify's logger option (pino): structured JSON logs. */
  readonly logger?: FastifyServerOptions['logger'];
  /** Largest request body in bytes (default 8 MiB). */
  readonly bodyLimit?: number;
}

/**
 * The HTTP server over `ctx`: OpenAI's /v1/models, /v1/completions and /v1/chat/completions,
 * /health, /metrics, /tokenize and /detokenize. Every error, whether from validation, fastify
 * itself (malformed JSON, body too large, unknown route) or the engine, answers as an OpenAI
 * error object; nothing a client sends reaches the process as an uncaught exception.
 */
export function createServer(ctx: ServerContext, options: CreateServerOptions = {}): FastifyInstance {
  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: options.bodyLimit ?? 8 * 1024 * 1024,
    // One line per request from our own hooks (with tokens and timings for generations), not fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    // Idle keep-alive sockets close at shutdown; busy ones finish their response.
    forceCloseConnections: 'idle',
    // Model ids may be long checkpoint paths.
    routerOptions: { maxParamLength: 4096 },
    // A URL the router cannot decode never reaches a route: answer it as one would have.
    frameworkErrors: (error, request, reply) => {
      const path = request.url.split('?', 1)[0]!;
      const api = path.startsWith(MODEL_PATH)
        ? new ApiError(404, `the model '${path.slice(MODEL_PATH.length)}' does not exist (its id is not valid percent-encoding)${ctx.model ? `; this server serves '${ctx.model.name}'` : ''}`, { param: 'model', code: 'model_not_found' })
        : new ApiError(400, `${error.message}; percent-encode the URL`, { code: 'bad_url' });
      void (reply as FastifyReply).code(api.status).send(api.toBody());
    },
  });

  app.setErrorHandler((thrown, request, reply) => {
    const error = thrown instanceof Error ? thrown : new Error(String(thrown));
    let api: ApiError;
    if (error instanceof ApiError) api = error;
    else {
      const status = (error as { statusCode?: number }).statusCode;
      if (status !== undefined && status >= 400 && status < 500) api = new ApiError(status, error.message, { code: (error as { code?: string }).code ?? null });
      else {
        request.log.error({ err: error }, 'unexpected error');
        api = new ApiError(500, `internal error: ${error.message}`);
      }
    }
    // 499 (client gone): nobody is there to read an answer.
    if (api.status === 499) return reply.code(499).send();
    return reply.code(api.status).send(api.toBody());
  });
  app.setNotFoundHandler((request, reply) => {
    reply.code(404).send(new ApiError(404, `no route ${request.method} ${request.url}; see /v1/models, /v1/completions, /v1/chat/completions, /health, /metrics, /tokenize, /detokenize`).toBody());
  });
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'none';
    ctx.metrics.httpRequest(route, request.method, reply.statusCode);
    // Generations log their own line (choice-runner.ts); everything else logs here, at debug.
    if (!GENERATION_ROUTES.has(route) || reply.statusCode !== 200) {
      request.log.debug({ method: request.method, route, status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request');
    }
  });

  app.get('/health', async (_request, reply) => {
    const state = ctx.draining ? 'draining' : ctx.engine.state;
    const body = { status: state === 'ready' ? 'ok' : state, model: ctx.model?.name ?? null };
    return reply.code(state === 'ready' ? 200 : 503).send(body);
  });
  app.get('/v1/models', async () => {
    const m = ctx.model;
    const info = ctx.engine.info;
    return {
      object: 'list',
      data: m ? [{ id: m.name, object: 'model', created: 0, owned_by: 'metrale', max_model_len: m.maxModelLen, model_type: info?.modelType, ready: ctx.engine.state === 'ready' }] : [],
    };
  });
  // Model names may hold slashes (metrale/embedded-qwen3-next): the id is the rest of the path,
  // which the router has already percent-decoded (decoding it again would fail on '%').
  app.get('/v1/models/*', async (request) => {
    const id = (request.params as { '*': string })['*'];
    const m = ctx.model;
    if (!m || m.name !== id) throw new ApiError(404, `the model '${id}' does not exist${m ? `; this server serves '${m.name}'` : ''}`, { param: 'model', code: 'model_not_found' });
    return { id: m.name, object: 'model', created: 0, owned_by: 'metrale', max_model_len: m.maxModelLen };
  });
  app.get('/metrics', async (_request, reply) => reply.type(ctx.metrics.contentType).send(await ctx.metrics.text()));

  registerCompletions(app, ctx);
  registerChat(app, ctx);
  registerTokenize(app, ctx);
  return app;
}
