import type { TokenConstraint } from '@metrale/core';
import type { GrammarHost } from './grammar-host.js';
import { SLOT_ERROR_BYTES, SLOT_HEADER_WORDS, SLOT_SEQ, SLOT_STATUS, maskWords, slotErrorBytes, type MaskRequest } from './grammar-host-protocol.js';
import { GrammarEngineError } from './xgrammar-runtime.js';

/** A host that does not answer a mask request within this long is taken for dead. */
const ANSWER_TIMEOUT_MS = 30_000;
/** Masks kept behind the current position: a verify walks at most maxK drafts ahead and back. */
const KEPT_BEHIND = 32;

/**
 * A request's TokenConstraint on the engine thread, over a matcher that lives on a grammar host
 * thread. The engine's calls stay synchronous and cheap:
 * - `accept` and `rollback` move a local copy of the position (the tokens accepted so far) and are
 *   sent to the host with the next mask request, not one by one;
 * - `accept` is checked against the mask of the position it is at (xgrammar's matcher accepts
 *   exactly the tokens its mask allows);
 * - `isComplete` is true once a stop token was accepted (xgrammar's matcher, as created here,
 *   terminates on a stop token and nowhere else);
 * - `allowedTokens` returns the mask of the position: computed ahead when the pool prefetched it
 *   during the step's forward, or asked for now (a round trip through the slot, tens of µs).
 * Masks are kept per position along the path taken, so a verify that walks its drafts, rolls them
 * back and then accepts the same tokens reuses the masks of its walk.
 */
export class RemoteConstraint implements TokenConstraint {
  readonly #host: GrammarHost;
  readonly #id: number;
  readonly #words: Int32Array;
  readonly #slot: SharedArrayBuffer;
  readonly #vocabSize: number;
  readonly #stops: ReadonlySet<number>;
  readonly #onRelease: () => void;
  /** The path: tokens[0, len) are accepted; tokens past len are a path rolled back from, kept while it may be taken again. */
  readonly #tokens: number[] = [];
  #len = 0;
  /** The mask at each position of the path (position p: after tokens[0, p)). */
  readonly #masks = new Map<number, Int32Array>();
  /** The host's matcher stands at tokens[0, hostLen) as they were when last sent; the first hostValid of them still match the path. */
  #hostLen = 0;
  #hostValid = 0;
  #seq = 0;
  /** A mask request sent and not yet read back: its seq and the position it answers. */
  #inFlight: { seq: number; at: number } | undefined;
  #released = false;

  constructor(o: { host: GrammarHost; id: number; slot: SharedArrayBuffer; vocabSize: number; stopTokenIds: readonly number[]; onRelease: () => void }) {
    this.#host = o.host;
    this.#id = o.id;
    this.#slot = o.slot;
    this.#words = new Int32Array(o.slot);
    this.#vocabSize = o.vocabSize;
    this.#stops = new Set(o.stopTokenIds);
    this.#onRelease = o.onRelease;
  }

  /** The host thread its matcher lives on. */
  get host(): GrammarHost {
    return this.#host;
  }

  allowedTokens(): Int32Array {
    return this.#maskHere();
  }

  accept(token: number): boolean {
    const mask = this.#maskHere();
    if (!Number.isInteger(token) || token < 0 || token >= this.#vocabSize || ((mask[token >> 5]! >>> (token & 31)) & 1) === 0) return false;
    if (this.#tokens[this.#len] !== token) {
      // A new path from here: what was computed along the old one no longer applies.
      this.#tokens.length = this.#len;
      this.#tokens.push(token);
      for (const p of this.#masks.keys()) if (p > this.#len) this.#masks.delete(p);
      this.#hostValid = Math.min(this.#hostValid, this.#len);
    }
    this.#len++;
    for (const p of this.#masks.keys()) if (p < this.#len - KEPT_BEHIND) this.#masks.delete(p);
    return true;
  }

  rollback(n: number): void {
    if (n > this.#len) throw new GrammarEngineError(`cannot roll back ${n} tokens: only ${this.#len} were accepted`);
    this.#len -= n;
  }

  isComplete(): boolean {
    return this.#len > 0 && this.#stops.has(this.#tokens[this.#len - 1]!);
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#host.close(this.#id);
    this.#onRelease();
  }

  /**
   * The mask request that brings the host to this position, when its mask is neither known nor
   * being computed; the pool sends those of a step together, before the step's forward.
   */
  prefetch(): MaskRequest | undefined {
    if (this.#released || this.#masks.has(this.#len) || this.#inFlight?.at === this.#len) return undefined;
    if (this.#inFlight) this.#read(this.#inFlight);
    return this.#request();
  }

  #maskHere(): Int32Array {
    const known = this.#masks.get(this.#len);
    if (known) return known;
    if (this.#released) throw new GrammarEngineError('the request\'s grammar constraint was released');
    if (this.#inFlight?.at !== this.#len) {
      if (this.#inFlight) this.#read(this.#inFlight);
      this.#host.masks([this.#request()]);
    }
    this.#read(this.#inFlight!);
    const mask = this.#masks.get(this.#len);
    if (!mask) throw new GrammarEngineError('the grammar host answered for another position (a bug)');
    return mask;
  }

  /** Marks a request for the current position as sent (the caller posts it). */
  #request(): MaskRequest {
    const common = Math.min(this.#hostValid, this.#len);
    const req: MaskRequest = { id: this.#id, seq: ++this.#seq, rollback: this.#hostLen - common, accept: this.#tokens.slice(common, this.#len) };
    this.#hostLen = this.#len;
    this.#hostValid = this.#len;
    this.#inFlight = { seq: req.seq, at: this.#len };
    return req;
  }

  /** Waits for the answer to `flight` and keeps its mask when the path did not change under it. */
  #read(flight: { seq: number; at: number }): void {
    const deadline = performance.now() + ANSWER_TIMEOUT_MS;
    let seen: number;
    while ((seen = Atomics.load(this.#words, SLOT_SEQ)) < flight.seq) {
      const left = deadline - performance.now();
      if (left <= 0) throw new GrammarEngineError(`the grammar host did not answer a mask request within ${ANSWER_TIMEOUT_MS / 1000} s`);
      Atomics.wait(this.#words, SLOT_SEQ, seen, left);
    }
    this.#inFlight = undefined;
    if (Atomics.load(this.#words, SLOT_STATUS) !== 0) {
      const bytes = slotErrorBytes(this.#slot, this.#vocabSize).slice(0, Atomics.load(this.#words, SLOT_ERROR_BYTES));
      throw new GrammarEngineError(new TextDecoder().decode(bytes));
    }
    // Still the path it was computed for: nothing accepted differently below its position since.
    if (this.#hostValid >= flight.at) {
      this.#masks.set(flight.at, this.#words.slice(SLOT_HEADER_WORDS, SLOT_HEADER_WORDS + maskWords(this.#vocabSize)));
    }
  }
}
