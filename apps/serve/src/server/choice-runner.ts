import type { FastifyReply } from 'fastify';
import type { AdmissionTicket } from './admission.js';
import { ApiError } from './api-error.js';
import { ChoiceStream } from './choice-stream.js';
import { Generation, type FinishReason, type GenerationParams, type GenerationResult } from './generation.js';
import type { TokenLogprobs } from './logprobs-format.js';
import type { RequestLifetime } from './request-lifetime.js';
import type { ServerContext } from './server-context.js';
import { SseWriter } from './sse.js';

export interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly total_tokens: number;
}

/** How an endpoint shapes its answers; the runner does the rest (engine, streaming, aborts). */
export interface ChoiceFormat {
  /** Streaming: the event sent before any text of choice `index` (chat's role delta), if any. */
  readonly opening?: (index: number) => unknown;
  /**
   * Streaming: a piece of text of choice `index` with the logprobs of the tokens that came with it,
   * or its end (`text` null, `finish` set, no logprobs); undefined sends nothing for that text (the
   * format holds it back, and the logprobs with it).
   */
  readonly chunk: (index: number, text: string | null, finish: FinishReason | null, logprobs: readonly TokenLogprobs[]) => unknown;
  /** Streaming with include_usage: the last event, with usage and no choices. */
  readonly usageChunk: (usage: Usage) => unknown;
  /** Not streaming: the whole answer. */
  readonly response: (results: readonly GenerationResult[], usage: Usage) => unknown;
}

export interface RunChoicesOptions {
  readonly ctx: ServerContext;
  readonly reply: FastifyReply;
  readonly params: readonly GenerationParams[];
  /** Prompt tokens of the request, counted once per prompt whatever `n` (as OpenAI's usage does). */
  readonly promptTokens: number;
  /** The request's `n` (each prompt's choices). */
  readonly n: number;
  readonly stream: boolean;
  readonly includeUsage: boolean;
  readonly format: ChoiceFormat;
  readonly arrived: number;
  readonly lifetime: RequestLifetime;
  /** Given back once every generation has ended, before the answer is delivered. */
  readonly ticket: AdmissionTicket;
}

function usageOf(prompt: number, completion: number): Usage {
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/**
 * Runs one generation per prompt and answers with all of them: as one JSON response, or as SSE
 * events while tokens arrive (with backpressure, choice-stream.ts). A client that goes away or a
 * deadline that passes cancels every generation of the request at once (their engine slots are
 * free for the next step); a failure in one aborts the others.
 */
export async function runChoices(o: RunChoicesOptions): Promise<unknown> {
  const { ctx, reply, params, format, lifetime } = o;
  const raw = reply.raw;
  const out = o.stream ? new ChoiceStream(new SseWriter(raw), format, params.length) : undefined;
  const gens: Generation[] = [];
  const abortAll = (why: ApiError) => {
    for (const g of gens) g.abort(why);
  };
  const onEnded = () => abortAll(lifetime.ended!);
  lifetime.signal.addEventListener('abort', onEnded);
  try {
    // The client may have left, or the deadline passed, while the prompt was tokenized.
    lifetime.signal.throwIfAborted();
    for (let i = 0; i < params.length; i += o.n) ctx.metrics.requestParams(o.n);
    if (out) {
      reply.hijack();
      out.start();
    }
    for (const [i, p] of params.entries()) {
      gens.push(new Generation(ctx.engine, ctx.metrics, ctx.codec, p, out ? (text, logprobs) => out.text(i, text, logprobs) : undefined, o.arrived));
    }
    let results: GenerationResult[];
    try {
      results = await Promise.all(gens.map(async (g, i) => {
        const r = await g.done;
        out?.finish(i, r.finishReason);
        return r;
      }));
    } catch (error) {
      abortAll(new ApiError(499, 'another prompt of the same request failed', { code: 'client_closed_request' }));
      throw error;
    }
    o.ticket.release();
    const usage = usageOf(o.promptTokens, results.reduce((a, r) => a + r.completionTokens, 0));
    reply.log.info({
      route: reply.request.routeOptions.url, stream: o.stream, choices: results.length, ...usage,
      finish: results.map((r) => r.finishReason), ms: Math.round(performance.now() - o.arrived),
    }, 'generation');
    if (!out) return format.response(results, usage);
    if (o.includeUsage) out.event(format.usageChunk(usage));
    // A slow reader is waited for, up to the deadline.
    await out.end(lifetime.signal);
    return undefined;
  } catch (error) {
    // Whatever failed, nothing of this request may keep running in the engine.
    abortAll(error instanceof ApiError ? error : new ApiError(500, 'the request failed'));
    if (!out || !raw.headersSent) throw error;
    // Mid-stream: the status is already sent; the error travels as an event, then the stream ends.
    const apiError = error instanceof ApiError ? error : new ApiError(500, (error as Error).message);
    if (apiError.status !== 499) out.fail(apiError);
    reply.log.warn({ err: apiError.message, status: apiError.status }, 'stream ended early');
    return undefined;
  } finally {
    lifetime.signal.removeEventListener('abort', onEnded);
  }
}
