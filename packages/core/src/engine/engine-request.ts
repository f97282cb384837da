import type { PositionLogprobs } from '../model/logprobs.js';
import type { SamplingParams } from '../model/sampling.js';
import type { TokenConstraint } from './token-constraint.js';

/** One generation request as the engine sees it: token ids in, token ids out. */
export interface EngineRequest {
  /** Unique among the requests the loop holds. */
  readonly id: number;
  readonly prompt: ArrayLike<number>;
  /** Tokens to generate at most (≥ 1). */
  readonly maxTokens: number;
  readonly sampling?: SamplingParams;
  /** Generation ends after one of these; it is part of the output. `sampling.minTokens` holds them back. */
  readonly stopTokenIds?: readonly number[];
  /**
   * Report every generated token's logprob and rank with its row's top N (0: its own only;
   * absent: none). They are the model's logprobs, before the request's logit bias, penalties and
   * temperature (vLLM's default, raw_logprobs).
   */
  readonly logprobs?: number;
  /** Report every prompt token's logprob (none for the first) with its row's top N, as `logprobs`; absent: none. */
  readonly promptLogprobs?: number;
  /** Keep the logits of every prompt row (fixture comparisons; the lm head must compute every row). */
  readonly promptLogits?: boolean;
  /** Only tokens this rule allows are generated (structured output); released when the request leaves. */
  readonly constraint?: TokenConstraint;
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
  /** One entry per token of `tokens`, when the request asked for logprobs. */
  readonly logprobs?: PositionLogprobs[];
  /** With the first token of a request that asked for them: one entry per prompt token (null for the first). */
  promptLogprobs?: (PositionLogprobs | null)[];
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
