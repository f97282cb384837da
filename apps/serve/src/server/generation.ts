import type { FinishReason as CoreFinishReason, SamplingParams, Seed } from '@metrale/core';
import type { EngineClient } from '../engine/engine-client.js';
import type { GrammarSpec } from '../structured/grammar-spec.js';
import type { WireEvent } from '../engine/protocol.js';
import { ApiError } from './api-error.js';
import type { TokenLogprobs } from './logprobs-format.js';
import type { FinishedReason, ServerMetrics } from './server-metrics.js';
import { TextStream, type TokenDecoder } from './text-stream.js';

/** One prompt's generation as a request asked for it, in token ids. */
export interface GenerationParams {
  readonly prompt: ArrayLike<number>;
  readonly maxTokens: number;
  readonly sampling?: SamplingParams;
  readonly seed?: Seed;
  /** Stop strings: the output ends before the first one (excluded). */
  readonly stop: readonly string[];
  readonly stopTokenIds: readonly number[];
  /** The output follows this grammar (prepared in the engine before the request is submitted). */
  readonly grammar?: GrammarSpec;
  /** Each generated token's logprob with its position's top N; absent: none. */
  readonly logprobs?: number;
  /** Echo: the prompt's text goes first (with its tokens' logprobs, when `logprobs` is set). */
  readonly echo?: string;
}

/** How an answer ended, as the OpenAI API reports it: the engine's finish reasons that complete a request. */
export type FinishReason = Extract<CoreFinishReason, 'stop' | 'length'>;

export interface GenerationResult {
  /** The answer's text (the echoed prompt's first). */
  readonly text: string;
  /** Each token of `text` with its logprobs, when asked for. */
  readonly logprobs: TokenLogprobs[];
  readonly tokens: number[];
  readonly completionTokens: number;
  readonly finishReason: FinishReason;
}

/**
 * One prompt in the engine: tokens in, text out, with stop strings, metrics and cancellation.
 * `onText` hears each piece of text as soon as it is safe to send, with the logprobs of the tokens
 * that came with it; `done` resolves at the end (rejects with an ApiError when the engine refused
 * or failed the request, or it was aborted).
 */
export class Generation {
  readonly done: Promise<GenerationResult>;
  readonly promptTokens: number;
  #engine: EngineClient;
  #metrics: ServerMetrics;
  #id = -1;
  #text = '';
  #logprobs: TokenLogprobs[] = [];
  #tokens: number[] = [];
  readonly #prompt: ArrayLike<number>;
  #echo: string | undefined;
  #counted = 0;
  #finished = false;
  #stream: TextStream;
  #arrived: number;
  readonly #maxTokens: number;
  #first = 0;
  #last = 0;
  #resolve!: (r: GenerationResult) => void;
  #reject!: (e: Error) => void;
  #onText: (text: string, logprobs: readonly TokenLogprobs[]) => void;

