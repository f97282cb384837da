import type { Sequence } from '../driver/sequence.js';
import type { StepResult } from '../driver/step-driver.js';
import type { StepRunner } from '../driver/step-runner.js';
import { offsetPtr } from '../device/device-ptr.js';
import { InvalidArgumentError } from '../errors.js';
import { MAX_LOGPROBS, topLogprobs, type TokenLogprob } from '../model/logprobs.js';
import { checkSampling, isGreedy, sampleLogitsRow } from '../model/sampling.js';
import { SeededRandom } from '../random/seeded-random.js';
import type { DraftProposer } from '../spec/ngram-proposer.js';
import { verifyDrafts } from '../spec/verify-drafts.js';
import type { EngineRequest, FinishReason, EngineStepReport, TokenEvent } from './engine-request.js';

export interface EngineLoopOptions {
  /** A driver (one device, or a tensor-parallel group) whose stack ends in f32 logits rows of `vocabSize`. */
  readonly driver: StepRunner;
  readonly vocabSize: number;
  /**
   * Prompt rows a sequence prefills per step. A prompt is cut at multiples of this from its start
   * whatever else runs, so its numbers do not depend on the other requests; several short prompts
   * share a step up to the driver's maxRows.
   */
  readonly prefillChunk: number;
  /** n-gram (or any) speculation: up to `k` draft tokens per sequence and step, verified in one step. */
  readonly speculation?: { readonly proposer: DraftProposer; readonly k: number };
}

interface Running {
  readonly req: EngineRequest;
  readonly seq: Sequence;
  readonly stop: ReadonlySet<number>;
  readonly random: SeededRandom;
  /** Prompt and generated tokens (what the proposer looks up). */
  readonly history: number[];
  prefilled: number;
  generated: number;
  /** The last generated token, not yet fed to the model. */
  pending: number;
  /** f32 [prompt × vocab] when the request asked for its prompt logits. */
  promptLogits?: Float32Array;
  finish?: FinishReason;
}

/**
 * The one engine loop: continuous batching over a `StepDriver`, for `metrale serve`, `metrale
 * generate` and the benchmarks alike. Requests wait in a queue, take a sequence slot when one is
 * free, prefill their prompt in fixed chunks and then decode (or verify drafts) together with every
 * other running sequence; one that finishes or is cancelled gives its slot back before the next
 * step. Each step is: admit, one prefill step (chunks of the prompts in flight, up to maxRows
 * rows), one decode or verify step for every sequence past its prompt.
 *
 * Results do not depend on the batch: a prompt is always cut at the same places, the driver's
 * padding rows are inert and every layer keeps per-sequence state, so a greedy request returns
 * the same tokens alone and among others. A sampled request draws from a stream seeded by its
 * `sampling.seed`, or by its id.
 */
export class EngineLoop {
  readonly driver: StepRunner;
  readonly vocab: number;
  readonly prefillChunk: number;
  readonly #spec: EngineLoopOptions['speculation'];
  readonly #waiting: EngineRequest[] = [];
  readonly #running: Running[] = [];
  readonly #ids = new Set<number>();
  readonly #promptLogits = new Map<number, Float32Array>();
  readonly #logitsRow: number;

  constructor(options: EngineLoopOptions) {
    this.driver = options.driver;
    this.vocab = options.vocabSize;
    this.prefillChunk = options.prefillChunk;
    this.#spec = options.speculation;
    this.#logitsRow = 4 * this.vocab;
    const { limits } = this.driver;
    if (!Number.isInteger(this.vocab) || this.vocab < 1) throw new InvalidArgumentError(`engine loop: vocabSize must be a positive integer, got ${this.vocab}`);
    if (!Number.isInteger(this.prefillChunk) || this.prefillChunk < 1 || this.prefillChunk > limits.maxRows) {
      throw new InvalidArgumentError(`engine loop: prefillChunk must be between 1 and the driver's maxRows (${limits.maxRows}), got ${this.prefillChunk}`);
    }
    if (limits.maxBatch < limits.maxSeqs) throw new InvalidArgumentError(`engine loop: maxBatch (${limits.maxBatch}) must hold every slot (maxSeqs ${limits.maxSeqs})`);
    if (this.#spec) {
      const { k } = this.#spec;
      if (!Number.isInteger(k) || k < 1) throw new InvalidArgumentError(`engine loop: speculation.k must be a positive integer, got ${k}`);
      if (k + 1 > limits.maxK) throw new InvalidArgumentError(`engine loop: ${k} draft tokens need verify steps of ${k + 1} rows, but the driver's maxK is ${limits.maxK}`);
    }
  }

