import type { Sequence } from '../driver/sequence.js';
import type { StepDriver } from '../driver/step-driver.js';
import { InvalidArgumentError } from '../errors.js';
import { SeededRandom } from '../random/seeded-random.js';
import type { DraftProposer } from '../spec/ngram-proposer.js';
import { verifyDrafts } from '../spec/verify-drafts.js';
import { MAX_LOGPROBS, topLogprobs, type TokenLogprob } from './logprobs.js';
import { checkSampling, isGreedy, sampleLogitsRow, type SamplingParams } from './sampling.js';

export interface GenerateRequest {
  readonly prompt: ArrayLike<number>;
  /** Tokens to generate at most. */
  readonly maxTokens: number;
  readonly sampling?: SamplingParams;
  /** Generation ends after one of these (it is part of the output). */
  readonly stopTokenIds?: readonly number[];
  /** Report the top-N logprobs of every generated token (0 or absent: none). */
  readonly logprobs?: number;
}

export type FinishReason = 'length' | 'stop' | 'capacity';

export interface GenerateOutput {
  readonly tokens: number[];
  readonly finishReason: FinishReason;
  /** f32 [prompt length × vocab], when the runner collects prompt logits. */
  readonly promptLogits?: Float32Array;
  /** One list per generated token when the request asked for logprobs: its row's top N, best first. */
  readonly logprobs?: TokenLogprob[][];
}

export interface SpeculationStats {
  /** Draft tokens per step, at most. */
  readonly k: number;
  readonly verifySteps: number;
  /** Draft tokens proposed (padding of short proposals not counted) and accepted. */
  readonly drafted: number;
  readonly accepted: number;
  readonly acceptanceRate: number;
}

export interface GenerateStats {
  readonly promptTokens: number;
  readonly generatedTokens: number;
  readonly prefillMs: number;
  readonly decodeMs: number;
  /** Generated tokens per second of decode time (after the prefill). */
  readonly tokensPerSecond: number;
  readonly steps: { readonly prefill: number; readonly decode: number; readonly verify: number };
  readonly speculation?: SpeculationStats;
}

export interface ModelRunnerOptions {
  readonly driver: StepDriver;
  readonly vocabSize: number;
  /** Speculative decoding: `k` draft tokens per step from `proposer`, verified in one step. */
  readonly speculation?: { readonly proposer: DraftProposer; readonly k: number };
  /** Keep every prompt row's logits (fixture comparisons). */
  readonly collectPromptLogits?: boolean;
}

interface Running {
  readonly request: GenerateRequest;
  readonly seq: Sequence;
  readonly history: number[];
  readonly tokens: number[];
  readonly stop: ReadonlySet<number>;
  readonly random: SeededRandom;
  readonly greedy: boolean;
  promptLogits?: Float32Array;
  readonly logprobs: TokenLogprob[][] | undefined;
  /** Generated, not yet fed to the model. */
  pending: number;
  finish?: FinishReason;
}

/**
 * Generation for a batch of sequences on a `StepDriver` whose stack ends in logits: one prefill,
 * then decode steps (or verify steps with speculation), sampling on the host. Greedy output is the
 * same with and without speculation, token for token.
 */
export class ModelRunner {
  readonly driver: StepDriver;
  readonly vocab: number;
  readonly #spec: ModelRunnerOptions['speculation'];
  readonly #collect: boolean;

  constructor(options: ModelRunnerOptions) {
    this.driver = options.driver;
    this.vocab = options.vocabSize;
    this.#spec = options.speculation;
    this.#collect = options.collectPromptLogits ?? false;
    if (!Number.isInteger(this.vocab) || this.vocab < 1) throw new InvalidArgumentError(`ModelRunner: vocabSize must be a positive integer, got ${this.vocab}`);
    if (this.#spec) {
      const { k } = this.#spec;
      if (!Number.isInteger(k) || k < 1) throw new InvalidArgumentError(`ModelRunner: speculation.k must be a positive integer, got ${k}`);
      if (k + 1 > this.driver.limits.maxK) {
        throw new InvalidArgumentError(`ModelRunner: ${k} draft tokens need verify steps of ${k + 1} rows, but the driver's maxK is ${this.driver.limits.maxK}`);
      }
    }
  }

