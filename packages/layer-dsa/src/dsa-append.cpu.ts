import type { CpuKernelContext, DevicePtr } from '@metrale/core';
import { applyRope, positionOfRow, storeRow } from './dsa-numerics.js';
import { slotRows, type PagedCacheArgs } from './dsa-pages.js';
import { loadRowElements, storeRowElements } from './dsa-row-elements.js';

// CPU twins of kernels/dsa-append.cu: dsa.mla_append, dsa.index_append, dsa.pool_append,
// dsa.ring_store and dsa.q_rope, with the layouts of KERNELS.md, run for the whole launch at once.
// Every per-step value comes from the step tables (slots, rowStarts, positions, seqLens). xa and
// the ring are f32; qr and qb are in the rows' type (FLOAT_DTYPE_CODE qrDtype / qbDtype).

interface StepTablePtrs {
  readonly slots: DevicePtr;
  readonly rowStarts: DevicePtr;
  readonly positions: DevicePtr;
}

/** The step's rows: for each real row (slot ≥ 0), its batch position, slot and position. */
export function* stepRows(mem: CpuKernelContext['mem'], t: StepTablePtrs, batch: number): Generator<{ row: number; p: number; slot: number; pos: number }> {
  const rowStarts = mem.i32(t.rowStarts, batch + 1);
  const rows = rowStarts[batch]!;
  if (rows === 0) return;
  const slots = mem.i32(t.slots, batch);
  const positions = mem.i32(t.positions, rows);
  for (let row = 0; row < rows; row++) {
    const p = positionOfRow(rowStarts, batch, row);
    const slot = slots[p]!;
    if (slot < 0) continue;
    yield { row, p, slot, pos: positions[row]! };
  }
}

export interface MlaAppendArgs extends StepTablePtrs, PagedCacheArgs {
  readonly xa: DevicePtr;
  readonly qr: DevicePtr;
  readonly kvCache: DevicePtr;
  readonly qaNorm: DevicePtr;
  readonly kvaNorm: DevicePtr;
  readonly invFreq: DevicePtr;
  readonly batch: number;
  readonly xaWidth: number;
  readonly qLora: number;
  readonly kvLora: number;
  readonly rope: number;
  readonly ropeInterleave: number;
  readonly kvDtype: number;
  /** Element type of qr (FLOAT_DTYPE_CODE). */
  readonly qrDtype: number;
  readonly eps: number;
}

/**
 * Per real row: qr = RMSNorm(q_a)·qaNorm (in qrDtype); the MLA cache row at (slot, pos) =
 * [RMSNorm(kv_a[0:kvLora])·kvaNorm | RoPE(kv_a[kvLora:kvLora+rope], pos)].
 */
export function mlaAppendCpu(a: MlaAppendArgs, { mem }: CpuKernelContext): void {
  const lat = a.kvLora + a.rope;
  const invFreq = a.rope > 0 ? mem.f32(a.invFreq, a.rope / 2) : new Float32Array(0);
  const qaNorm = mem.f32(a.qaNorm, a.qLora);
  const kvaNorm = mem.f32(a.kvaNorm, a.kvLora);
  const rowBuf = new Float64Array(lat);
  const qr = new Float64Array(a.qLora);
  const scratch = new Float64Array(Math.max(a.rope, 1));
  for (const { row, slot, pos } of stepRows(mem, a, a.batch)) {
    const cacheRow = slotRows(mem, a, 'dsa.mla_append', slot)(pos);
    const x = mem.f32(a.xa + BigInt(row * a.xaWidth * 4), a.xaWidth);
    let ss = 0;
    for (let i = 0; i < a.qLora; i++) ss += x[i]! * x[i]!;
    let inv = 1 / Math.sqrt(ss / a.qLora + a.eps);
    for (let i = 0; i < a.qLora; i++) qr[i] = x[i]! * inv * qaNorm[i]!;
    storeRowElements(mem, a.qr, row * a.qLora, qr, 0, a.qLora, a.qrDtype);
    ss = 0;
    for (let i = 0; i < a.kvLora; i++) ss += x[a.qLora + i]! ** 2;
    inv = 1 / Math.sqrt(ss / a.kvLora + a.eps);
    for (let i = 0; i < a.kvLora; i++) rowBuf[i] = Math.fround(x[a.qLora + i]! * inv * kvaNorm[i]!);
    for (let i = 0; i < a.rope; i++) rowBuf[a.kvLora + i] = x[a.qLora + a.kvLora + i]!;
    if (a.rope > 0) applyRope(rowBuf, a.kvLora, a.rope, pos, invFreq, a.ropeInterleave !== 0, scratch);
    storeRow(mem, a.kvDtype, a.kvCache, 0n, cacheRow, rowBuf, 0, lat);
  }
}

