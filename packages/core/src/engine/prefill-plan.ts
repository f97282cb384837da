/** A sequence as prefill planning sees it: the tokens it prefills and how many it has. */
export interface Prefilling {
  readonly prompt: ArrayLike<number>;
  readonly prefilled: number;
}

export interface PrefillChunk<T> {
  readonly seq: T;
  /** Rows of the chunk. */
  readonly rows: number;
}

/**
 * Rows a sequence prefills next: up to the next multiple of `chunk` from its start (or its
 * prompt's end). Cuts fall at the same places whatever else runs and wherever the sequence
 * started (a cached prefix ends on a block boundary, not a chunk one), so its numbers do not
 * depend on the other requests.
 */
export function nextChunkRows(s: Prefilling, chunk: number): number {
  return Math.min(chunk - (s.prefilled % chunk), s.prompt.length - s.prefilled);
}

/**
 * The prompt chunks of one prefill step: sequences still prefilling, in the order given (oldest
 * first), as many as fit `maxRows` rows and `maxBatch` sequences; a chunk that does not fit ends
 * the step's list.
 */
export function planPrefill<T extends Prefilling>(seqs: readonly T[], chunk: number, maxRows: number, maxBatch: number): PrefillChunk<T>[] {
  const plan: PrefillChunk<T>[] = [];
  let rows = 0;
  for (const s of seqs) {
    if (s.prefilled >= s.prompt.length) continue;
    const n = nextChunkRows(s, chunk);
    if (rows + n > maxRows || plan.length === maxBatch) break;
    plan.push({ seq: s, rows: n });
    rows += n;
  }
  return plan;
}