  generate(requests: readonly GenerateRequest[]): { outputs: GenerateOutput[]; stats: GenerateStats } {
    if (requests.length === 0) throw new InvalidArgumentError('generate: give at least one request');
    if (requests.length > this.driver.limits.maxSeqs) throw new InvalidArgumentError(`generate: ${requests.length} requests exceed the driver's ${this.driver.limits.maxSeqs} sequence slots`);
    requests.forEach((r, i) => this.#check(r, i));
    const steps = { prefill: 0, decode: 0, verify: 0 };
    const spec = { verifySteps: 0, drafted: 0, accepted: 0 };
    const running: Running[] = [];
    try {
      for (const [i, request] of requests.entries()) {
        running.push({
          request,
          seq: this.driver.open(),
          history: Array.from(request.prompt),
          tokens: [],
          stop: new Set(request.stopTokenIds ?? []),
          random: new SeededRandom(request.sampling?.seed ?? i),
          greedy: isGreedy(request.sampling),
          logprobs: request.logprobs ? [] : undefined,
          pending: -1,
        });
      }
      const t0 = performance.now();
      steps.prefill = this.#prefill(running);
      const t1 = performance.now();
      for (;;) {
        const active = running.filter((r) => !r.finish);
        if (active.length === 0) break;
        for (let i = 0; i < active.length; i += this.driver.limits.maxBatch) {
          const group = active.slice(i, i + this.driver.limits.maxBatch);
          if (this.#spec && this.#speculate(group, spec)) steps.verify++;
          else {
            this.#decode(group);
            steps.decode++;
          }
        }
      }
      const t2 = performance.now();
      const generated = running.reduce((a, r) => a + r.tokens.length, 0);
      const decodeMs = t2 - t1;
      const stats: GenerateStats = {
        promptTokens: requests.reduce((a, r) => a + r.prompt.length, 0),
        generatedTokens: generated,
        prefillMs: t1 - t0,
        decodeMs,
        // The first token of each sequence comes from the prefill.
        tokensPerSecond: decodeMs > 0 ? ((generated - running.length) * 1000) / decodeMs : 0,
        steps,
        ...(this.#spec
          ? { speculation: { k: this.#spec.k, verifySteps: spec.verifySteps, drafted: spec.drafted, accepted: spec.accepted, acceptanceRate: spec.drafted ? spec.accepted / spec.drafted : 0 } }
          : {}),
      };
      const outputs = running.map((r) => ({
        tokens: r.tokens, finishReason: r.finish!,
        ...(r.promptLogits ? { promptLogits: r.promptLogits } : {}),
        ...(r.logprobs ? { logprobs: r.logprobs } : {}),
      }));
      return { outputs, stats };
    } finally {
      for (const r of running) this.driver.close(r.seq);
    }
  }

  #check(r: GenerateRequest, i: number): void {
    const bad = (why: string): never => {
      throw new InvalidArgumentError(`generate: request ${i}: ${why}`);
    };
    if (r.prompt.length < 1) bad('the prompt is empty');
    for (let j = 0; j < r.prompt.length; j++) {
      const t = r.prompt[j]!;
      if (!Number.isInteger(t) || t < 0 || t >= this.vocab) bad(`prompt token ${t} at ${j} is outside the vocabulary (${this.vocab})`);
    }
    if (!Number.isInteger(r.maxTokens) || r.maxTokens < 1) bad(`maxTokens must be a positive integer, got ${r.maxTokens}`);
    if (r.prompt.length + 1 > this.driver.limits.maxSeqLen) bad(`a prompt of ${r.prompt.length} tokens leaves no room in sequences of ${this.driver.limits.maxSeqLen} rows`);
    if (r.sampling) checkSampling(r.sampling);
    if (r.logprobs !== undefined && !(Number.isInteger(r.logprobs) && r.logprobs >= 0 && r.logprobs <= MAX_LOGPROBS)) bad(`logprobs must be an integer in 0..${MAX_LOGPROBS}, got ${r.logprobs}`);
  }

  /** Prefills every prompt; each sequence samples its first token from its last prompt row. */
  #prefill(running: Running[]): number {
    const V = this.vocab;
    const lengths = running.map((r) => r.request.prompt.length);
    const tokens = Int32Array.from(running.flatMap((r) => Array.from(r.request.prompt)));
    const starts: number[] = [];
    let total = 0;
    for (const n of lengths) {
      starts.push(total);
      total += n;
    }
    if (this.#collect) for (const r of running) r.promptLogits = new Float32Array(r.request.prompt.length * V);
    let chunks = 0;
    this.driver.prefill({ seqs: running.map((r) => r.seq), lengths, tokens }, (result, first) => {
      chunks++;
      const logits = this.driver.readOutputF32(result);
      const end = first + result.rows;
      running.forEach((r, i) => {
        const a = Math.max(first, starts[i]!);
        const b = Math.min(end, starts[i]! + lengths[i]!);
        if (a >= b) return;
        r.promptLogits?.set(logits.subarray((a - first) * V, (b - first) * V), (a - starts[i]!) * V);
        const last = starts[i]! + lengths[i]! - 1;
        if (last >= a && last < b) this.#emitRow(r, logits, last - first);
      });
    });
    return chunks;
  }

  #decode(group: Running[]): void {
    const V = this.vocab;
    for (const r of group) if (r.seq.length + 1 > this.driver.limits.maxSeqLen) r.finish = 'capacity';
    const live = group.filter((r) => !r.finish);
    if (live.length === 0) return;
    const result = this.driver.decode({ seqs: live.map((r) => r.seq), tokens: Int32Array.from(live, (r) => r.pending) });
    const logits = this.driver.readOutputF32(result);
    live.forEach((r, i) => this.#emitRow(r, logits, i));
  }

  /** One verify step for the group; false when no sequence has a draft (the caller decodes). */
  #speculate(group: Running[], spec: { verifySteps: number; drafted: number; accepted: number }): boolean {
    const V = this.vocab;
    const { proposer, k: maxDrafts } = this.#spec!;
    const maxSeqLen = this.driver.limits.maxSeqLen;
    for (const r of group) if (r.seq.length + 1 > maxSeqLen) r.finish = 'capacity';
    const live = group.filter((r) => !r.finish);
    if (live.length === 0) return false;
    // Every sequence of a verify step gets k rows: k fits the tightest room and the longest proposal.
    const room = Math.min(...live.map((r) => maxSeqLen - r.seq.length));
    const drafts = live.map((r) => proposer.propose(r.history, Math.min(maxDrafts, r.request.maxTokens - r.tokens.length - 1, room - 1)));
    const outcome = verifyDrafts(this.driver, V, live.map((r) => ({ ...r, sampling: r.request.sampling, logprobs: r.request.logprobs ?? 0 })), drafts);
    if (!outcome) return false;
    spec.verifySteps++;
    live.forEach((r, i) => {
      spec.drafted += drafts[i]!.length;
      spec.accepted += outcome.accepted[i]!;
      this.#emit(r, outcome.emitted[i]!, outcome.logprobs[i]);
    });
    return true;
  }

  /** Samples the token of logit row `row` (with its logprobs when asked) and emits it. */
  #emitRow(r: Running, logits: Float32Array, row: number): void {
    const token = sampleLogitsRow(logits, this.vocab, row, r.request.sampling, r.random);
    this.#emit(r, [token], r.logprobs ? [topLogprobs(logits, this.vocab, row, r.request.logprobs!)] : undefined);
  }

  /** Appends generated tokens (and their logprobs) up to a stop token or the token budget. */
  #emit(r: Running, tokens: number[], logprobs?: TokenLogprob[][]): void {
    for (const [i, t] of tokens.entries()) {
      if (r.finish) return;
      r.tokens.push(t);
      if (r.logprobs && logprobs) r.logprobs.push(logprobs[i]!);
      r.history.push(t);
      r.pending = t;
      if (r.stop.has(t)) r.finish = 'stop';
      else if (r.tokens.length >= r.request.maxTokens) r.finish = 'length';
    }
  }
}