  /** Longest prompt + generation a request may ask for (the driver's rows less one verify's overhang). */
  get maxTotalTokens(): number {
    return this.driver.limits.maxSeqLen - this.driver.limits.maxK + 1;
  }

  get running(): number {
    return this.#running.length;
  }

  get waiting(): number {
    return this.#waiting.length;
  }

  get idle(): boolean {
    return this.#running.length === 0 && this.#waiting.length === 0;
  }

  /** Queues a request; throws `InvalidArgumentError` (and queues nothing) when it cannot run. */
  add(req: EngineRequest): void {
    const bad = (why: string): never => {
      throw new InvalidArgumentError(`request ${req.id}: ${why}`);
    };
    if (this.#ids.has(req.id)) bad('this id is already in use');
    if (req.prompt.length < 1) bad('the prompt is empty');
    for (let j = 0; j < req.prompt.length; j++) {
      const t = req.prompt[j]!;
      if (!Number.isInteger(t) || t < 0 || t >= this.vocab) bad(`prompt token ${t} at ${j} is outside the vocabulary (${this.vocab})`);
    }
    if (!Number.isInteger(req.maxTokens) || req.maxTokens < 1) bad(`maxTokens must be a positive integer, got ${req.maxTokens}`);
    if (req.prompt.length + req.maxTokens > this.maxTotalTokens) {
      bad(`${req.prompt.length} prompt tokens + ${req.maxTokens} to generate exceed the ${this.maxTotalTokens} a sequence holds`);
    }
    if (req.sampling) checkSampling(req.sampling);
    if (req.logprobs !== undefined && !(Number.isInteger(req.logprobs) && req.logprobs >= 0 && req.logprobs <= MAX_LOGPROBS)) {
      bad(`logprobs must be an integer in 0..${MAX_LOGPROBS}, got ${req.logprobs}`);
    }
    this.#ids.add(req.id);
    this.#waiting.push(req);
  }

  /** Drops a request: from the queue, or from its slot at once (its cache is free for the next step). */
  cancel(id: number): boolean {
    const w = this.#waiting.findIndex((r) => r.id === id);
    if (w >= 0) {
      this.#waiting.splice(w, 1);
      this.#ids.delete(id);
      return true;
    }
    const r = this.#running.findIndex((x) => x.req.id === id);
    if (r < 0) return false;
    this.#retire(r);
    return true;
  }

  /** Cancels everything (shutdown); returns the ids it dropped. */
  cancelAll(): number[] {
    const ids = [...this.#waiting.map((r) => r.id), ...this.#running.map((r) => r.req.id)];
    for (const id of ids) this.cancel(id);
    return ids;
  }

  /** The prompt logits of a finished request that asked for them (f32 [prompt × vocab]), handed over once. */
  takePromptLogits(id: number): Float32Array | undefined {
    const logits = this.#promptLogits.get(id);
    this.#promptLogits.delete(id);
    return logits;
  }

  /** One engine step; a no-op report when idle. */
  step(): EngineStepReport {
    const t0 = performance.now();
    const events = new Map<number, TokenEvent>();
    this.#admit();
    const prefill = this.#prefill(events);
    const decode = this.#decodeOrVerify(events);
    // Finished sequences give their slots back now, before anything else is admitted.
    for (let i = this.#running.length - 1; i >= 0; i--) if (this.#running[i]!.finish) this.#retire(i);
    return {
      events: [...events.values()],
      prefillRows: prefill.rows,
      prefillSeqs: prefill.seqs,
      decodeSeqs: decode.seqs,
      k: decode.k,
      drafted: decode.drafted,
      accepted: decode.accepted,
      running: this.#running.length,
      waiting: this.#waiting.length,
      ms: performance.now() - t0,
    };
  }

  #admit(): void {
    while (this.#waiting.length > 0 && this.#running.length < this.driver.limits.maxSeqs) {
      const req = this.#waiting.shift()!;
      this.#running.push({
        req,
        seq: this.driver.open(),
        stop: new Set(req.stopTokenIds ?? []),
        random: new SeededRandom(req.sampling?.seed ?? req.id),
        history: Array.from(req.prompt),
        prefilled: 0,
        generated: 0,
        pending: -1,
        ...(req.promptLogits ? { promptLogits: new Float32Array(req.prompt.length * this.vocab) } : {}),
      });
    }
  }

