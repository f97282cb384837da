import type { Sequence } from '../driver/sequence.js';
import type { StepRunner } from '../driver/step-runner.js';
import { blockHashes } from '../kv/block-hash.js';

/** A sequence as prefix caching sees it: every token it has (prompt, then generated) and the hashes of its full blocks so far. */
export interface HashedSequence {
  readonly seq: Sequence;
  readonly history: readonly number[];
  hashes: string[];
}

/**
 * Prefix caching for the engine loop. Full blocks of every sequence are known to the KV cache by
 * content hash as soon as they are committed; a new request starts on the longest run of cached
 * blocks its prompt begins with (at most its prompt less one token, whose logits it needs), and
 * prefills only the rest. A model with recurrent layers starts only at a block boundary where the
 * recurrent state was saved: the engine saves it at the end of every prefill chunk that ends on a
 * boundary. A model with a layer that cannot resume at a prefix gets no hits.
 */
export class PrefixCache {
  readonly enabled: boolean;
  /** Prompt tokens looked up, and tokens found cached, since the last `takeCounts`. */
  #queries = 0;
  #hits = 0;

  constructor(
    private readonly driver: StepRunner,
    enabled: boolean,
  ) {
    this.enabled = enabled && driver.canResume;
  }

  /**
   * The cached blocks a sequence prefilling `tokens` may start on (their hashes; empty when none
   * or when caching is off), and the hashes of its prompt's full blocks to keep.
   */
  lookup(tokens: ArrayLike<number>): { readonly prefix: string[]; readonly hashes: string[] } {
    if (!this.enabled) return { prefix: [], hashes: [] };
    const kv = this.driver.kv;
    const hashes = blockHashes(tokens, kv.pageSize, [], Math.floor((tokens.length - 1) / kv.pageSize));
    const blocks = kv.match(hashes, this.driver.savesState);
    return { prefix: hashes.slice(0, blocks), hashes };
  }

  /** Counts a sequence admitted with `tokens` to prefill, `hit` of them cached (vLLM's queries and hits, in tokens). */
  count(tokens: number, hit: number): void {
    if (!this.enabled) return;
    this.#queries += tokens;
    this.#hits += hit;
  }

  /** The counts since the last call. */
  takeCounts(): { queries: number; hits: number } {
    const counts = { queries: this.#queries, hits: this.#hits };
    this.#queries = this.#hits = 0;
    return counts;
  }

  /** Makes the sequence's committed full blocks known by hash (after each step). */
  register(s: HashedSequence): void {
    if (!this.enabled) return;
    const blocks = Math.floor(s.seq.length / this.driver.kv.pageSize);
    this.#extend(s, blocks);
    this.driver.kv.register(s.seq.slot, s.hashes, blocks);
  }

  /** After a prefill chunk: a sequence at a block boundary saves its recurrent state there. */
  afterPrefill(s: HashedSequence): void {
    if (!this.enabled || !this.driver.savesState) return;
    const blocks = s.seq.length / this.driver.kv.pageSize;
    if (!Number.isInteger(blocks) || blocks === 0) return;
    this.#extend(s, blocks);
    this.driver.saveSnapshot(s.seq, s.hashes[blocks - 1]!);
  }

  #extend(s: HashedSequence, blocks: number): void {
    if (s.hashes.length < blocks) s.hashes = blockHashes(s.history, this.driver.kv.pageSize, s.hashes, blocks);
  }
}