export interface IndexAppendArgs extends StepTablePtrs, PagedCacheArgs {
  readonly xa: DevicePtr;
  readonly idxCache: DevicePtr;
  readonly idxScales: DevicePtr;
  readonly kNormWeight: DevicePtr;
  readonly kNormBias: DevicePtr;
  readonly invFreq: DevicePtr;
  readonly batch: number;
  readonly xaWidth: number;
  readonly kOff: number;
  readonly dI: number;
  readonly idxRope: number;
  readonly ropeInterleave: number;
  readonly idxDtype: number;
  readonly mode: number;
  readonly eps: number;
}

/**
 * Per real row: k = LayerNorm(xa[kOff : kOff + dI])·w + b, then RoPE on its first `idxRope`
 * channels. mode 0: written to the indexer key cache row of (slot, pos) in `idxDtype`; mode 1
 * (pooled): written back over xa[kOff : kOff + dI] as f32 for `dsa.pool_append`.
 */
export function indexAppendCpu(a: IndexAppendArgs, { mem }: CpuKernelContext): void {
  const w = mem.f32(a.kNormWeight, a.dI);
  const b = mem.f32(a.kNormBias, a.dI);
  const invFreq = a.idxRope > 0 ? mem.f32(a.invFreq, a.idxRope / 2) : new Float32Array(0);
  const k = new Float64Array(a.dI);
  const scratch = new Float64Array(Math.max(a.idxRope, 1));
  for (const { row, slot, pos } of stepRows(mem, a, a.batch)) {
    const cacheRow = a.mode === 1 ? 0 : slotRows(mem, a, 'dsa.index_append', slot)(pos);
    const x = mem.f32(a.xa + BigInt((row * a.xaWidth + a.kOff) * 4), a.dI);
    let mean = 0;
    for (let i = 0; i < a.dI; i++) mean += x[i]!;
    mean /= a.dI;
    let variance = 0;
    for (let i = 0; i < a.dI; i++) variance += (x[i]! - mean) ** 2;
    variance /= a.dI;
    const inv = 1 / Math.sqrt(variance + a.eps);
    for (let i = 0; i < a.dI; i++) k[i] = Math.fround((x[i]! - mean) * inv * w[i]! + b[i]!);
    if (a.idxRope > 0) applyRope(k, 0, a.idxRope, pos, invFreq, a.ropeInterleave !== 0, scratch);
    if (a.mode === 1) x.set(k);
    else storeRow(mem, a.idxDtype, a.idxCache, a.idxScales, cacheRow, k, 0, a.dI);
  }
}

export interface PoolAppendArgs extends StepTablePtrs, PagedCacheArgs {
  readonly xa: DevicePtr;
  readonly ring: DevicePtr;
  readonly poolCache: DevicePtr;
  readonly poolScales: DevicePtr;
  readonly ape: DevicePtr;
  readonly seqLens: DevicePtr;
  readonly batch: number;
  readonly xaWidth: number;
  readonly kOff: number;
  readonly gOff: number;
  readonly dI: number;
  readonly kpool: number;
  readonly ringLen: number;
  readonly idxDtype: number;
}

/**
 * Per real row whose position completes a pool ((pos + 1) mod kpool = 0): pool j = (pos + 1)/kpool − 1
 * of members m = pos − kpool + 1 … pos. A member at m ≥ seqLen is a row of this step (row
 * rowStarts[p] + m − seqLen, its LayerNorm'd key and gate logits in xa); an earlier member is in the
 * slot's ring at m mod ringLen. Per channel c: key_j[c] = Σ_i softmax_i(gate_i[c] + ape[i][c]) · k_i[c],
 * the softmax over the kpool members in f32. Written to the pool cache row of (slot, j) in `idxDtype`.
 */
export function poolAppendCpu(a: PoolAppendArgs, { mem }: CpuKernelContext): void {
  const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
  const seqLens = mem.i32(a.seqLens, a.batch);
  const ape = mem.f32(a.ape, a.kpool * a.dI);
  const member = (p: number, slot: number, m: number): { k: Float32Array; g: Float32Array } => {
    if (m >= seqLens[p]!) {
      const row = rowStarts[p]! + m - seqLens[p]!;
      const base = a.xa + BigInt(row * a.xaWidth * 4);
      return { k: mem.f32(base + BigInt(a.kOff * 4), a.dI), g: mem.f32(base + BigInt(a.gOff * 4), a.dI) };
    }
    const base = a.ring + BigInt(((slot * a.ringLen + (m % a.ringLen)) * 2 * a.dI) * 4);
    return { k: mem.f32(base, a.dI), g: mem.f32(base + BigInt(a.dI * 4), a.dI) };
  };
  const key = new Float64Array(a.dI);
  const logits = new Float64Array(a.kpool);
  for (const { p, slot, pos } of stepRows(mem, a, a.batch)) {
    if ((pos + 1) % a.kpool !== 0) continue;
    const j = (pos + 1) / a.kpool - 1;
    const cacheRow = slotRows(mem, a, 'dsa.pool_append', slot)(j);
    const members = Array.from({ length: a.kpool }, (_, i) => member(p, slot, pos - a.kpool + 1 + i));
    for (let c = 0; c < a.dI; c++) {
      let max = -Infinity;
      for (let i = 0; i < a.kpool; i++) {
        logits[i] = Math.fround(members[i]!.g[c]! + ape[i * a.dI + c]!);
        max = Math.max(max, logits[i]!);
      }
      let z = 0;
      for (let i = 0; i < a.kpool; i++) z += Math.exp(logits[i]! - max);
      let acc = 0;
      for (let i = 0; i < a.kpool; i++) acc += Math.fround(Math.exp(logits[i]! - max) / z) * members[i]!.k[c]!;
      key[c] = acc;
    }
    storeRow(mem, a.idxDtype, a.poolCache, a.poolScales, cacheRow, key, 0, a.dI);
  }
}

