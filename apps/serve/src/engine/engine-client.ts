// The HTTP thread's side of the engine: it starts engine-worker.js, hands requests over, routes
// the tokens of every step back to the request they belong to, and knows what state the model is
// in (loading, ready, failed) so the server can answer /health and refuse work honestly.
import { EventEmitter } from 'node:events';
import { Worker } from 'node:worker_threads';
import type { GrammarSpec } from '../structured/grammar-spec.js';
import type { EngineSetup, ModelInfo } from './build-engine.js';
import type { AddRequest, FromWorker, KvCacheReady, StepStats, ToWorker, WireEvent, WorkerData } from './protocol.js';

export type EngineState = 'starting' | 'loading' | 'ready' | 'failed' | 'closed';

export interface EngineReady {
  readonly backend: string;
  readonly device: string;
  readonly loadMs: number;
  /** The step graphs' capture after the load (absent without it). */
  readonly captureMs?: number;
  readonly maxBatch: number;
  /** The weights' bytes on the device. */
  readonly deviceWeightBytes: number;
  /** The KV cache (absent from an engine without one). */
  readonly kv?: KvCacheReady;
}

export interface EngineClientOptions {
  /** Delay before the weights load (tests of the 503-while-loading answers). */
  readonly loadDelayMs?: number;
  /** The worker script; default: engine-worker.js beside this module's bundle. */
  readonly workerUrl?: URL;
  /** Make the device unusable after this many engine steps (tests of device faults). */
  readonly faultAfterSteps?: number;
}

/** What one request hears from the engine: its tokens as they come, then how it ended. */
export type RequestSink = (event: WireEvent) => void;

/**
 * Events: 'plugins' (PluginsLoaded), 'model' (ModelInfo), 'progress' (loaded, total), 'ready' (EngineReady), 'failed' (Error),
 * 'step' (StepStats | undefined, running, waiting), 'closed'.
 */
export class EngineClient extends EventEmitter {
  #state: EngineState = 'starting';
  #info: ModelInfo | undefined;
  #ready: EngineReady | undefined;
  #failure: Error | undefined;
  #nextId = 1;
  readonly #sinks = new Map<number, RequestSink>();
  #nextGrammar = 1;
  readonly #grammars = new Map<number, { resolve: () => void; reject: (e: Error) => void }>();
  readonly #worker: Worker;
  readonly #closed: Promise<void>;

