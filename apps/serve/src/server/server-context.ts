import type { EngineClient } from '../engine/engine-client.js';
import type { ModelInfo } from '../engine/build-engine.js';
import type { TextCodec } from '../generate/text-codec.js';
import { ApiError, notReady } from './api-error.js';
import type { ServedModel } from './request-params.js';
import type { ServerMetrics } from './server-metrics.js';

export interface ServerLimits {
  /** Requests waiting for a slot at most; beyond, 429. */
  readonly maxQueue: number;
}

/** What every route shares: the engine, the model as served, the tokenizer, the metrics. */
export class ServerContext {
  readonly engine: EngineClient;
  readonly metrics: ServerMetrics;
  readonly limits: ServerLimits;
  /** The name clients pass as `model`; default: the embedded model's name or the checkpoint path. */
  readonly modelName: string | undefined;
  codec: TextCodec | undefined;
  /** Set once shutdown begins: new generation requests get 503. */
  draining = false;

  constructor(engine: EngineClient, metrics: ServerMetrics, limits: ServerLimits, modelName?: string) {
    this.engine = engine;
    this.metrics = metrics;
    this.limits = limits;
    this.modelName = modelName;
    engine.on('model', (info: ModelInfo) => metrics.setModel(this.modelName ?? info.name, info.maxModelLen));
  }

  /** The model, once its checkpoint is open (before its weights load). */
  get model(): ServedModel | undefined {
    const info = this.engine.info;
    if (!info) return undefined;
    return { name: this.modelName ?? info.name, maxModelLen: info.maxModelLen, vocabSize: info.vocabSize, eosTokenIds: info.eosTokenIds };
  }

  /** The model when it can take generation work now; 503 otherwise. */
  servedOrUnavailable(): ServedModel {
    if (this.draining) throw new ApiError(503, 'the server is shutting down', { code: 'shutting_down' });
    const model = this.model;
    if (this.engine.state !== 'ready' || !model) throw notReady(this.engine.state, this.engine.failure);
    return model;
  }

  /** The tokenizer, for the routes that need text; 400 when the checkpoint has none. */
  requireCodec(field: string): TextCodec {
    if (!this.codec) throw new ApiError(400, `${field}: the model has no tokenizer.json; send token ids instead`, { param: field });
    return this.codec;
  }

  /** 429 when `count` more requests would overflow the queue. */
  admit(count: number): void {
    const slots = this.engine.ready?.maxBatch ?? 0;
    const waiting = this.engine.inFlight + count - slots;
    if (waiting > this.limits.maxQueue) {
      throw new ApiError(429, `the server is at capacity (${this.engine.inFlight} requests in flight, ${slots} running at once and ${this.limits.maxQueue} waiting at most); retry later`, { code: 'queue_full' });
    }
  }
}
