import type { StepPath, StepResult } from '../driver/step-driver.js';
import type { StepRunner } from '../driver/step-runner.js';
import { offsetPtr } from '../device/device-ptr.js';
import { InvalidArgumentError } from '../errors.js';
import { MAX_LOGPROBS, positionLogprobs, type PositionLogprobs } from '../model/logprobs.js';
import { checkSampling } from '../model/sampling.js';
import type { DraftProposer } from '../spec/ngram-proposer.js';
import type { EngineRequest, EngineStepReport, TokenEvent } from './engine-request.js';
import { LoopSpeculation } from './loop-speculation.js';
import { startRunning, type RunningSequence as Running } from './running-sequence.js';
import { ARGMAX_ROW, pickable, samplable, type DeviceTokenPicker, type PickedTokens, type SampledTokens } from './device-token-picker.js';
import { maskLogitsRow } from './token-constraint.js';
import { claimPages, type PageClaim } from './page-budget.js';
import { planPrefill, nextChunkRows, type PrefillChunk } from './prefill-plan.js';
import { PrefixCache } from './prefix-cache.js';

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
  /**
   * n-gram (or any) speculation: up to `k` draft tokens per sequence and step, verified in one
   * step. `adaptive` (default true): verify only where the measured costs and acceptance say it is
   * faster than a plain decode (`SpeculationGate`); false verifies whenever there are drafts. The
   * tokens are the same either way, greedy or sampled (a verify keeps a sampled sequence's drafts
   * while they equal what it draws, one draw a token as its decodes would take them).
   */
  readonly speculation?: { readonly proposer: DraftProposer; readonly k: number; readonly adaptive?: boolean };
  /** Start requests on the cached blocks their prompt begins with (default true; a model that cannot resume gets no hits). */
  readonly prefixCaching?: boolean;
  /** Greedy decode rows picked on the device (`DeviceTokenPicker`); without it every step reads its logits back. */
  readonly picker?: DeviceTokenPicker;
  /**
   * Read a plain greedy decode's ids one step late, launching the next decode first, where the
   * picker can enqueue them (`argmaxAsync`; with speculation, where the gate chose to decode)
   * (default true; vLLM's async scheduling). False: every step waits for its ids before it returns.
   */
  readonly asyncScheduling?: boolean;
  /**
   * Milliseconds, monotonic (default `performance.now`): the step times the speculation gate
   * chooses by and the stats report. A test passes its own to make the gate's choices repeatable.
   */
  readonly clock?: () => number;
}

/** A decode step on the device whose greedy ids the host has not read yet, and the sequences it ran. */
interface InFlightDecode {
  readonly live: readonly Running[];
  readonly picked: PickedTokens;
  /** The bucket it ran at, whether its time tells the next such step's (a replay), and when it was launched: the speculation gate's. */
  readonly bucket: number;
  readonly timed: boolean;
  readonly launchedAt: number;
}

/** What a step's decode or verify ran. */
interface DecodeCounts {
  readonly seqs: number;
  readonly k: number;
  readonly drafted: number;
  readonly accepted: number;
}

const NO_DECODE: DecodeCounts = { seqs: 0, k: 0, drafted: 0, accepted: 0 };

/**
 * The one engine loop: continuous batching over a `StepDriver`, for `metrale serve`, `metrale
 * generate` and the benchmarks alike. Requests wait in a queue, take a sequence slot when one is
 * free, prefill their prompt in fixed chunks and then decode (or verify drafts) together with every
 * other running sequence; one that finishes or is cancelled gives its slot back before the next
 * step. Each step is: admit, one prefill step (chunks of the prompts in flight, up to maxRows
 * rows), one decode or verify step for every sequence past its prompt.
 *
 * Async scheduling: with a picker that enqueues its ids (`argmaxAsync`), a plain greedy decode's
 * ids are read one step late (with speculation, where the gate chose to decode). The step launches
 * the next decode, its input the ids still on the device, before it reads the last one's, so the
 * host's work (reading ids, finishing sequences, the next step's tables and graph launch) runs
 * while the device computes. It does so only where nothing else has to run first (no request
 * waiting for a free slot, no prompt in flight, no sequence at its token budget, the batch's graph
 * captured, pages free); a sequence that stops at a token has one step more computed and dropped.
 * The tokens are the same. With the speculation gate, a sequence's plain decodes also check
 * the drafts it would have verified against the tokens that follow
 * (`LoopSpeculation.checkDecoded`), so acceptance is measured without verifies.
 *
 * Results do not depend on the batch: a prompt is always cut at the same places, the driver's
 * padding rows are inert and every layer keeps per-sequence state, so a greedy request returns
 * the same tokens alone and among others. A sampled request draws from a stream seeded by its
 * `sampling.seed`, or by a random 64-bit seed.
 */
