import type { SeededRandom } from '@metrale/core';
import { projectionRow } from '../src/gdn-config.js';

/**
 * `rows` rows of the input projections' output as the kernels read them (projectionRow): the
 * qkvz columns uniform in [−1, 1), the ba columns in [−2, 2), the padding zero.
 */
export function projectionRows(s: { hk: number; hv: number; dk: number; dv: number }, rows: number, rnd: SeededRandom): Float32Array {
  const { width, baCol } = projectionRow(s);
  const out = new Float32Array(rows * width);
  for (let t = 0; t < rows; t++) {
    for (let c = 0; c < baCol; c++) out[t * width + c] = -1 + 2 * rnd.float();
    for (let c = baCol; c < baCol + 2 * s.hv; c++) out[t * width + c] = -2 + 4 * rnd.float();
  }
  return out;
}

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

/**
 * The layer's and slots' buffers of a twins test (everything but the step's rows, tables and prep):
 * random, never zero, `seqs` slots; `pending` rows per slot (none when undefined).
 */
export function slotBuffers(s: { hk: number; hv: number; dk: number; dv: number; convK: number; maxK: number }, seqs: number, pending: number[] | undefined, rnd: SeededRandom) {
  const convDim = 2 * s.hk * s.dk + s.hv * s.dv;
  const uni = (n: number, lo: number, hi: number) => Float32Array.from({ length: n }, () => lo + (hi - lo) * rnd.float());
  return {
    state: uni(seqs * s.hv * s.dk * s.dv, -0.5, 0.5),
    convRing: uni(seqs * s.convK * convDim, -1, 1),
    convWeight: uni(convDim * s.convK, -0.6, 0.6),
    aLog: Float32Array.from({ length: s.hv }, () => Math.log(0.05 + 0.6 * rnd.float())),
    dtBias: uni(s.hv, -1, 1),
    normWeight: uni(s.dv, 0.5, 1.5),
    stash: plausibleStash(s, seqs, rnd),
    convStash: uni(seqs * 2 * s.maxK * convDim, -1, 1),
    pending: Uint32Array.from(pending ?? new Array<number>(seqs).fill(0)),
  };
}