  constructor(setup: EngineSetup, options: EngineClientOptions = {}) {
    super();
    const data: WorkerData = { setup, loadDelayMs: options.loadDelayMs ?? 0, ...(options.faultAfterSteps !== undefined ? { faultAfterSteps: options.faultAfterSteps } : {}) };
    this.#worker = new Worker(options.workerUrl ?? new URL('./engine-worker.js', import.meta.url), { workerData: data });
    this.#worker.on('message', (m: FromWorker) => this.#onMessage(m));
    this.#closed = new Promise<void>((resolve) => {
      this.#worker.once('exit', (code) => {
        // A worker that dies outside a shutdown takes every request in flight with it.
        if (this.#state !== 'closed') {
          const error = this.#failure ?? new Error(`the engine worker exited unexpectedly (exit code ${code})`);
          this.#fail(error);
        }
        this.#state = 'closed';
        this.emit('closed');
        resolve();
      });
    });
    this.#worker.on('error', (error) => this.#fail(error));
  }

  get state(): EngineState {
    return this.#state;
  }

  /** The model, once the worker has opened its checkpoint. */
  get info(): ModelInfo | undefined {
    return this.#info;
  }

  get ready(): EngineReady | undefined {
    return this.#ready;
  }

  get failure(): Error | undefined {
    return this.#failure;
  }

  /** Requests handed over and not yet finished. */
  get inFlight(): number {
    return this.#sinks.size;
  }

  /** Resolves when the model is ready; rejects when loading failed. */
  whenReady(): Promise<EngineReady> {
    if (this.#ready) return Promise.resolve(this.#ready);
    if (this.#failure) return Promise.reject(this.#failure);
    return new Promise((resolve, reject) => {
      const onReady = (r: EngineReady) => {
        this.off('failed', onFailed);
        resolve(r);
      };
      const onFailed = (e: Error) => {
        this.off('ready', onReady);
        reject(e);
      };
      this.once('ready', onReady);
      this.once('failed', onFailed);
    });
  }

  /** Hands a request to the engine; `sink` hears its tokens and, last, an event with `finish`. */
  submit(req: Omit<AddRequest, 'id'>, sink: RequestSink): number {
    if (this.#state !== 'ready') throw new Error(`the engine is ${this.#state}, not ready`);
    const id = this.#nextId++;
    this.#sinks.set(id, sink);
    this.#post({ t: 'add', req: { ...req, id } });
    return id;
  }

  /**
   * Has the engine check and compile `spec` (once per distinct spec; later calls hit its cache), so
   * that a request's grammar error is known before its answer starts. Rejects with a
   * `GrammarRefusedError` carrying xgrammar's reason.
   */
  prepareGrammar(spec: GrammarSpec): Promise<void> {
    if (this.#state !== 'ready') return Promise.reject(new Error(`the engine is ${this.#state}, not ready`));
    const key = this.#nextGrammar++;
    return new Promise<void>((resolve, reject) => {
      this.#grammars.set(key, { resolve, reject });
      this.#post({ t: 'grammar', key, spec });
    });
  }

  /** Drops a request: the engine frees its slot before its next step; its sink hears nothing more. */
  cancel(id: number): void {
    if (!this.#sinks.delete(id)) return;
    if (this.#state === 'ready') this.#post({ t: 'cancel', id });
  }

  /** Ends every request in flight with an error (`message`) and frees their slots; grammars still compiling are given up. */
  cancelAll(message: string): void {
    const sinks = [...this.#sinks.entries()];
    for (const [id, sink] of sinks) {
      this.cancel(id);
      sink({ id, tokens: [], finish: 'error', error: message, unavailable: true });
    }
    this.#rejectGrammars(new Error(message));
  }

  /** Stops the engine (requests still in flight end with an error) and waits for the worker to exit. */
  async shutdown(timeoutMs = 10_000): Promise<void> {
    if (this.#state !== 'closed') {
      this.cancelAll('the server is shutting down');
      this.#post({ t: 'shutdown' });
      const timer = setTimeout(() => void this.#worker.terminate(), timeoutMs);
      await this.#closed;
      clearTimeout(timer);
    }
  }

  #post(message: ToWorker): void {
    try {
      this.#worker.postMessage(message);
    } catch {
      // The worker is gone; its exit handler ends every request.
    }
  }

  #onMessage(m: FromWorker): void {
    switch (m.t) {
      case 'plugins':
        this.emit('plugins', m.loaded);
        break;
      case 'model':
        this.#info = m.info;
        this.#state = 'loading';
        this.emit('model', m.info);
        break;
      case 'progress':
        this.emit('progress', m.loaded, m.total);
        break;
      case 'ready':
        this.#ready = {
          backend: m.backend, device: m.device, loadMs: m.loadMs, ...(m.captureMs !== undefined ? { captureMs: m.captureMs } : {}), maxBatch: m.maxBatch,
          deviceWeightBytes: m.deviceWeightBytes, ...(m.kv ? { kv: m.kv } : {}),
        };
        this.#state = 'ready';
        this.emit('ready', this.#ready);
        break;
      case 'failed': {
        const error = new Error(m.message);
        if (m.stack) error.stack = m.stack;
        this.#fail(error);
        break;
      }
      case 'step':
        for (const ev of m.events) {
          const sink = this.#sinks.get(ev.id);
          if (!sink) continue;
          if (ev.finish) this.#sinks.delete(ev.id);
          try {
            sink(ev);
          } catch (error) {
            // One request's failure must not reach the others or the process: end that one.
            this.cancel(ev.id);
            if (!ev.finish) {
              try {
                sink({ id: ev.id, tokens: [], finish: 'error', error: `internal error: ${(error as Error).message}` });
              } catch {
                // Its handler is broken; it is cancelled either way.
              }
            }
          }
        }
        this.emit('step', m.stats as StepStats | undefined, m.running, m.waiting);
        break;
      case 'grammar': {
        const waiter = this.#grammars.get(m.key);
        this.#grammars.delete(m.key);
        if (m.error === undefined) waiter?.resolve();
        else waiter?.reject(new GrammarRefusedError(m.error));
        break;
      }
      case 'closed':
        this.#state = 'closed';
        break;
    }
  }

  #rejectGrammars(error: Error): void {
    const waiting = [...this.#grammars.values()];
    this.#grammars.clear();
    for (const g of waiting) g.reject(error);
  }

  #fail(error: Error): void {
    const first = this.#failure === undefined;
    if (first) this.#failure = error;
    if (this.#state !== 'closed') this.#state = 'failed';
    const sinks = [...this.#sinks.entries()];
    this.#sinks.clear();
    for (const [id, sink] of sinks) sink({ id, tokens: [], finish: 'error', error: error.message });
    this.#rejectGrammars(error);
    if (first) this.emit('failed', error);
  }
}

/** The engine's grammar engine refused a schema or tool grammar (a client error). */
export class GrammarRefusedError extends Error {
  override readonly name = 'GrammarRefusedError';
}
