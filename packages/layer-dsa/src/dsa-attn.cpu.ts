import type { CpuKernelContext, DevicePtr } from '@metrale/core';
import { loadRow, positionOfRow } from './dsa-numerics.js';
import { slotRows, type PagedCacheArgs } from './dsa-pages.js';
import { storeRowElements } from './dsa-row-elements.js';

// CPU twin of kernels/dsa-attn.cu (dsa.sparse_attn): absorbed MLA attention over the selected
// tokens only (KERNELS.md).

export interface SparseAttnArgs extends PagedCacheArgs {
  readonly qlat: DevicePtr;
  readonly kvCache: DevicePtr;
  readonly sel: DevicePtr;
  readonly selCount: DevicePtr;
  readonly olat: DevicePtr;
  readonly slots: DevicePtr;
  readonly rowStarts: DevicePtr;
  readonly positions: DevicePtr;
  readonly batch: number;
  readonly heads: number;
  readonly kvLora: number;
  readonly rope: number;
  readonly selWidth: number;
  readonly kvDtype: number;
  /** Element type of olat (FLOAT_DTYPE_CODE); qlat is f32. */
  readonly olatDtype: number;
  readonly scale: number;
}

/**
 * For each real row r and head h, over the selected tokens s ∈ sel[r][0 : selCount[r]] (cache rows
 * of (slot, s), paged, = [c_s (kvLora) | kr_s (rope)]): logit_s = scale · qlat[r][h] · [c_s | kr_s];
 * p = softmax(logit); olat[r][h] = Σ_s p_s · c_s (kvLora values, rounded to olatDtype). Padding
 * rows, and rows that selected nothing, get zeros.
 */
export function sparseAttnCpu(a: SparseAttnArgs, { mem }: CpuKernelContext): void {
  const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
  const rows = rowStarts[a.batch]!;
  if (rows === 0) return;
  const slots = mem.i32(a.slots, a.batch);
  const positions = mem.i32(a.positions, rows);
  const selCount = mem.i32(a.selCount, rows);
  const lat = a.kvLora + a.rope;
  const width = a.heads * a.kvLora;
  const olat = new Float64Array(width);
  for (let row = 0; row < rows; row++) {
    const slot = slots[positionOfRow(rowStarts, a.batch, row)]!;
    const n = slot < 0 ? 0 : selCount[row]!;
    if (n === 0) {
      olat.fill(0);
      storeRowElements(mem, a.olat, row * width, olat, 0, width, a.olatDtype);
      continue;
    }
    const pos = positions[row]!;
    const sel = mem.i32(a.sel + BigInt(row * a.selWidth * 4), n);
    const kv = new Float64Array(n * lat);
    const buf = new Float64Array(lat);
    const cacheRow = slotRows(mem, a, 'dsa.sparse_attn', slot);
    for (let j = 0; j < n; j++) {
      const s = sel[j]!;
      if (s < 0 || s > pos) throw new RangeError(`dsa.sparse_attn: row ${row} (position ${pos}) selected token ${s}`);
      kv.set(loadRow(mem, a.kvDtype, a.kvCache, 0n, cacheRow(s), lat, buf), j * lat);
    }
    const q = mem.f32(a.qlat + BigInt(row * a.heads * lat * 4), a.heads * lat);
    const logits = new Float64Array(n);
    for (let h = 0; h < a.heads; h++) {
      let max = -Infinity;
      for (let j = 0; j < n; j++) {
        let dot = 0;
        for (let i = 0; i < lat; i++) dot += q[h * lat + i]! * kv[j * lat + i]!;
        logits[j] = dot * a.scale;
        max = Math.max(max, logits[j]!);
      }
      let z = 0;
      for (let j = 0; j < n; j++) {
        logits[j] = Math.exp(logits[j]! - max);
        z += logits[j]!;
      }
      for (let i = 0; i < a.kvLora; i++) {
        let acc = 0;
        for (let j = 0; j < n; j++) acc += logits[j]! * kv[j * lat + i]!;
        olat[h * a.kvLora + i] = acc / z;
      }
    }
    storeRowElements(mem, a.olat, row * width, olat, 0, width, a.olatDtype);
  }
}
