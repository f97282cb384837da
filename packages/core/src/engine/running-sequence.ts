import type { Sequence } from '../driver/sequence.js';
import type { PositionLogprobs } from '../model/logprobs.js';
import type { DraftCheck } from '../spec/draft-check.js';
import type { AcceptedDrafts } from '../spec/speculation-gate.js';
import type { EngineRequest, FinishReason } from './engine-request.js';
import { RequestSampler } from './request-sampler.js';

/** A request the engine loop has admitted: its slot's sequence and where its generation stands. */
export interface RunningSequence {
  readonly req: EngineRequest;
  seq: Sequence;
  /** The tokens it prefills: the prompt, or after a preemption the prompt and every token generated before it. */
  prompt: ArrayLike<number>;
  /** Arrival order: the youngest running sequence is preempted first. */
  readonly arrival: number;
  /** Content hashes of its full blocks so far (prefix caching). */
  hashes: string[];
  readonly stop: ReadonlySet<number>;
  readonly sampler: RequestSampler;
  /** Prompt and generated tokens (what the proposer looks up). */
  readonly history: number[];
  prefilled: number;
  generated: number;
  /** The last generated token, not yet fed to the model. */
  pending: number;
  /** Drafts accepted per verify, as the speculation gate estimates them. */
  readonly acceptedDrafts: AcceptedDrafts;
  /** Drafts proposed after a plain decode, checked against the tokens decoded next (`LoopSpeculation.checkDecoded`). */
  shadow?: DraftCheck;
  /** f32 [prompt × vocab] when the request asked for its prompt logits. */
  promptLogits?: Float32Array;
  /** The prompt's logprobs when the request asked for them, until reported with its first token. */
  promptLogprobs?: (PositionLogprobs | null)[];
  finish?: FinishReason;
}

/** A request's state when it first takes a slot (`seq`), the `arrival`-th to do so, over a vocabulary of `vocab`. */
export function startRunning(req: EngineRequest, seq: Sequence, arrival: number, vocab: number): RunningSequence {
  return {
    req,
    seq,
    prompt: req.prompt,
    arrival,
    hashes: [],
    stop: new Set(req.stopTokenIds ?? []),
    sampler: new RequestSampler(req.sampling, req.prompt, req.stopTokenIds ?? []),
    history: Array.from(req.prompt),
    prefilled: 0,
    generated: 0,
    pending: -1,
    acceptedDrafts: {},
    ...(req.promptLogits ? { promptLogits: new Float32Array(req.prompt.length * vocab) } : {}),
    ...(req.promptLogprobs !== undefined ? { promptLogprobs: [null] } : {}),
  };
}
