import type { FastifyReply } from 'fastify';
import { ApiError } from './api-error.js';

/**
 * How long a generation request may live, and whether its client is still there: `signal` aborts
 * when the client closes the connection (499) or the generation deadline passes (504), with that
 * ApiError as its reason. The deadline covers everything from arrival: the queue, tokenization,
 * generation and delivering the stream, so a client that stops reading cannot hold a connection,
 * an engine slot or the answer's memory past it.
 */
export class RequestLifetime {
  readonly #controller = new AbortController();
  readonly #reply: FastifyReply;
  readonly #timer: NodeJS.Timeout | undefined;
  readonly #onClose = () => {
    // 'close' before the response finished: the client went away.
    if (!this.#reply.raw.writableFinished) this.#end(new ApiError(499, 'the client closed the connection', { code: 'client_closed_request' }));
  };

  /** `deadlineMs`: 0 for none. */
  constructor(reply: FastifyReply, deadlineMs: number, arrived = performance.now()) {
    this.#reply = reply;
    reply.raw.on('close', this.#onClose);
    if (deadlineMs > 0) {
      const seconds = Math.round(deadlineMs / 100) / 10;
      this.#timer = setTimeout(() => this.#end(new ApiError(504, `the request ran past the server's generation deadline of ${seconds} s; ask for fewer tokens (max_tokens), or ask the operator to raise --generation-timeout`, { code: 'generation_timeout' })), Math.max(0, deadlineMs - (performance.now() - arrived)));
      this.#timer.unref();
    }
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Why the request ended early, once it did. */
  get ended(): ApiError | undefined {
    return this.#controller.signal.aborted ? (this.#controller.signal.reason as ApiError) : undefined;
  }

  /** Stops watching (the answer is complete). */
  dispose(): void {
    clearTimeout(this.#timer);
    this.#reply.raw.off('close', this.#onClose);
  }

  #end(reason: ApiError): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(reason);
  }
}
