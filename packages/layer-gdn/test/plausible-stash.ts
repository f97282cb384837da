import type { SeededRandom } from '@metrale/core';

/**
 * A stash of plausible recorded rows for `seqs` slots ([seqs][H_v][maxK][d_k + d_v + 1]): unit
 * keys, moderate deltas, cumulative gates γ < 0 falling row by row, as a verify leaves them.
 */
export function plausibleStash(s: { hv: number; dk: number; dv: number; maxK: number }, seqs: number, rnd: SeededRandom): Float32Array {
  const stashRow = s.dk + s.dv + 1;
  const stash = Float32Array.from({ length: seqs * s.hv * s.maxK * stashRow }, () => -0.5 + rnd.float());
  for (let e = 0; e < seqs * s.hv; e++) {
    let gam = 0;
    for (let t = 0; t < s.maxK; t++) {
      const row = (e * s.maxK + t) * stashRow;
      const n = Math.hypot(...stash.subarray(row, row + s.dk));
      for (let i = 0; i < s.dk; i++) stash[row + i] = stash[row + i]! / n;
      gam -= 0.05 + 0.5 * rnd.float();
      stash[row + s.dk + s.dv] = gam;
    }
  }
  return stash;
}
