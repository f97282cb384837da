import type { KvCache } from '../kv/kv-cache.js';

/** A running sequence's claim on the page pool for one step: its slot and the rows it must hold by the step's end. */
export interface PageClaim<T> {
  readonly seq: T;
  readonly slot: number;
  readonly rows: number;
}

/**
 * Gives every claim its pages, oldest first; when the pool runs short, preempts the youngest
 * running sequence (the last claim not yet preempted, possibly the one being served) until the
 * claim fits. `preempt` must free the sequence's pages. Returns the sequences preempted, youngest
 * first. Never fails: a sequence alone always fits, as the loop refuses any request whose whole
 * length exceeds the pool.
 */
export function claimPages<T>(kv: KvCache, claims: readonly PageClaim<T>[], preempt: (seq: T) => void): T[] {
  const preempted: T[] = [];
  let last = claims.length - 1;
  for (let i = 0; i <= last; i++) {
    const c = claims[i]!;
    while (kv.need(c.slot, c.rows) > kv.available && last >= i) {
      preempt(claims[last]!.seq);
      preempted.push(claims[last]!.seq);
      last--;
    }
    if (i > last) break;
    kv.grow([c.slot], [c.rows]);
  }
  return preempted;
}