  constructor(
    engine: EngineClient, metrics: ServerMetrics, decoder: TokenDecoder | undefined, params: GenerationParams,
    onText: (text: string, logprobs: readonly TokenLogprobs[]) => void = () => {}, arrived = performance.now(),
  ) {
    this.#engine = engine;
    this.#metrics = metrics;
    this.#onText = onText;
    this.#arrived = arrived;
    this.#maxTokens = params.maxTokens;
    this.promptTokens = params.prompt.length;
    this.#prompt = params.prompt;
    this.#echo = params.echo;
    this.#stream = new TextStream(decoder ?? { decode: (ids) => ids.map((t) => `<${t}>`).join('') }, params.stop);
    this.done = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    // A rejection nobody awaits yet (an abort before the handler reached `await`) is not a crash.
    this.done.catch(() => {});
    this.#id = engine.submit(
      {
        prompt: Int32Array.from(params.prompt), maxTokens: params.maxTokens, stopTokenIds: params.stopTokenIds,
        ...(params.sampling ? { sampling: params.sampling } : {}), ...(params.seed !== undefined ? { seed: params.seed } : {}),
        ...(params.grammar ? { grammar: params.grammar } : {}),
        ...(params.logprobs !== undefined ? { logprobs: params.logprobs } : {}),
        ...(params.logprobs !== undefined && params.echo !== undefined ? { promptLogprobs: params.logprobs } : {}),
      },
      (ev) => this.#onEvent(ev),
    );
    metrics.promptTokens(params.prompt.length);
  }

  /**
   * The request ended early (its client went away, its deadline passed, another of its prompts
   * failed): the engine drops it and frees its slot before its next step; `done` rejects with `reason`.
   */
  abort(reason: ApiError): void {
    if (this.#finished) return;
    this.#engine.cancel(this.#id);
    this.#end('abort');
    this.#reject(reason);
  }

  #onEvent(ev: WireEvent): void {
    if (this.#finished) return;
    const now = performance.now();
    if (this.#echo !== undefined && ev.finish !== 'error' && ev.finish !== 'abort') {
      // The prompt goes first, with its logprobs (which came with the first tokens).
      const prompt = Array.from(this.#prompt, (token, i): TokenLogprobs => ev.promptLogprobs?.[i] ?? { token });
      this.#emit(this.#echo, ev.promptLogprobs ? prompt : []);
      this.#echo = undefined;
    }
    if (ev.tokens.length > 0) {
      this.#tokens.push(...ev.tokens);
      // A stop token (end of sequence, stop_token_ids) ends the output without its text, as vLLM's
      // detokenizer leaves it out; it still counts, and keeps its logprobs.
      const piece = this.#stream.push(ev.finish === 'stop' ? ev.tokens.slice(0, -1) : ev.tokens);
      const counted = piece.stopped ? piece.tokens : ev.tokens.length;
      this.#count(counted, now);
      this.#emit(piece.text, ev.logprobs?.slice(0, counted) ?? []);
      if (piece.stopped) {
        // The engine would go on to max_tokens; the stop string ended this output here.
        this.#engine.cancel(this.#id);
        this.#finish('stop');
        return;
      }
    }
    if (ev.finish === 'error' || ev.finish === 'abort') {
      this.#end('error');
      const why = ev.error ?? (ev.finish === 'abort' ? 'cancelled by the server' : 'unknown error');
      this.#reject(
        ev.rejected ? new ApiError(400, why)
          : ev.unavailable || ev.finish === 'abort' ? new ApiError(503, why, { code: 'shutting_down' })
            : new ApiError(500, `generation failed: ${why}`, { code: 'engine_error' }),
      );
    } else if (ev.finish) {
      this.#emit(this.#stream.flush(), []);
      this.#finish(ev.finish);
    }
  }

  /**
   * Counts `n` tokens that arrived together at `now`: the first of a request is its time to first
   * token; every later one an inter-token latency (a step that yields several spreads its time
   * over them). Tokens reaching a request that is later aborted count too: they were generated.
   */
  #count(n: number, now: number): void {
    if (n === 0) return;
    const m = this.#metrics;
    let first = 0;
    if (this.#counted === 0) {
      m.firstToken((now - this.#arrived) / 1000);
      this.#first = now;
      first = 1;
    }
    const gap = this.#counted === 0 ? 0 : (now - this.#last) / 1000 / n;
    for (let i = first; i < n; i++) m.interToken(gap);
    this.#counted += n;
    this.#last = now;
    m.generationTokens(n);
  }

  #emit(text: string, logprobs: readonly TokenLogprobs[]): void {
    if (!text && logprobs.length === 0) return;
    this.#text += text;
    this.#logprobs.push(...logprobs);
    this.#onText(text, logprobs);
  }

  #finish(reason: FinishReason): void {
    this.#end(reason);
    this.#resolve({ text: this.#text, logprobs: this.#logprobs, tokens: this.#tokens.slice(0, this.#counted), completionTokens: this.#counted, finishReason: reason });
  }

  #end(reason: FinishedReason): void {
    this.#finished = true;
    this.#metrics.finished({
      reason, promptTokens: this.promptTokens, generationTokens: this.#counted, maxTokens: this.#maxTokens, e2e: (performance.now() - this.#arrived) / 1000,
      ...(this.#counted > 0 ? { decode: (this.#last - this.#first) / 1000 } : {}),
    });
  }
}
