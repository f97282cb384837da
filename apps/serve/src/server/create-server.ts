import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyServerOptions } from 'fastify';
import { ApiError } from './api-error.js';
import { ApiKeyCheck } from './api-key.js';
import { registerChat } from './chat-route.js';
import { registerCompletions } from './completions-route.js';
import { connectionErrorHandler } from './connection-errors.js';
import { registerJsonBody } from './json-body.js';
import type { ServerContext } from './server-context.js';
import { registerTokenize } from './tokenize-route.js';

const GENERATION_ROUTES = new Set(['/v1/completions', '/v1/chat/completions']);
const MODEL_PATH = '/v1/models/';

export interface CreateServerOptions {
  /** fastify's logger option (pino): structured JSON logs. */
  readonly logger?: FastifyServerOptions['logger'];
  /** Largest request body in bytes (default 8 MiB). */
  readonly bodyLimit?: number;
  /** Bearer keys every path but /health and /metrics needs (none: open). */
  readonly apiKeys?: readonly string[];
  /** Headers and body of a request must arrive within this (default 30 s); else 408. */
  readonly requestTimeoutMs?: number;
  /** An idle keep-alive connection is closed after this (default 5 s, as vLLM's server). */
  readonly keepAliveTimeoutMs?: number;
}

/**
 * The HTTP server over `ctx`: OpenAI's /v1/models, /v1/completions and /v1/chat/completions,
 * /health, /metrics, /tokenize and /detokenize. Every error, whether from validation, fastify
 * itself (malformed JSON, body too large, unknown route) or the engine, answers as an OpenAI
 * error object; nothing a client sends reaches the process as an uncaught exception.
 */
export function createServer(ctx: ServerContext, options: CreateServerOptions = {}): FastifyInstance {
  const auth = new ApiKeyCheck(options.apiKeys ?? []);
  const requestTimeout = options.requestTimeoutMs ?? 30_000;
  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: options.bodyLimit ?? 8 * 1024 * 1024,
    // One line per request from our own hooks (with tokens and timings for generations), not fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    // Idle keep-alive sockets close at shutdown; busy ones finish their response.
    forceCloseConnections: 'idle',
    // A client that sends its request slowly, or opens a connection and sends nothing, is cut off.
    // Node applies the request timeout only with a headers timeout no longer than it, and checks
    // both every connectionsCheckingInterval (30 s by default, too coarse for short limits).
    requestTimeout,
    http: { headersTimeout: requestTimeout, connectionsCheckingInterval: Math.min(1000, Math.max(50, requestTimeout / 4)) },
    keepAliveTimeout: options.keepAliveTimeoutMs ?? 5_000,
    clientErrorHandler: connectionErrorHandler(requestTimeout),
    // Model ids may be long checkpoint paths.
    routerOptions: { maxParamLength: 4096 },
    // A URL the router cannot decode never reaches a route: answer it as one would have.
    frameworkErrors: (error, request, reply) => {
      let api: ApiError;
      try {
        auth.check(request);
        const path = request.url.split('?', 1)[0]!;
        api = path.startsWith(MODEL_PATH)
          ? new ApiError(404, `the model '${path.slice(MODEL_PATH.length)}' does not exist (its id is not valid percent-encoding)${ctx.model ? `; this server serves '${ctx.model.name}'` : ''}`, { param: 'model', code: 'model_not_found' })
          : new ApiError(400, `${error.message}; percent-encode the URL`, { code: 'bad_url' });
      } catch (denied) {
        api = denied as ApiError;
      }
      void (reply as FastifyReply).code(api.status).send(api.toBody());
    },
  });

  registerJsonBody(app);

  // Before anything else, even a 404: vLLM answers 401 to a wrong key on any protected path.
  if (auth.required) {
    app.addHook('onRequest', async (request, reply) => {
      try {
        auth.check(request);
      } catch (error) {
        return reply.code(401).header('www-authenticate', 'Bearer').send((error as ApiError).toBody());
      }
    });
  }

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

  // 503 unless the engine can serve: while loading, shutting down, and for good once the device
  // failed (engine-worker.ts probes it after a failed step), so orchestrators stop sending work.
  app.get('/health', async (_request, reply) => {
    const state = ctx.draining ? 'draining' : ctx.engine.state;
    const failure = ctx.engine.failure;
    const body = { status: state === 'ready' ? 'ok' : state, model: ctx.model?.name ?? null, ...(failure ? { error: failure.message } : {}) };
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
