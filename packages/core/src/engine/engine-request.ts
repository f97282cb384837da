import type { TokenLogprob } from '../model/logprobs.js';
import type { SamplingParams } from '../model/sampling.js';

/** One generation request as the engine sees it: token ids in, token ids out. */
export interface EngineRequest {
  /** Unique among the requests the loop holds. */
  readonly id: number;
  readonly prompt: ArrayLike<number>;
  /** Tokens to generate at most (≥ 1). */
  readonly maxTokens: number;
  readonly sampling?: SamplingParams;
  /** Generation ends after one of these; it is part of the output. */
  readonly stopTokenIds?: readonly number[];
  /** Report the top-N logprobs of every generated token (0 or absent: none). */
  readonly logprobs?: number;
  /** Keep the logits of every prompt row (fixture comparisons; the lm head must compute every row). */
  readonly promptLogits?: boolean;
}

/**
 * Why a request ended: a stop token (`stop`), its token budget (`length`), cancelled by its client
 * or the server (`abort`), or a failed step (`error`). The one finish reason of metrale.
 */
export type FinishReason = 'stop' | 'length' | 'abort' | 'error';

/** What a step produced for one request: its new tokens (with their logprobs), and how it ended when it did. */
export interface TokenEvent {
  readonly id: number;
  readonly tokens: number[];
  /** One list per token of `tokens`, when the request asked for logprobs. */
  readonly logprobs?: TokenLogprob[][];
  finish?: FinishReason;
  error?: string;
}

/** What one engine step did. */
export interface EngineStepReport {
  readonly events: TokenEvent[];
  /** Prompt rows prefilled in this step, and the sequences they belonged to. */
  readonly prefillRows: number;
  readonly prefillSeqs: number;
  /** Sequences in the decode or verify step (0 when none ran), and the verify width (1: plain decode). */
  readonly decodeSeqs: number;
  readonly k: number;
  /** Draft tokens proposed and accepted in this step (speculation). */
  readonly drafted: number;
  readonly accepted: number;
  /** Sequences holding a slot, and requests waiting for one, after the step. */
  readonly running: number;
  readonly waiting: number;
  /** Share of the KV page pool held by running sequences after the step (1: full). */
  readonly kvUsage: number;
  /** Prompt tokens of the sequences admitted in this step, and how many of them were found in the prefix cache. */
  readonly prefixQueries: number;
  readonly prefixHits: number;
  /** Sequences preempted in this step (to be recomputed). */
  readonly preemptions: number;
  readonly ms: number;
}
