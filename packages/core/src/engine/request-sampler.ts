import { TokenHistory, adjustLogits, adjustsLogits } from '../model/logits-adjustment.js';
import { isGreedy, sampleLogitsRow, type SamplingParams } from '../model/sampling.js';
import { SeededRandom, randomSeed } from '../random/seeded-random.js';
import { sampledRow, type SampledRow } from './device-token-picker.js';

/**
 * How one request picks its tokens, step after step: its sampling parameters, its random stream
 * (seeded by its seed, or by a random 64-bit one) and, when its logits are adjusted (logit bias,
 * penalties, min tokens), what the adjustments read of its history.
 */
export class RequestSampler {
  readonly params: SamplingParams | undefined;
  readonly random: SeededRandom;
  readonly greedy: boolean;
  readonly #stop: readonly number[];
  readonly #history: TokenHistory | undefined;

  constructor(params: SamplingParams | undefined, prompt: ArrayLike<number>, stopTokenIds: readonly number[]) {
    this.params = params;
    this.greedy = isGreedy(params);
    this.random = new SeededRandom(params?.seed ?? randomSeed());
    this.#stop = stopTokenIds;
    this.#history = adjustsLogits(params, stopTokenIds) ? new TokenHistory(prompt) : undefined;
  }

  /** Whether the rows it samples from differ from the model's. */
  get adjusts(): boolean {
    return this.#history !== undefined;
  }

  /**
   * Row `r` of `logits` as this request samples from it once `ahead` more tokens follow its
   * history (drafts under verification): an adjusted copy, or the row itself when nothing adjusts.
   */
  row(logits: Float32Array, vocab: number, r: number, ahead: readonly number[] = []): Float32Array {
    const row = logits.subarray(r * vocab, (r + 1) * vocab);
    if (!this.#history) return row;
    const copy = Float32Array.from(row);
    adjustLogits(copy, this.params!, this.#history.extended(ahead), this.#stop);
    return copy;
  }

  /** The next token from logit row `r`. */
  sample(logits: Float32Array, vocab: number, r: number): number {
    return sampleLogitsRow(this.row(logits, vocab, r), vocab, 0, this.params, this.random);
  }

  /**
   * The next token as a picker chooses it (`DeviceTokenPicker.sample`) from the row as the model
   * gave it: greedy, the argmax (no draw); else this request's filters and the one draw the host
   * sampler would make for it; with `logprobs` top logprobs where given. Only for a request whose
   * row nothing adjusts (`samplable`).
   */
  pickedRow(logprobs?: number): SampledRow {
    return sampledRow(this.params, () => this.random.float(), logprobs);
  }

  /** A token became part of the output. */
  accept(token: number): void {
    this.#history?.push(token);
  }
}
