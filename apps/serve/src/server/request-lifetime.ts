import type { FastifyReply } from 'fastify';
import { ApiError } from './api-error.js';

/**
 * Whether a request's client is still there: `signal` aborts when the client closes the
 * connection, with a 499 ApiError as its reason, so that its tokenization and generations stop.
 */
export class RequestLifetime {
  readonly #controller = new AbortController();
  readonly #reply: FastifyReply;
  readonly #onClose = () => {
    // 'close' before the response finished: the client went away.
    if (!this.#reply.raw.writableFinished) this.#end(new ApiError(499, 'the client closed the connection', { code: 'client_closed_request' }));
  };

  constructor(reply: FastifyReply) {
    this.#reply = reply;
    reply.raw.on('close', this.#onClose);
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
    this.#reply.raw.off('close', this.#onClose);
  }

  #end(reason: ApiError): void {
    if (!this.#controller.signal.aborted) this.#controller.abort(reason);
  }
}