export class EngineLoop {
  readonly driver: StepRunner;
  readonly vocab: number;
  readonly prefillChunk: number;
  readonly #spec: LoopSpeculation | undefined;
  readonly #picker: DeviceTokenPicker | undefined;
  readonly #asyncScheduling: boolean;
  readonly #clock: () => number;
  /** Requests waiting for a slot, and preempted sequences waiting to be recomputed (at the front). */
  readonly #waiting: { readonly req: EngineRequest; readonly preempted?: Running }[] = [];
  /** In arrival order. */
  readonly #running: Running[] = [];
  readonly #prefix: PrefixCache;
  #arrivals = 0;
  #preemptions = 0;
  readonly #ids = new Set<number>();
  readonly #promptLogits = new Map<number, Float32Array>();
  readonly #logitsRow: number;
  #inFlight: InFlightDecode | undefined;
  /** When the last decode's ids were read: a decode launched before it is timed from there. */
  #lastRead = 0;

  constructor(options: EngineLoopOptions) {
    this.driver = options.driver;
    this.vocab = options.vocabSize;
    this.prefillChunk = options.prefillChunk;
    this.#picker = options.picker;
    this.#spec = options.speculation ? new LoopSpeculation(options.speculation, { driver: this.driver, vocab: this.vocab, picker: this.#picker }) : undefined;
    this.#asyncScheduling = options.asyncScheduling ?? true;
    this.#clock = options.clock ?? (() => performance.now());
    this.#logitsRow = 4 * this.vocab;
    this.#prefix = new PrefixCache(this.driver, options.prefixCaching ?? true);
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

  /** Whether requests start on cached prefix blocks (asked for, and every layer of the model can resume there). */
  get prefixCaching(): boolean {
    return this.#prefix.enabled;
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
    // Alone in the cache it must fit, verify overhang included, or preempting others would not help.
    const kv = this.driver.kv;
    const pages = kv.pagesFor(req.prompt.length + req.maxTokens + this.driver.limits.maxK - 1);
    if (pages > kv.pages) {
      bad(
        `${req.prompt.length} prompt tokens + ${req.maxTokens} to generate need ${pages} KV-cache pages of ${kv.pageSize} tokens, ` +
          `but the cache holds ${kv.pages} pages (${kv.pages * kv.pageSize} tokens); shorten the request, or give the server's KV cache more memory`,
      );
    }
    if (req.sampling) checkSampling(req.sampling);
    const inVocab = (t: number) => Number.isInteger(t) && t >= 0 && t < this.vocab;
    for (const t of req.stopTokenIds ?? []) if (!inVocab(t)) bad(`stop token ${t} is outside the vocabulary (${this.vocab})`);
    for (const t of req.sampling?.logitBias?.keys() ?? []) if (!inVocab(t)) bad(`logit bias token ${t} is outside the vocabulary (${this.vocab})`);
    if ((req.sampling?.minTokens ?? 0) > req.maxTokens) bad(`minTokens (${req.sampling!.minTokens}) exceeds maxTokens (${req.maxTokens})`);
    for (const name of ['logprobs', 'promptLogprobs'] as const) {
      const n = req[name];
      if (n !== undefined && !(Number.isInteger(n) && n >= 0 && n <= MAX_LOGPROBS)) bad(`${name} must be an integer in 0..${MAX_LOGPROBS}, got ${n}`);
    }
    this.#ids.add(req.id);
    this.#waiting.push({ req });
  }

  /**
   * Captures the step graphs of every batch bucket of the driver before the first request (as vLLM
   * captures at startup), so that no request waits on a capture later: the decode graphs, and where
   * the loop speculates the verify graphs of its k drafts. Throwaway one-token requests run through
   * loops of their own on the same driver and picker (this loop's gate, prefix cache and counters
   * stay as they were): for each bucket b, b of them prefill, then decode together (they ask for
   * enough tokens that the first prefilled are still running when the last joins); a second loop
   * proposes k drafts at every step and never skips a verify. Only on an idle loop.
   */
  captureGraphs(): void {
    if (!this.idle) throw new InvalidArgumentError('engine loop: captureGraphs runs on an idle loop, before the first request');
    const through = (options: Pick<EngineLoopOptions, 'speculation'>, tokensPerStep: number) => {
      const loop = new EngineLoop({ driver: this.driver, vocabSize: this.vocab, prefillChunk: this.prefillChunk, prefixCaching: false, ...(this.#picker ? { picker: this.#picker } : {}), ...options });
      for (const b of this.driver.buckets.sizes) {
        // One row each: a step prefills up to maxRows of them.
        const prefillSteps = Math.ceil(b / this.driver.limits.maxRows);
        const maxTokens = Math.min((prefillSteps + 1) * tokensPerStep, loop.maxTotalTokens - 1);
        for (let i = 0; i < b; i++) loop.add({ id: i, prompt: [0], maxTokens, stopTokenIds: [] });
        while (!loop.idle) loop.step();
      }
    };
    through({}, 1);
    if (this.#spec) {
      const { k } = this.#spec;
      through({ speculation: { proposer: { propose: (_history, max) => new Array<number>(max).fill(0) }, k, adaptive: false } }, k + 1);
    }
  }

  /** Drops a request: from the queue, or from its slot at once (its cache is free for the next step). */
  cancel(id: number): boolean {
    const w = this.#waiting.findIndex((r) => r.req.id === id);
    if (w >= 0) {
      const [waiting] = this.#waiting.splice(w, 1);
      this.#ids.delete(id);
      waiting!.req.constraint?.release();
      return true;
    }
    const r = this.#running.findIndex((x) => x.req.id === id);
    if (r < 0) return false;
    this.#retire(r);
    if (this.#running.length === 0) this.#dropInFlight();
    return true;
  }

  /** Cancels everything (shutdown); returns the ids it dropped. */
  cancelAll(): number[] {
    const ids = [...this.#waiting.map((r) => r.req.id), ...this.#running.map((r) => r.req.id)];
    for (const id of ids) this.cancel(id);
    return ids;
  }

  /** The prompt logits of a finished request that asked for them (f32 [prompt × vocab]), handed over once. */
  takePromptLogits(id: number): Float32Array | undefined {
    const logits = this.#promptLogits.get(id);
    this.#promptLogits.delete(id);
    return logits;
  }

  /**
   * Whether the sequence in `slot` needs the logits of every prompt row in its prefill steps (it
   * asked for its prompt logits or logprobs): a head that computes only the last row of a prefill
   * chunk asks this. (A prefix cache must not skip such a prompt's rows either: vLLM does not read
   * its cache for a request that wants prompt logprobs.)
   */
  needsEveryPromptRow(slot: number): boolean {
    const r = this.#running.find((x) => x.seq.slot === slot);
    return r !== undefined && (r.promptLogits !== undefined || r.promptLogprobs !== undefined) && r.prefilled < r.req.prompt.length;
  }

  /** One engine step; a no-op report when idle. */
  step(): EngineStepReport {
    const t0 = this.#clock();
    const events = new Map<number, TokenEvent>();
    let prefill = { rows: 0, seqs: 0 };
    let decode: DecodeCounts | undefined;
    const inFlight = this.#inFlight;
    if (inFlight) {
      this.#inFlight = undefined;
      decode = this.#decodeAhead(inFlight, events);
      this.#readInFlight(inFlight, events);
      this.#settle();
    }
    if (!decode) {
      const plan = this.#schedule();
      prefill = this.#prefill(plan, events);
      decode = this.#decodeOrVerify(events);
      this.#settle();
    }
    // An idle loop has nothing on the device: a decode of sequences that all stopped is dropped.
    if (this.#running.length === 0) this.#dropInFlight();
    const prefix = this.#prefix.takeCounts();
    const preemptions = this.#preemptions;
    this.#preemptions = 0;
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
      kvUsage: this.driver.kv.usage,
      prefixQueries: prefix.queries,
      prefixHits: prefix.hits,
      preemptions,
      ms: this.#clock() - t0,
    };
  }

  /** Makes the running sequences' full blocks known to the prefix cache; finished ones give their slots back, before anything else is admitted. */
  #settle(): void {
    for (const r of this.#running) if (r.finish !== 'error') this.#prefix.register(r);
    for (let i = this.#running.length - 1; i >= 0; i--) if (this.#running[i]!.finish) this.#retire(i);
  }

  /**
   * Launches the decode after `inFlight`, its input the ids still on the device, where nothing else
   * has to run first: every running sequence was in it (none prefills; none waits for a free
   * slot) and has tokens left after it, the driver replays that batch's graph, the pool has the
   * rows' pages (no preemption) and, speculating, the gate would decode. Undefined where the step
   * must wait for the ids and run as usual.
   */
  #decodeAhead(inFlight: InFlightDecode, events: Map<number, TokenEvent>): DecodeCounts | undefined {
    const { live } = inFlight;
    const n = live.length;
    // A waiting request is admitted only to a free slot.
    if (this.#waiting.length > 0 && n < this.driver.limits.maxSeqs) return undefined;
    if (this.#running.length !== n || live.some((r, i) => this.#running[i] !== r)) return undefined;
    if (live.some((r) => r.finish !== undefined || r.generated + 1 >= r.req.maxTokens)) return undefined;
    if (!this.driver.decodesFromDevice?.(n)) return undefined;
    const bucket = this.driver.buckets.bucketFor(n);
    // A speculating loop goes ahead only where the gate would decode (its choice does not need the ids).
    if (this.#spec && !this.#spec.decodes(bucket, live)) return undefined;
    const kv = this.driver.kv;
    let pages = 0;
    for (const r of live) pages += kv.need(r.seq.slot, r.seq.length + 1);
    if (pages > kv.available) return undefined;
    try {
      const launchedAt = this.#clock();
      this.#enqueue(live, this.driver.decode({ seqs: live.map((r) => r.seq), deviceTokens: inFlight.picked.device }), launchedAt);
    } catch (error) {
      this.#fail([...live], error, events);
    }
    return { seqs: n, k: 1, drafted: 0, accepted: 0 };
  }

  /** Enqueues the picker's argmax of a decode launched at `launchedAt`: the decode in flight, read next step. */
  #enqueue(live: readonly Running[], result: StepResult, launchedAt: number): void {
    const picked = this.#picker!.argmaxAsync!(result.output, live.length, this.vocab, this.driver.stream);
    this.#inFlight = { live, picked, bucket: result.batch, timed: timedPath(result.path), launchedAt };
  }

  /** Reads an in-flight decode's ids and emits them to the sequences of it still running. */
  #readInFlight(inFlight: InFlightDecode, events: Map<number, TokenEvent>): void {
    const running = new Set(this.#running);
    const live = inFlight.live.filter((r) => running.has(r));
    let ids: Int32Array;
    try {
      ids = inFlight.picked.read();
    } catch (error) {
      this.#fail(live, error, events);
      return;
    }
    const now = this.#clock();
    this.#spec?.recordDecode(inFlight.bucket, inFlight.timed ? now - Math.max(inFlight.launchedAt, this.#lastRead) : undefined);
    this.#lastRead = now;
    const before = this.#spec?.countsBefore(inFlight.live);
    inFlight.live.forEach((r, i) => {
      if (running.has(r)) this.#emit(r, [ids[i]!], undefined, events);
    });
    this.#spec?.checkDecoded(inFlight.live, before);
  }

  /** Waits for an in-flight decode none of whose sequences runs any more, and drops its ids. */
  #dropInFlight(): void {
    const inFlight = this.#inFlight;
    if (!inFlight) return;
    this.#inFlight = undefined;
    try {
      inFlight.picked.read();
    } catch {
      // Its sequences are gone; a device fault behind it fails the next step that uses the device.
    }
  }

  /**
   * Plans the step: this step's prompt chunks and decode rows get their KV pages, oldest sequence
   * first; when the pool runs short the youngest running sequence is preempted (its pages freed,
   * itself queued first to be recomputed). Then, unless something was preempted, waiting requests
   * take free slots while the pool has pages for their first chunk. Returns the prefill chunks.
   */
  #schedule(): PrefillChunk<Running>[] {
    const { maxRows, maxBatch, maxSeqs } = this.driver.limits;
    const kv = this.driver.kv;
    const planned = new Map(planPrefill(this.#running, this.prefillChunk, maxRows, maxBatch).map((c) => [c.seq, c.rows]));
    const claims: PageClaim<Running>[] = this.#running.map((r) => ({ seq: r, slot: r.seq.slot, rows: this.#stepRows(r.seq.length, r.prefilled, r.prompt.length, planned.get(r) ?? 0) }));
    const preempted = claimPages(kv, claims, (r) => this.#preempt(r));
    if (preempted.length === 0) {
      while (this.#waiting.length > 0 && this.#running.length < maxSeqs && this.#admit(this.#waiting[0]!)) this.#waiting.shift();
    }
    // The same cut as above, now with the sequences admitted (each got the pages of its first chunk).
    return planPrefill(this.#running, this.prefillChunk, maxRows, maxBatch).filter((c) => kv.need(c.seq.seq.slot, c.seq.prefilled + c.rows) === 0);
  }

  /**
   * Rows a sequence at `prefilled` holds by the end of a step that prefills `chunk` of its prompt
   * rows: a sequence past its prompt (or finishing it in the step) also runs a decode or verify.
   */
  #stepRows(length: number, prefilled: number, promptLength: number, chunk: number): number {
    const end = Math.max(length, prefilled + chunk);
    return prefilled + chunk >= promptLength ? end + (this.#spec ? this.#spec.k + 1 : 1) : end;
  }

  /**
   * Starts a waiting request (or a preempted sequence) in a free slot when the pool has the pages
   * of its first chunk, on the cached blocks its tokens begin with; undefined when it must wait.
   */
  #admit(w: { readonly req: EngineRequest; readonly preempted?: Running }): boolean {
    const kv = this.driver.kv;
    const tokens = w.preempted ? w.preempted.prompt : w.req.prompt;
    // A request that keeps its prompt logits or logprobs computes every row (vLLM does not read its
    // cache for a request that wants prompt logprobs either).
    const everyRow = w.req.promptLogits || w.req.promptLogprobs !== undefined;
    const { prefix, hashes } = everyRow ? { prefix: [], hashes: [] } : this.#prefix.lookup(tokens);
    const start = prefix.length * kv.pageSize;
    const rows = this.#stepRows(start, start, tokens.length, nextChunkRows({ prompt: tokens, prefilled: start }, this.prefillChunk));
    if (kv.pagesFor(rows) - prefix.length + kv.idleAmong(prefix) > kv.available) return false;
    const seq = this.driver.open(prefix);
    kv.grow([seq.slot], [rows]);
    this.#prefix.count(tokens.length, start);
    const req = w.req;
    const r = w.preempted ?? startRunning(req, seq, this.#arrivals++, this.vocab);
    r.seq = seq;
    r.prefilled = start;
    r.hashes = hashes;
    // Running stays in arrival order (a recomputed sequence keeps its place).
    let at = this.#running.length;
    while (at > 0 && this.#running[at - 1]!.arrival > r.arrival) at--;
    this.#running.splice(at, 0, r);
    return true;
  }

  /**
   * Frees a running sequence's slot and pages and queues it first, to be recomputed from its
   * prompt and every token it generated: its next token comes from that prefill, so no token is
   * lost or repeated, and a sampled request draws on from where its random stream stood.
   */
  #preempt(r: Running): void {
    this.#running.splice(this.#running.indexOf(r), 1);
    this.driver.close(r.seq);
    r.prompt = r.history.slice();
    // Prompt logprobs not yet reported are collected again by the recompute.
    if (r.promptLogprobs) r.promptLogprobs = [null];
    r.prefilled = 0;
    this.#waiting.unshift({ req: r.req, preempted: r });
    this.#preemptions++;
  }

  #retire(index: number): void {
    const r = this.#running[index]!;
    this.#running.splice(index, 1);
    this.#ids.delete(r.req.id);
    if (r.promptLogits && r.finish && r.finish !== 'error') this.#promptLogits.set(r.req.id, r.promptLogits);
    r.req.constraint?.release();
    try {
      this.driver.close(r.seq);
    } catch {
      // The driver lost track of it after a failed step; the slot is gone with it.
    }
  }

  /** The step's prompt chunks (`#schedule` gave them their pages). */
  #prefill(plan: readonly PrefillChunk<Running>[], events: Map<number, TokenEvent>): { rows: number; seqs: number } {
    const chunk = plan.map((c) => c.seq);
    const lengths = plan.map((c) => c.rows);
    const rows = lengths.reduce((a, b) => a + b, 0);
    if (chunk.length === 0) return { rows: 0, seqs: 0 };
    const tokens = new Int32Array(rows);
    let at = 0;
    chunk.forEach((r, i) => {
      for (let j = 0; j < lengths[i]!; j++) tokens[at++] = r.prompt[r.prefilled + j]!;
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
    const all = chunk.some((r) => r.promptLogits || r.promptLogprobs) ? this.driver.readOutputF32(result) : undefined;
    let row = 0;
    const done: { r: Running; row: number }[] = [];
    chunk.forEach((r, i) => {
      // Rows of the request's own prompt (a recomputed sequence's later rows are generated tokens).
      const kept = Math.min(lengths[i]!, r.req.prompt.length - r.prefilled);
      if (r.promptLogits && kept > 0) r.promptLogits.set(all!.subarray(row * this.vocab, (row + kept) * this.vocab), r.prefilled * this.vocab);
      // Row j predicts prompt token j + 1; the last prompt row predicts the first generated token.
      for (let j = 0; r.promptLogprobs && j < kept && r.prefilled + j + 1 < r.req.prompt.length; j++) {
        r.promptLogprobs.push(positionLogprobs(all!, this.vocab, row + j, r.req.prompt[r.prefilled + j + 1]!, r.req.promptLogprobs!));
      }
      row += lengths[i]!;
      r.prefilled += lengths[i]!;
      this.#prefix.afterPrefill(r);
      if (r.prefilled === r.prompt.length) done.push({ r, row: row - 1 });
    });
    if (done.length > 0) {
      if (!all) this.driver.gpu.synchronize(this.driver.stream);
      const picker = this.#picker;
      for (const { r, row: last } of done) {
        if (!all && picker?.sample && pickedOnDevice(r)) {
          // The first token picked where its row is (a call a prompt: the finished prompts' rows lie apart).
          const picked = picker.sample(offsetPtr(result.output, last * this.#logitsRow), [r.sampler.pickedRow(r.req.logprobs)], this.vocab, this.driver.stream);
          this.#emit(r, [picked.tokens[0]!], logprobsOf(picked, 0), events);
          continue;
        }
        const logits = all ? all.subarray(last * this.vocab, (last + 1) * this.vocab) : this.#readRow(result, last);
        this.#emitRow(r, logits, 0, events);
      }
    }
    return { rows, seqs: chunk.length };
  }

  #decodeOrVerify(events: Map<number, TokenEvent>): DecodeCounts {
    const live = this.#running.filter((r) => !r.finish && r.prefilled === r.prompt.length);
    if (live.length === 0) return NO_DECODE;
    try {
      const spec = this.#spec;
      if (spec) {
        // The gate's choice follows measured times; a sequence's tokens do not depend on it (a verify
        // emits what decodes would, one draw a token: acceptMatching).
        const bucket = this.driver.buckets.bucketFor(live.length);
        if (spec.verifies(bucket, live)) {
          const t = this.#clock();
          const verified = spec.verify(live, (r, tokens, logprobs) => this.#emit(r, tokens, logprobs, events));
          if (verified) {
            spec.recordVerify(bucket, timedPath(verified.path) ? this.#clock() - t : undefined);
            return verified;
          }
        }
      }
      const t = this.#clock();
      const result = this.driver.decode({ seqs: live.map((r) => r.seq), tokens: Int32Array.from(live, (r) => r.pending) });
      const picker = this.#picker;
      const before = this.#spec?.countsBefore(live);
      if (picker && live.length <= picker.maxRows && live.every(plainGreedy)) {
        // Read next step (the gate takes the decode's time when its ids are read).
        if (picker.argmaxAsync && this.#asyncScheduling) {
          this.#enqueue(live, result, t);
          return { seqs: live.length, k: 1, drafted: 0, accepted: 0 };
        }
        const tokens = picker.argmax(result.output, live.length, this.vocab, this.driver.stream);
        live.forEach((r, i) => this.#emit(r, [tokens[i]!], undefined, events));
      } else if (picker?.sample && live.length <= picker.maxRows && live.some(pickedOnDevice)) {
        // Greedy and sampled rows picked on the device (their tokens and logprobs come back, not
        // their logits); a row with adjustments or a constraint is read and sampled on the host
        // (its row in the call the cheapest pick, its token not used).
        const onDevice = live.map(pickedOnDevice);
        const picked = picker.sample(result.output, live.map((r, i) => (onDevice[i] ? r.sampler.pickedRow(r.req.logprobs) : ARGMAX_ROW)), this.vocab, this.driver.stream);
        if (onDevice.includes(false)) this.driver.gpu.synchronize(this.driver.stream);
        live.forEach((r, i) => {
          if (onDevice[i]) this.#emit(r, [picked.tokens[i]!], logprobsOf(picked, i), events);
          else this.#emitRow(r, this.#readRow(result, i), 0, events);
        });
      } else {
        const logits = this.driver.readOutputF32(result);
        live.forEach((r, i) => this.#emitRow(r, logits, i, events));
      }
      this.#lastRead = this.#clock();
      this.#spec?.recordDecode(result.batch, timedPath(result.path) ? this.#lastRead - t : undefined);
      this.#spec?.checkDecoded(live, before);
      return { seqs: live.length, k: 1, drafted: 0, accepted: 0 };
    } catch (error) {
      this.#fail(live, error, events);
      return { seqs: live.length, k: 1, drafted: 0, accepted: 0 };
    }
  }

  /** Logit row `i` of a step's output, copied to the host (after the step's stream is done with it). */
  #readRow(result: StepResult, i: number): Float32Array {
    const bytes = this.driver.gpu.download(offsetPtr(result.output, i * this.#logitsRow), this.#logitsRow);
    return new Float32Array(bytes.buffer, bytes.byteOffset, this.vocab);
  }

  /** Samples the token of logit row `row` (with its logprobs when asked; among the tokens its constraint allows) and emits it. */
  #emitRow(r: Running, logits: Float32Array, row: number, events: Map<number, TokenEvent>): void {
    if (r.req.constraint) {
      try {
        maskLogitsRow(logits, this.vocab, row, r.req.constraint.allowedTokens());
      } catch (error) {
        this.#fail([r], error, events);
        return;
      }
    }
    const token = r.sampler.sample(logits, this.vocab, row);
    const n = r.req.logprobs;
    this.#emit(r, [token], n !== undefined ? [positionLogprobs(logits, this.vocab, row, token, n)] : undefined, events);
  }

  /** Appends generated tokens (and their logprobs) up to a stop token or the budget, and reports them. */
  #emit(r: Running, tokens: number[], logprobs: PositionLogprobs[] | undefined, events: Map<number, TokenEvent>): void {
    let ev = events.get(r.req.id);
    if (!ev) {
      ev = { id: r.req.id, tokens: [], ...(r.req.logprobs !== undefined ? { logprobs: [] } : {}) };
      events.set(r.req.id, ev);
    }
    if (r.promptLogprobs) {
      ev.promptLogprobs = r.promptLogprobs;
      delete r.promptLogprobs;
    }
    for (const [i, t] of tokens.entries()) {
      if (r.finish) return;
      ev.tokens.push(t);
      if (ev.logprobs && logprobs) ev.logprobs.push(logprobs[i]!);
      r.history.push(t);
      r.sampler.accept(t);
      r.generated++;
      r.pending = t;
      // Sampled from masked rows, so the constraint allows it; a completed one ends the output.
      if (r.req.constraint && !r.req.constraint.accept(t)) return this.#fail([r], new Error(`token ${t} was generated against the request's output constraint`), events);
      if (r.stop.has(t) || r.req.constraint?.isComplete()) r.finish = 'stop';
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

/** Whether a step's time tells the gate what the next such step costs: a replay or an eager step, not a graph capture. */
function timedPath(path: StepPath): boolean {
  return path === 'replay' || path === 'eager';
}

/** A running sequence a picker's `sample` may choose for (`samplable`). */
function pickedOnDevice(r: Running): boolean {
  return samplable({ adjusted: r.sampler.adjusts, constraint: r.req.constraint });
}

/** A running sequence a picker's `argmax` may choose for (`pickable`): greedy, without logprobs, and picked on the device. */
function plainGreedy(r: Running): boolean {
  return pickable({ greedy: r.sampler.greedy, adjusted: r.sampler.adjusts, constraint: r.req.constraint, ...(r.req.logprobs !== undefined ? { logprobs: r.req.logprobs } : {}) });
}

/** Row i's logprobs of a picker's `sample`, as `#emit` takes them (one position). */
function logprobsOf(picked: SampledTokens, i: number): PositionLogprobs[] | undefined {
  const l = picked.logprobs[i];
  return l ? [l] : undefined;
}