  #retire(index: number): void {
    const r = this.#running[index]!;
    this.#running.splice(index, 1);
    this.#ids.delete(r.req.id);
    if (r.promptLogits && r.finish && r.finish !== 'error') this.#promptLogits.set(r.req.id, r.promptLogits);
    try {
      this.driver.close(r.seq);
    } catch {
      // The driver lost track of it after a failed step; the slot is gone with it.
    }
  }

  /** Prompt chunks of the sequences still prefilling, oldest first, as many as one step holds. */
  #prefill(events: Map<number, TokenEvent>): { rows: number; seqs: number } {
    const { maxRows, maxBatch } = this.driver.limits;
    const chunk: Running[] = [];
    const lengths: number[] = [];
    let rows = 0;
    for (const r of this.#running) {
      if (r.prefilled >= r.req.prompt.length) continue;
      const n = Math.min(this.prefillChunk, r.req.prompt.length - r.prefilled);
      if (rows + n > maxRows || chunk.length === maxBatch) break;
      chunk.push(r);
      lengths.push(n);
      rows += n;
    }
    if (chunk.length === 0) return { rows: 0, seqs: 0 };
    const tokens = new Int32Array(rows);
    let at = 0;
    chunk.forEach((r, i) => {
      for (let j = 0; j < lengths[i]!; j++) tokens[at++] = r.req.prompt[r.prefilled + j]!;
    });
    let result: StepResult;
    try {
      // rows ≤ maxRows and sequences ≤ maxBatch: the driver runs this as one chunk, as asked.
      result = this.driver.prefill({ seqs: chunk.map((r) => r.seq), lengths, tokens });
    } catch (error) {
      this.#fail(chunk, error, events);
      return { rows, seqs: chunk.length };
    }
    // Every row when a request keeps its prompt logits; else only the last row of a finished prompt.
    const all = chunk.some((r) => r.promptLogits) ? this.driver.readOutputF32(result) : undefined;
    let row = 0;
    const done: { r: Running; row: number }[] = [];
    chunk.forEach((r, i) => {
      if (r.promptLogits) r.promptLogits.set(all!.subarray(row * this.vocab, (row + lengths[i]!) * this.vocab), r.prefilled * this.vocab);
      row += lengths[i]!;
      r.prefilled += lengths[i]!;
      if (r.prefilled === r.req.prompt.length) done.push({ r, row: row - 1 });
    });
    if (done.length > 0) {
      if (!all) this.driver.gpu.synchronize(this.driver.stream);
      for (const { r, row: last } of done) {
        let logits: Float32Array;
        if (all) logits = all.subarray(last * this.vocab, (last + 1) * this.vocab);
        else {
          const bytes = this.driver.gpu.download(offsetPtr(result.output, last * this.#logitsRow), this.#logitsRow);
          logits = new Float32Array(bytes.buffer, bytes.byteOffset, this.vocab);
        }
        this.#emitRow(r, logits, 0, events);
      }
    }
    return { rows, seqs: chunk.length };
  }

  #decodeOrVerify(events: Map<number, TokenEvent>): { seqs: number; k: number; drafted: number; accepted: number } {
    const live = this.#running.filter((r) => !r.finish && r.prefilled === r.req.prompt.length);
    if (live.length === 0) return { seqs: 0, k: 0, drafted: 0, accepted: 0 };
    try {
      if (this.#spec) {
        const verified = this.#verify(live, events);
        if (verified) return verified;
      }
      const result = this.driver.decode({ seqs: live.map((r) => r.seq), tokens: Int32Array.from(live, (r) => r.pending) });
      const logits = this.driver.readOutputF32(result);
      live.forEach((r, i) => this.#emitRow(r, logits, i, events));
      return { seqs: live.length, k: 1, drafted: 0, accepted: 0 };
    } catch (error) {
      this.#fail(live, error, events);
      return { seqs: live.length, k: 1, drafted: 0, accepted: 0 };
    }
  }

  /** One verify step over `live`; undefined when no sequence has a draft (the caller decodes). */
  #verify(live: Running[], events: Map<number, TokenEvent>): { seqs: number; k: number; drafted: number; accepted: number } | undefined {
    const { proposer, k: maxDrafts } = this.#spec!;
    // A sequence's drafts never run past its token budget, so every verify row lies inside the room
    // `add` checked (prompt + maxTokens ≤ maxSeqLen − maxK + 1).
    const drafts = live.map((r) => proposer.propose(r.history, Math.min(maxDrafts, r.req.maxTokens - r.generated - 1)));
    const outcome = verifyDrafts(
      this.driver, this.vocab,
      live.map((r) => ({ seq: r.seq, pending: r.pending, greedy: isGreedy(r.req.sampling), random: r.random, logprobs: r.req.logprobs ?? 0, ...(r.req.sampling ? { sampling: r.req.sampling } : {}) })),
      drafts,
    );
    if (!outcome) return undefined;
    let drafted = 0;
    let accepted = 0;
    live.forEach((r, i) => {
      drafted += drafts[i]!.length;
      accepted += outcome.accepted[i]!;
      this.#emit(r, outcome.emitted[i]!, outcome.logprobs[i], events);
    });
    return { seqs: live.length, k: outcome.k, drafted, accepted };
  }

  /** Samples the token of logit row `row` (with its logprobs when asked) and emits it. */
  #emitRow(r: Running, logits: Float32Array, row: number, events: Map<number, TokenEvent>): void {
    const token = sampleLogitsRow(logits, this.vocab, row, r.req.sampling, r.random);
    this.#emit(r, [token], r.req.logprobs ? [topLogprobs(logits, this.vocab, row, r.req.logprobs)] : undefined, events);
  }

  /** Appends generated tokens (and their logprobs) up to a stop token or the budget, and reports them. */
  #emit(r: Running, tokens: number[], logprobs: TokenLogprob[][] | undefined, events: Map<number, TokenEvent>): void {
    let ev = events.get(r.req.id);
    if (!ev) {
      ev = { id: r.req.id, tokens: [], ...(r.req.logprobs ? { logprobs: [] } : {}) };
      events.set(r.req.id, ev);
    }
    for (const [i, t] of tokens.entries()) {
      if (r.finish) return;
      ev.tokens.push(t);
      if (ev.logprobs && logprobs) ev.logprobs.push(logprobs[i]!);
      r.history.push(t);
      r.generated++;
      r.pending = t;
      if (r.stop.has(t)) r.finish = 'stop';
      else if (r.generated >= r.req.maxTokens) r.finish = 'length';
      if (r.finish) ev.finish = r.finish;
    }
  }

  /**
   * A step threw (a bug or a device fault, never a client's input: `add` checked that). The
   * sequences in it end with an error and lose their slots; every other request goes on.
   */
  #fail(rs: Running[], error: unknown, events: Map<number, TokenEvent>): void {
    const message = error instanceof Error ? error.message : String(error);
    for (const r of rs) {
      r.finish = 'error';
      const ev = events.get(r.req.id) ?? { id: r.req.id, tokens: [] };
      ev.finish = 'error';
      ev.error = message;
      events.set(r.req.id, ev);
    }
  }
}

