// Messages between the HTTP thread (engine-client.ts) and the engine worker (engine-worker.ts).
// Requests, tokens and cancellations cross the boundary; model code runs only in the worker.
import type { EngineStepReport, FinishReason, PositionLogprobs, SamplingParams, Seed } from '@metrale/core';
import type { PluginWarning, Provision } from '../plugins/build-registry.js';
import type { GrammarSpec } from '../structured/grammar-spec.js';
import type { EngineSetup, ModelInfo } from './build-engine.js';

export interface WorkerData {
  readonly setup: EngineSetup;
  /** Delay before the weights load (tests of the 503-while-loading answers). */
  readonly loadDelayMs: number;
  /** Make the device unusable after this many steps, as a device fault would (tests of /health). */
  readonly faultAfterSteps?: number;
}

export interface AddRequest {
  readonly id: number;
  readonly prompt: Int32Array;
  readonly maxTokens: number;
  readonly sampling?: SamplingParams;
  readonly seed?: Seed;
  readonly stopTokenIds: readonly number[];
  /** The output must follow this grammar (structured output, forced tool calls). */
  readonly grammar?: GrammarSpec;
  /** Each generated token's logprob with its position's top N (EngineRequest.logprobs); absent: none. */
  readonly logprobs?: number;
  /** The same for every prompt token (echo with logprobs); absent: none. */
  readonly promptLogprobs?: number;
}

export type ToWorker =
  | { readonly t: 'add'; readonly req: AddRequest }
  | { readonly t: 'cancel'; readonly id: number }
  /** Check and compile a grammar before a request uses it; answered by a 'grammar' message with the same key. */
  | { readonly t: 'grammar'; readonly key: number; readonly spec: GrammarSpec }
  | { readonly t: 'shutdown' };

export interface WireEvent {
  readonly id: number;
  readonly tokens: number[];
  /** One entry per token of `tokens`, when the request asked for logprobs. */
  readonly logprobs?: PositionLogprobs[];
  /** With the first tokens of a request that asked for them: one per prompt token, null for the first. */
  readonly promptLogprobs?: (PositionLogprobs | null)[];
  readonly finish?: FinishReason;
  readonly error?: string;
  /** Set when the engine refused the request (a bad token id, no room): a client error. */
  readonly rejected?: boolean;
  /** Set when the server ended the request itself (shutdown): retry elsewhere. */
  readonly unavailable?: boolean;
}

/** What a step did, as the metrics need it (an engine step report without its events and queue sizes). */
export type StepStats = Pick<
  EngineStepReport,
  'prefillRows' | 'prefillSeqs' | 'decodeSeqs' | 'k' | 'drafted' | 'accepted' | 'kvUsage' | 'prefixQueries' | 'prefixHits' | 'preemptions' | 'ms'
>;

/** The KV cache the engine made: what the startup log reports. */
export interface KvCacheReady {
  readonly pageSize: number;
  readonly pages: number;
  /** Tokens the pool holds (all sequences together). */
  readonly tokens: number;
  readonly bytes: number;
  /** Snapshot entries of recurrent state (prefix caching of hybrid models). */
  readonly snapshots: number;
  readonly prefixCaching: boolean;
}

/** What the worker loaded its plugins into: who serves each architecture and layer type, and what was left out. */
export interface PluginsLoaded {
  readonly modelTypes: readonly Provision[];
  readonly layerTypes: readonly Provision[];
  readonly warnings: readonly PluginWarning[];
}

export type FromWorker =
  | { readonly t: 'plugins'; readonly loaded: PluginsLoaded }
  | { readonly t: 'model'; readonly info: ModelInfo }
  | { readonly t: 'progress'; readonly loaded: number; readonly total: number }
  | {
      readonly t: 'ready'; readonly backend: string; readonly device: string; readonly loadMs: number; readonly maxBatch: number; readonly deviceWeightBytes: number;
      /** Time spent capturing the step graphs of every batch bucket after the load (absent without it). */
      readonly captureMs?: number;
      readonly kv?: KvCacheReady;
    }
  | { readonly t: 'failed'; readonly message: string; readonly stack?: string }
  | { readonly t: 'step'; readonly events: WireEvent[]; readonly running: number; readonly waiting: number; readonly stats?: StepStats }
  /** A grammar compiled (no error) or refused (xgrammar's reason). */
  | { readonly t: 'grammar'; readonly key: number; readonly error?: string }
  | { readonly t: 'closed' };
