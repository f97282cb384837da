import type { ServerResponse } from 'node:http';

/**
 * A server-sent-events response: `data: <json>` events, ended by `data: [DONE]`. It never queues
 * events of its own: `blocked` says when the socket's buffer is full, `drained()` waits for it to
 * empty, and the caller decides what to hold meanwhile (choice-stream.ts merges the text).
 */
export class SseWriter {
  readonly #raw: ServerResponse;

  constructor(raw: ServerResponse) {
    this.#raw = raw;
  }

  start(): void {
    this.#raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      // Proxies (nginx) must not buffer the tokens.
      'x-accel-buffering': 'no',
    });
    this.#raw.flushHeaders();
  }

  get closed(): boolean {
    return this.#raw.destroyed || this.#raw.writableEnded;
  }

  /** The socket's buffer is full: write nothing more before `drained()`. */
  get blocked(): boolean {
    return this.#raw.writableNeedDrain;
  }

  /** Resolves once the buffer has room again, or the connection is gone. */
  drained(): Promise<void> {
    if (!this.blocked || this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.#raw.off('drain', done);
        this.#raw.off('close', done);
        resolve();
      };
      this.#raw.on('drain', done);
      this.#raw.on('close', done);
    });
  }

  send(data: unknown): void {
    if (!this.closed) this.#raw.write(`data: ${JSON.stringify(data)}\n\n`);
  }

  done(): void {
    if (this.closed) return;
    this.#raw.write('data: [DONE]\n\n');
    this.#raw.end();
  }

  /** Drops the connection, with whatever it still buffers (a reader that stopped reading). */
  destroy(): void {
    this.#raw.destroy();
  }
}
