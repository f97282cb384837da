import type { ApiError } from './api-error.js';
import type { ChoiceFormat } from './choice-runner.js';
import type { FinishReason } from './generation.js';
import type { TokenLogprobs } from './logprobs-format.js';
import type { SseWriter } from './sse.js';

/**
 * The SSE side of a streamed request with backpressure: events are written while the socket takes
 * them; once its buffer is full, nothing more is written until 'drain', and the text that arrives
 * meanwhile is merged per choice into one event, logprobs too (as vLLM merges the deltas of a slow consumer).
 * What a reader that stops reading costs is then the socket's buffer plus the text not yet sent,
 * which max_tokens bounds, never an event per token.
 */
export class ChoiceStream {
  readonly #sse: SseWriter;
  readonly #format: ChoiceFormat;
  readonly #opened: boolean[];
  readonly #text: string[];
  readonly #logprobs: TokenLogprobs[][];
  readonly #finish: (FinishReason | null)[];
  readonly #finishSent: boolean[];
  /** Choices with something to send, first come first served. */
  readonly #dirty = new Set<number>();
  /** Events after the choices' own: the usage chunk. */
  readonly #tail: unknown[] = [];
  readonly #idle: (() => void)[] = [];
  #waiting = false;
  #events = 0;

  constructor(sse: SseWriter, format: ChoiceFormat, choices: number) {
    this.#sse = sse;
    this.#format = format;
    this.#opened = new Array<boolean>(choices).fill(!format.opening);
    this.#text = new Array<string>(choices).fill('');
    this.#logprobs = Array.from({ length: choices }, () => []);
    this.#finish = new Array<FinishReason | null>(choices).fill(null);
    this.#finishSent = new Array<boolean>(choices).fill(false);
  }

  /** Events written so far. */
  get events(): number {
    return this.#events;
  }

  /** The headers, then each choice's opening event (chat's role delta). */
  start(): void {
    this.#sse.start();
    for (let i = 0; i < this.#opened.length; i++) if (!this.#opened[i]) this.#dirty.add(i);
    this.#pump();
  }

  text(index: number, text: string, logprobs: readonly TokenLogprobs[] = []): void {
    this.#text[index] += text;
    this.#logprobs[index]!.push(...logprobs);
    this.#dirty.add(index);
    this.#pump();
  }

  finish(index: number, reason: FinishReason): void {
    this.#finish[index] = reason;
    this.#dirty.add(index);
    this.#pump();
  }

  /** An event after every choice's text and finish (the usage chunk). */
  event(data: unknown): void {
    this.#tail.push(data);
    this.#pump();
  }

  /** Waits until everything is written, then ends the stream with [DONE]; rejects with `signal`'s reason if it aborts first. */
  async end(signal?: AbortSignal): Promise<void> {
    if (!this.#empty) {
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => reject(signal!.reason);
        signal?.addEventListener('abort', onAbort, { once: true });
        this.#idle.push(() => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        });
        if (signal?.aborted) onAbort();
      });
    }
    this.#sse.done();
  }

  /**
   * The request failed mid-stream: the error as the last event, then [DONE]. A reader whose
   * buffer is still full would never read it; its connection is dropped instead.
   */
  fail(error: ApiError): void {
    this.#dirty.clear();
    this.#tail.length = 0;
    if (this.#sse.closed) return;
    if (this.#sse.blocked) return this.#sse.destroy();
    this.#sse.send(error.toBody());
    this.#sse.done();
  }

  get #empty(): boolean {
    return this.#sse.closed || (this.#dirty.size === 0 && this.#tail.length === 0);
  }

  #pump(): void {
    if (this.#waiting) return;
    while (!this.#sse.closed) {
      if (this.#sse.blocked) {
        this.#waiting = true;
        void this.#sse.drained().then(() => {
          this.#waiting = false;
          this.#pump();
        });
        return;
      }
      const event = this.#next();
      if (event === undefined) break;
      this.#sse.send(event);
      this.#events++;
    }
    if (this.#empty) for (const wake of this.#idle.splice(0)) wake();
  }

  /** The next event to write: a choice's opening, its merged text, its finish; then the tail. */
  #next(): unknown {
    for (const i of this.#dirty) {
      if (!this.#opened[i]) {
        this.#opened[i] = true;
        return this.#format.opening!(i);
      }
      const text = this.#text[i]!;
      const logprobs = this.#logprobs[i]!;
      if (text || logprobs.length > 0) {
        this.#text[i] = '';
        this.#logprobs[i] = [];
        const event = this.#format.chunk(i, text, null, logprobs);
        // The format may hold text back (a tool call not yet closed).
        if (event !== undefined) return event;
      }
      const finish = this.#finish[i];
      this.#dirty.delete(i);
      if (finish && !this.#finishSent[i]) {
        this.#finishSent[i] = true;
        return this.#format.chunk(i, null, finish, []);
      }
    }
    return this.#tail.shift();
  }
}