export interface RingStoreArgs extends StepTablePtrs {
  readonly xa: DevicePtr;
  readonly ring: DevicePtr;
  readonly batch: number;
  readonly xaWidth: number;
  readonly kOff: number;
  readonly gOff: number;
  readonly dI: number;
  readonly ringLen: number;
}

/**
 * Per real row among the last `ringLen` rows of its sequence in this step: ring[slot][pos mod
 * ringLen] = [k (dI) | gate (dI)] from xa, f32. Runs after `dsa.pool_append`.
 */
export function ringStoreCpu(a: RingStoreArgs, { mem }: CpuKernelContext): void {
  const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
  for (const { row, p, slot, pos } of stepRows(mem, a, a.batch)) {
    if (row < rowStarts[p + 1]! - a.ringLen) continue;
    const base = a.xa + BigInt(row * a.xaWidth * 4);
    const dst = mem.f32(a.ring + BigInt(((slot * a.ringLen + (pos % a.ringLen)) * 2 * a.dI) * 4), 2 * a.dI);
    dst.set(mem.f32(base + BigInt(a.kOff * 4), a.dI), 0);
    dst.set(mem.f32(base + BigInt(a.gOff * 4), a.dI), a.dI);
  }
}

export interface QRopeArgs extends StepTablePtrs {
  readonly qb: DevicePtr;
  readonly qlat: DevicePtr;
  readonly invFreq: DevicePtr;
  readonly batch: number;
  readonly qbWidth: number;
  readonly heads: number;
  readonly nope: number;
  readonly rope: number;
  readonly kvLora: number;
  readonly idxHeads: number;
  readonly dI: number;
  readonly idxRope: number;
  readonly ropeInterleave: number;
  readonly idxRopeInterleave: number;
  /** Element type of qb (FLOAT_DTYPE_CODE); qlat is f32. */
  readonly qbDtype: number;
}

/**
 * Per real row: for every head h, qlat[row][h][kvLora : kvLora + rope] = RoPE(qb[row][h·(nope + rope)
 * + nope : …+ rope], pos); for every indexer head g, RoPE in place on the first idxRope channels of
 * qb[row][H·(nope + rope) + g·dI : …] (rounded to qbDtype). qlat[row][h][0 : kvLora] is the absorb
 * GEMM's, untouched.
 */
export function qRopeCpu(a: QRopeArgs, { mem }: CpuKernelContext): void {
  const maxRope = Math.max(a.rope, a.idxRope);
  const invFreq = maxRope > 0 ? mem.f32(a.invFreq, maxRope / 2) : new Float32Array(0);
  const lat = a.kvLora + a.rope;
  const buf = new Float64Array(Math.max(maxRope, 1));
  const scratch = new Float64Array(Math.max(maxRope, 1));
  const qIOff = a.heads * (a.nope + a.rope);
  for (const { row, pos } of stepRows(mem, a, a.batch)) {
    const q = loadRowElements(mem, a.qb, row * a.qbWidth, a.qbWidth, a.qbDtype);
    if (a.rope > 0) {
      for (let h = 0; h < a.heads; h++) {
        const src = h * (a.nope + a.rope) + a.nope;
        for (let i = 0; i < a.rope; i++) buf[i] = q[src + i]!;
        applyRope(buf, 0, a.rope, pos, invFreq, a.ropeInterleave !== 0, scratch);
        mem.f32(a.qlat + BigInt(((row * a.heads + h) * lat + a.kvLora) * 4), a.rope).set(buf.subarray(0, a.rope));
      }
    }
    if (a.idxRope > 0) {
      for (let g = 0; g < a.idxHeads; g++) {
        const off = qIOff + g * a.dI;
        for (let i = 0; i < a.idxRope; i++) buf[i] = q[off + i]!;
        applyRope(buf, 0, a.idxRope, pos, invFreq, a.idxRopeInterleave !== 0, scratch);
        storeRowElements(mem, a.qb, row * a.qbWidth + off, buf, 0, a.idxRope, a.qbDtype);
      }
    }
  }
}
