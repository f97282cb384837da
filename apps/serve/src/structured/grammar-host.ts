import { Worker } from 'node:worker_threads';
import type { GrammarSpec } from './grammar-spec.js';
import { GrammarEngineError } from './xgrammar-runtime.js';
import type { FromHost, GrammarHostData, MaskRequest, ToHost } from './grammar-host-protocol.js';

/** The host refused to open a matcher because the grammar left its cache: compile it again. */
export class GrammarEvictedError extends Error {
  override readonly name = 'GrammarEvictedError';
}

/**
 * The engine thread's handle on one grammar host thread (grammar-host-worker.ts): compiles and
 * matcher opens as promises, mask requests posted as they are (their answers land in shared
 * slots), and the counts the pool routes by.
 */
export class GrammarHost {
  readonly #worker: Worker;
  #nextKey = 1;
  readonly #waiting = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  #failure: Error | undefined;
  /** Matchers open here (their requests may ask for masks at any step). */
  live = 0;
  /** Matcher opens sent and not yet answered. */
  opening = 0;
  /** Compiles sent and not yet answered. */
  compiling = 0;

  constructor(data: GrammarHostData, workerUrl: URL) {
    this.#worker = new Worker(workerUrl, { workerData: data });
    this.#worker.on('message', (m: FromHost) => this.#settle(m));
    // A host that dies fails what waits on it; masks waiting on it time out (remote-constraint.ts).
    this.#worker.on('error', (error) => this.#fail(error));
    this.#worker.on('exit', (code) => this.#fail(new Error(`a grammar host thread exited (exit code ${code})`)));
    // The engine thread may end with hosts idle.
    this.#worker.unref();
  }

  /** No matcher open or opening, no compile in flight: a compile here holds no request's masks. */
  get free(): boolean {
    return this.live === 0 && this.opening === 0 && this.compiling === 0 && this.#failure === undefined;
  }

  get failed(): boolean {
    return this.#failure !== undefined;
  }

  async compile(spec: GrammarSpec): Promise<void> {
    this.compiling++;
    try {
      await this.#ask((key) => ({ t: 'compile', key, spec }));
    } finally {
      this.compiling--;
    }
  }

  /** Opens matcher `id` over the compiled `spec`; rejects with GrammarEvictedError when the host no longer holds it. */
  async open(id: number, spec: GrammarSpec, slot: SharedArrayBuffer): Promise<void> {
    this.opening++;
    try {
      await this.#ask((key) => ({ t: 'open', key, id, spec, slot }));
      this.live++;
    } finally {
      this.opening--;
    }
  }

  masks(reqs: readonly MaskRequest[]): void {
    if (reqs.length > 0) this.#post({ t: 'masks', reqs });
  }

  close(id: number): void {
    this.live--;
    this.#post({ t: 'close', id });
  }

  terminate(): Promise<number> {
    return this.#worker.terminate();
  }

  #ask(message: (key: number) => ToHost): Promise<void> {
    if (this.#failure) return Promise.reject(this.#failure);
    const key = this.#nextKey++;
    return new Promise<void>((resolve, reject) => {
      this.#waiting.set(key, { resolve, reject });
      this.#post(message(key));
    });
  }

  #post(message: ToHost): void {
    if (this.#failure) return;
    this.#worker.postMessage(message);
  }

  #settle(m: FromHost): void {
    const waiter = this.#waiting.get(m.key);
    this.#waiting.delete(m.key);
    if (!waiter) return;
    if (m.t === 'opened' && m.evicted) waiter.reject(new GrammarEvictedError('the grammar left the host\'s cache'));
    else if (m.error !== undefined) waiter.reject(new GrammarEngineError(m.error));
    else waiter.resolve();
  }

  #fail(error: Error): void {
    this.#failure ??= error;
    const waiting = [...this.#waiting.values()];
    this.#waiting.clear();
    for (const w of waiting) w.reject(this.#failure);
  }
}
