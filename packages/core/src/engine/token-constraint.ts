import { InvalidArgumentError } from '../errors.js';

/**
 * A rule on which tokens a request may generate next (a JSON schema, a forced tool call), asked
 * by the engine loop before it samples a row of that request and told every token it emits. The
 * loop knows nothing of grammars: an app implements this with the grammar engine of its choice.
 *
 * Draft verification under speculation walks the rule ahead: it accepts the drafts one by one
 * (each row is masked with the tokens allowed after the drafts before it, so a draft the rule
 * forbids is rejected) and then rolls them back, before the loop accepts what was emitted.
 */
export interface TokenConstraint {
  /** The tokens allowed next: bit `t & 31` of word `t >> 5` is set when token `t` may follow. */
  allowedTokens(): Int32Array;
  /** Moves past `token`; false, moving nowhere, when the rule forbids it. */
  accept(token: number): boolean;
  /** Takes back the last `n` accepted tokens. */
  rollback(n: number): void;
  /** The output is complete and nothing may follow: the request ends with 'stop'. */
  isComplete(): boolean;
  /** The request left the loop (finished, cancelled or failed): free what the rule holds. */
  release(): void;
}

/** Thrown when a constraint allows no token at all (a grammar that cannot go on): that request ends with an error. */
export class ConstraintDeadEndError extends InvalidArgumentError {}

/**
 * Sets every token of logit row `row` that `mask` forbids to −∞, so that greedy picks, sampling,
 * acceptance and logprobs all see only the allowed tokens; throws when none is allowed.
 */
export function maskLogitsRow(logits: Float32Array, vocab: number, row: number, mask: Int32Array): void {
  const base = row * vocab;
  let allowed = 0;
  for (let w = 0; w * 32 < vocab; w++) {
    const bits = mask[w] ?? 0;
    if (bits === -1) {
      allowed += Math.min(32, vocab - w * 32);
      continue;
    }
    const end = Math.min(vocab, w * 32 + 32);
    for (let t = w * 32; t < end; t++) {
      if ((bits >>> (t & 31)) & 1) allowed++;
      else logits[base + t] = -Infinity;
    }
  }
  if (allowed === 0) throw new ConstraintDeadEndError('the request\'s output constraint allows no token here (its grammar cannot continue)');
}
