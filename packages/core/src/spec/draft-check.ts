import { InvalidArgumentError } from '../errors.js';

/**
 * Drafts proposed after a plain decode, checked against the tokens decoded after it: what a verify
 * of them would have accepted (greedy: up to the first that differs), learnt without verifying.
 * The engine loop keeps one per greedy sequence while its speculation gate decodes.
 */
export class DraftCheck {
  #matched = 0;

  constructor(readonly drafts: readonly number[]) {
    if (drafts.length === 0) throw new InvalidArgumentError('draft check: give at least one draft');
  }

  /** The next decoded token. Returns the drafts accepted once settled (a token that differs, or the last draft matched); undefined before. */
  next(token: number): number | undefined {
    if (token !== this.drafts[this.#matched]) return this.#matched;
    this.#matched++;
    return this.#matched === this.drafts.length ? this.#matched : undefined;
  }
}
