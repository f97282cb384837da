import { InvalidArgumentError } from '@metrale/core';

// Where the pieces of a pipelined prefill end (gdn-prefill-launch.ts prefillPlan; KERNELS.md
// "Pieces"). Each piece's scan runs beside the next piece's WY kernel, which has only the SMs the
// scan leaves; the first piece's WY has the whole GPU and the last piece's scan runs alone.

/**
 * Ends of pieces of `size` chunks over `chunks` chunks (the last may be shorter): [size, 2·size, …, chunks].
 */
export function equalPieces(chunks: number, size: number): number[] {
  if (!Number.isInteger(size) || size < 1) throw new InvalidArgumentError(`gdn prefill: pieceChunks must be a positive integer, got ${size}`);
  const ends: number[] = [];
  for (let c = size; c < chunks; c += size) ends.push(c);
  ends.push(chunks);
  return ends;
}

/**
 * Ends of pieces that shrink by `ratio` (0 < ratio < 1) over `chunks` chunks, as many as keep the
 * last at least `minChunks` (one piece when even two would not). Why shrinking: a piece's scan
 * should last about as long as the next piece's WY kernel on the SMs beside it, so that neither
 * waits long, and the parts that run alone (the first WY, the last scan) stay short; every piece
 * also costs a scan's start and end. The ratio is measured (gdn-prefill-launch.ts PREFILL_PIECE_RATIO).
 */
export function shrinkingPieces(chunks: number, ratio: number, minChunks: number): number[] {
  if (!(ratio > 0 && ratio < 1)) throw new InvalidArgumentError(`gdn prefill: pieceRatio must be in (0, 1), got ${ratio}`);
  if (!Number.isInteger(minChunks) || minChunks < 1) throw new InvalidArgumentError(`gdn prefill: the smallest piece must be a positive integer of chunks, got ${minChunks}`);
  // The first piece of k: chunks·(1 − ratio)/(1 − ratioᵏ); the last: that · ratioᵏ⁻¹.
  const first = (k: number) => (chunks * (1 - ratio)) / (1 - ratio ** k);
  let k = 1;
  while (k < 64 && first(k + 1) * ratio ** k >= minChunks) k++;
  const ends: number[] = [];
  let sum = 0;
  for (let i = 0; i < k - 1; i++) {
    sum += first(k) * ratio ** i;
    const end = Math.round(sum);
    if (end > (ends.at(-1) ?? 0) && end < chunks) ends.push(end);
  }
  ends.push(chunks);
  return ends;
}
