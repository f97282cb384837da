import type { CpuKernelContext, DevicePtr } from '@metrale/core';
import { loadRow, positionOfRow, selectTopk } from './dsa-numerics.js';
import { slotRows, type PagedCacheArgs } from './dsa-pages.js';
import { loadRowElements } from './dsa-row-elements.js';

// CPU twins of kernels/dsa-index.cu (dsa.index_score) and kernels/dsa-topk.cu (dsa.topk), with
// the layouts of KERNELS.md. Candidates of a row at position t: keys 0 … ⌊(t + 1)/kpool⌋ − 1 of its
// slot (tokens when kpool = 1, complete pools otherwise).

export interface IndexScoreArgs extends PagedCacheArgs {
  readonly qb: DevicePtr;
  readonly xa: DevicePtr;
  readonly keys: DevicePtr;
  readonly keyScales: DevicePtr;
  readonly scores: DevicePtr;
  readonly slots: DevicePtr;
  readonly rowStarts: DevicePtr;
  readonly positions: DevicePtr;
  readonly batch: number;
  readonly rowBase: number;
  readonly rowCount: number;
  readonly qbWidth: number;
  readonly qIOff: number;
  readonly xaWidth: number;
  readonly wOff: number;
  readonly idxHeads: number;
  readonly dI: number;
  readonly kpool: number;
  readonly scoreStride: number;
  readonly idxDtype: number;
  /** Element type of qb (FLOAT_DTYPE_CODE); xa is f32. */
  readonly qbDtype: number;
  readonly scale: number;
}

/** Candidates a row at position `pos` scores. */
export function candidateCount(pos: number, kpool: number): number {
  return Math.floor((pos + 1) / kpool);
}

/**
 * For each real row r in [rowBase, rowBase + rowCount) at position t, and each candidate j <
 * ⌊(t + 1)/kpool⌋: scores[(r − rowBase)·scoreStride + j] =
 * scale · Σ_g w[r][g] · max(0, q_I[r][g] · key_j), with w = xa[r][wOff + g] and q_I =
 * qb[r][qIOff + g·dI : …] (qbDtype values), stored as f32. Entries past a row's candidates are not written.
 */
export function indexScoreCpu(a: IndexScoreArgs, { mem }: CpuKernelContext): void {
  const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
  const rows = rowStarts[a.batch]!;
  if (rows === 0 || a.rowCount === 0) return;
  const slots = mem.i32(a.slots, a.batch);
  const positions = mem.i32(a.positions, rows);
  const key = new Float64Array(a.dI);
  const end = Math.min(rows, a.rowBase + a.rowCount);
  for (let row = a.rowBase; row < end; row++) {
    const slot = slots[positionOfRow(rowStarts, a.batch, row)]!;
    if (slot < 0) continue;
    const count = candidateCount(positions[row]!, a.kpool);
    if (count > a.scoreStride) throw new RangeError(`dsa.index_score: row ${row} has ${count} candidates, more than the score stride ${a.scoreStride}`);
    const keyRow = slotRows(mem, a, 'dsa.index_score', slot);
    const q = loadRowElements(mem, a.qb, row * a.qbWidth + a.qIOff, a.idxHeads * a.dI, a.qbDtype);
    const w = mem.f32(a.xa + BigInt((row * a.xaWidth + a.wOff) * 4), a.idxHeads);
    const out = mem.f32(a.scores + BigInt((row - a.rowBase) * a.scoreStride * 4), Math.max(count, 1));
    for (let j = 0; j < count; j++) {
      loadRow(mem, a.idxDtype, a.keys, a.keyScales, keyRow(j), a.dI, key);
      let s = 0;
      for (let g = 0; g < a.idxHeads; g++) {
        let dot = 0;
        for (let i = 0; i < a.dI; i++) dot += q[g * a.dI + i]! * key[i]!;
        if (dot > 0) s += w[g]! * dot;
      }
      out[j] = s * a.scale;
    }
  }
}

export interface TopkArgs {
  readonly scores: DevicePtr;
  readonly sel: DevicePtr;
  readonly selCount: DevicePtr;
  readonly slots: DevicePtr;
  readonly rowStarts: DevicePtr;
  readonly positions: DevicePtr;
  readonly batch: number;
  readonly rowBase: number;
  readonly rowCount: number;
  readonly scoreStride: number;
  readonly selWidth: number;
  readonly topk: number;
  readonly kpool: number;
}

/**
 * For each row r in [rowBase, rowBase + rowCount): padding rows get selCount[r] = 0. A real row at
 * position t has n = ⌊(t + 1)/kpool⌋ candidates; it keeps min(topk/kpool, n) of them by the tie
 * rule (highest f32 score, then lowest index), expands each kept candidate j to tokens j·kpool …
 * j·kpool + kpool − 1, and appends the tail n·kpool … t. sel[r][0 : selCount[r]] holds the tokens
 * in ascending order.
 */
export function topkCpu(a: TopkArgs, { mem }: CpuKernelContext): void {
  const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
  const rows = rowStarts[a.batch]!;
  if (rows === 0 || a.rowCount === 0) return;
  const slots = mem.i32(a.slots, a.batch);
  const positions = mem.i32(a.positions, rows);
  const keep = Math.floor(a.topk / a.kpool);
  const end = Math.min(rows, a.rowBase + a.rowCount);
  const selCount = mem.i32(a.selCount, rows);
  for (let row = a.rowBase; row < end; row++) {
    const slot = slots[positionOfRow(rowStarts, a.batch, row)]!;
    if (slot < 0) {
      selCount[row] = 0;
      continue;
    }
    const pos = positions[row]!;
    const count = Math.floor((pos + 1) / a.kpool);
    const scores = count > 0 ? mem.f32(a.scores + BigInt((row - a.rowBase) * a.scoreStride * 4), count) : new Float32Array(0);
    const chosen = selectTopk(scores, count, keep);
    const sel = mem.i32(a.sel + BigInt(row * a.selWidth * 4), a.selWidth);
    let n = 0;
    for (const j of chosen) for (let i = 0; i < a.kpool; i++) sel[n++] = j * a.kpool + i;
    for (let t = count * a.kpool; t <= pos; t++) sel[n++] = t;
    if (n > a.selWidth) throw new RangeError(`dsa.topk: row ${row} selected ${n} tokens, more than selWidth ${a.selWidth}`);
    selCount[row] = n;
  }
}
