import type { ServerResponse } from 'node:http';

/** A server-sent-events response: `data: <json>` events, ended by `data: [DONE]`. */
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

  send(data: unknown): void {
    if (!this.closed) this.#raw.write(`data: ${JSON.stringify(data)}\n\n`);
  }

  done(): void {
    if (this.closed) return;
    this.#raw.write('data: [DONE]\n\n');
    this.#raw.end();
  }
}
