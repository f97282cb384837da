import { Checkpoint } from '@metrale/core';
import type { EngineClient } from '../engine/engine-client.js';
import type { ModelInfo } from '../engine/build-engine.js';
import { TextCodec } from '../generate/text-codec.js';
import { TokenizerPool } from '../tokenizer/tokenizer-pool.js';
import { Admission } from './admission.js';
import { ApiError, notReady } from './api-error.js';
import type { ServedModel } from './request-params.js';
import type { ServerMetrics } from './server-metrics.js';

export interface ServerLimits {
  /** Requests waiting for a slot at most; beyond, 429. */
  readonly maxQueue: number;
  /** How long a generation request may take, from arrival to its last byte (0: no deadline). */
  readonly generationTimeoutMs: number;
  /** Tokenizer threads (tokenizer-pool.ts). */
  readonly tokenizerThreads: number;
}

/** What every route shares: the engine, the model as served, the tokenizer, the metrics, the queue. */
export class ServerContext {
  readonly engine: EngineClient;
  readonly metrics: ServerMetrics;
  readonly limits: ServerLimits;
  readonly admission: Admission;
  /** The name clients pass as `model`; default: the embedded model's name or the checkpoint path. */
  readonly modelName: string | undefined;
  /** The tokenizer on this thread: it decodes the generated tokens as they stream (short windows, cheap). */
  codec: TextCodec | undefined;
  /** The tokenizer threads: prompts, chat templates and /tokenize, off this thread. */
  tokenizer: TokenizerPool | undefined;
  /** Set once shutdown begins: new generation requests get 503. */
  draining = false;
  #tokenizerDir: string | undefined;

  constructor(engine: EngineClient, metrics: ServerMetrics, limits: ServerLimits, modelName?: string) {
    this.engine = engine;
    this.metrics = metrics;
    this.limits = limits;
    this.modelName = modelName;
    this.admission = new Admission(limits.maxQueue, () => engine.ready?.maxBatch ?? 0);
    engine.on('model', (info: ModelInfo) => metrics.setModel(this.modelName ?? info.name, info.maxModelLen));
  }

  /** The model, once its checkpoint is open (before its weights load). */
  get model(): ServedModel | undefined {
    const info = this.engine.info;
    if (!info) return undefined;
    return { name: this.modelName ?? info.name, maxModelLen: info.maxModelLen, vocabSize: info.vocabSize, eosTokenIds: info.eosTokenIds, samplingDefaults: info.samplingDefaults };
  }

  /**
   * Starts the tokenizer threads on the checkpoint's tokenizer, which load it while the weights
   * load. False when the checkpoint has no tokenizer.json (token-id prompts only).
   */
  openTokenizer(dir: string): boolean {
    const checkpoint = Checkpoint.open(dir);
    let has: boolean;
    try {
      has = checkpoint.file('tokenizer.json') !== undefined;
    } finally {
      checkpoint.close();
    }
    if (has) {
      this.tokenizer = TokenizerPool.start(dir, { threads: this.limits.tokenizerThreads, maxQueue: this.limits.maxQueue });
      this.#tokenizerDir = dir;
    }
    return has;
  }

  /**
   * Loads this thread's copy of the tokenizer (openTokenizer's), which decodes the streams.
   * Building it holds the event loop for a second or more, so it is done once the engine is ready,
   * not while the weights load (when /health must keep answering). Throws when the tokenizer cannot
   * be read; then only token-id prompts are served.
   */
  loadDecoder(): void {
    if (!this.#tokenizerDir) return;
    const checkpoint = Checkpoint.open(this.#tokenizerDir);
    try {
      this.codec = TextCodec.fromCheckpoint(checkpoint);
    } catch (error) {
      void this.tokenizer?.close();
      this.tokenizer = undefined;
      throw error;
    } finally {
      checkpoint.close();
    }
  }

  /** Stops the tokenizer threads. */
  async close(): Promise<void> {
    await this.tokenizer?.close();
  }

  /** The model when it can take generation work now; 503 otherwise. */
  servedOrUnavailable(): ServedModel {
    if (this.draining) throw new ApiError(503, 'the server is shutting down', { code: 'shutting_down' });
    const model = this.model;
    if (this.engine.state !== 'ready' || !model) throw notReady(this.engine.state, this.engine.failure);
    return model;
  }

  /** The tokenizer threads, for the routes that need text; 400 when the checkpoint has none. */
  requireTokenizer(field: string): TokenizerPool {
    if (!this.tokenizer) throw new ApiError(400, `${field}: the model has no tokenizer.json; send token ids instead`, { param: field });
    return this.tokenizer;
  }
}
