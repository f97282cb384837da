import { InvalidArgumentError } from '../errors.js';

/** Proposes draft tokens to verify after a sequence's history. */
export interface DraftProposer {
  /** Up to `max` draft tokens that may follow `history` (possibly none). */
  propose(history: ArrayLike<number>, max: number): number[];
}

export interface NgramOptions {
  /** Draft tokens per step (default 4). */
  readonly k?: number;
  /** Shortest n-gram matched (default 1). */
  readonly minN?: number;
  /** Longest n-gram matched, tried first (default 3). */
  readonly maxN?: number;
}

/**
 * Prompt lookup: the last n tokens of the history (n from maxN down to minN) are searched for
 * earlier in the history, most recent occurrence first, and the tokens that followed it are the
 * drafts. Repetitive text (code, quotes of the prompt, lists) gets long accepted runs; anything
 * else costs a verify of a few rows that the target scores anyway.
 */
export class NgramProposer implements DraftProposer {
  readonly k: number;
  readonly minN: number;
  readonly maxN: number;

  constructor(options: NgramOptions = {}) {
    this.k = options.k ?? 4;
    this.minN = options.minN ?? 1;
    this.maxN = options.maxN ?? 3;
    const positive = (name: string, v: number) => {
      if (!Number.isInteger(v) || v < 1) throw new InvalidArgumentError(`ngram proposer: ${name} must be a positive integer, got ${v}`);
    };
    positive('k', this.k);
    positive('minN', this.minN);
    positive('maxN', this.maxN);
    if (this.minN > this.maxN) throw new InvalidArgumentError(`ngram proposer: minN (${this.minN}) must not exceed maxN (${this.maxN})`);
  }

  propose(history: ArrayLike<number>, max: number = this.k): number[] {
    const len = history.length;
    const want = Math.min(max, this.k);
    if (want < 1) return [];
    for (let n = Math.min(this.maxN, len - 1); n >= this.minN; n--) {
      // The pattern is history[len − n, len); a match at i needs a continuation at i + n < len.
      for (let i = len - n - 1; i >= 0; i--) {
        let same = true;
        for (let j = 0; j < n; j++) {
          if (history[i + j] !== history[len - n + j]) {
            same = false;
            break;
          }
        }
        if (!same) continue;
        const out: number[] = [];
        for (let t = i + n; t < len && out.length < want; t++) out.push(history[t]!);
        return out;
      }
    }
    return [];
  }
}

/** `--spec ngram[:…]` parsed: the proposer's options, and whether the engine gates speculation by its measured gain. */
export type NgramSpec = Required<NgramOptions> & { readonly adaptive: boolean };

/** Parses `ngram`, `ngram:k=4`, `ngram:k=4,min=1,max=3` (the CLI's `--spec` value). */
export function parseNgramSpec(text: string): NgramSpec {
  const [kind, rest] = text.split(':', 2) as [string, string | undefined];
  if (kind !== 'ngram') throw new InvalidArgumentError(`--spec: unknown proposer '${kind}'; use ngram or ngram:k=K`);
  const options: { k: number; minN: number; maxN: number; adaptive: boolean } = { k: 4, minN: 1, maxN: 3, adaptive: true };
  for (const part of (rest ?? '').split(',').filter(Boolean)) {
    const [key, value] = part.split('=', 2) as [string, string | undefined];
    if (key === 'adaptive') {
      if (value !== '0' && value !== '1') throw new InvalidArgumentError(`--spec: '${part}' must be adaptive=0 (verify whenever there are drafts) or adaptive=1`);
      options.adaptive = value === '1';
      continue;
    }
    const n = Number(value);
    if (value === undefined || !Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`--spec: '${part}' must be key=positive integer (k, min, max) or adaptive=0|1`);
    if (key === 'k') options.k = n;
    else if (key === 'min') options.minN = n;
    else if (key === 'max') options.maxN = n;
    else throw new InvalidArgumentError(`--spec: unknown option '${key}' (use k, min, max, adaptive)`);
  }
  new NgramProposer(options);
  return options;
}
