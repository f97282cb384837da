import { InvalidArgumentError, type CpuKernelContext, type DeviceMemoryView, type DevicePtr } from '@metrale/core';
import { stepPositions } from './gdn-decode.cpu.js';
import { pad4 } from './gdn-launch.js';
import { GdnCpu, type GdnShapeArgs, type GdnStepPointers } from './gdn-math.cpu.js';
import { VERIFY_ROWS, verifyPrepLayout } from './gdn-verify-launch.js';

// CPU reference of kernels/gdn-verify.cu, the two-kernel verify (KERNELS.md "Two-kernel verify"):
// gdn.verify-prep writes each (batch position, key head)'s keys record and each (batch position,
// value head)'s values record (conv, norms, gates, the Gram entries of the step's rows) and, in
// carried mode, commits the pending rows to the ring and records the new rows in the conv stash;
// gdn.verify-state folds the slot's pending rows into the state (carried) and runs the k rows
// from the records by the row-block formulas, recording them in the stash. Together they are one
// verify step of gdn.recurrent (mode 1), up to float rounding (the records are f32).

/** Arguments of `gdn.verify-prep` and `gdn.verify-state`: a verify step (k rows per batch position) and the prep buffer. */
export interface VerifyArgs extends GdnStepPointers, GdnShapeArgs {
  /** Keys then values region, gdn-verify-launch.ts verifyPrepLayout(shape, batch). */
  readonly prep: DevicePtr;
  readonly batch: number;
  /** Rows per batch position: 1 .. min(VERIFY_ROWS, maxK). */
  readonly k: number;
  readonly eps: number;
  /** The element type y is stored in (FLOAT_DTYPE_CODE). */
  readonly yDtype: number;
}

/** Offsets of the scalars in a values record, after its v_t [VERIFY_ROWS][d_vp]. */
const BETA = 0;
const A = 4;
const GAMMA = 8;
const CK = 16;
const CQ = 32;

/**
 * The launch's scalars: batch, and k, which the kernels hold in fixed [VERIFY_ROWS] tables and
 * record in the stash's maxK rows per head (so k > min(4, maxK) has no meaning for them).
 */
function checkArgs(name: string, a: VerifyArgs): void {
  if (!Number.isInteger(a.batch) || a.batch < 0) throw new InvalidArgumentError(`${name}: batch must be a non-negative integer, got ${a.batch}`);
  const most = Math.min(VERIFY_ROWS, a.maxK);
  if (!Number.isInteger(a.k) || a.k < 1 || a.k > most) {
    throw new InvalidArgumentError(`${name}: k must be an integer in 1..${most} (min(${VERIFY_ROWS}, maxK ${a.maxK})), got ${a.k}`);
  }
}

function prepView(name: string, a: VerifyArgs, mem: DeviceMemoryView): Float32Array {
  if (a.prep === 0n) throw new InvalidArgumentError(`${name}: the prep buffer is a null pointer`);
  return mem.f32(a.prep, verifyPrepLayout(a, a.batch).totalFloats);
}

/**
 * `gdn.verify-prep`: the keys and values records of every real batch position; carried mode
 * commits the pending rows to the ring and records the k new rows' pre-conv inputs in the conv
 * stash. Padding positions' records are left as they are (gdn.verify-state never reads them).
 */
export function verifyPrepCpu(a: VerifyArgs, { mem }: CpuKernelContext): void {
  const name = 'gdn.verify-prep';
  checkArgs(name, a);
  if (a.batch === 0) return;
  const prep = prepView(name, a, mem);
  const pos = stepPositions(name, a, mem);
  const cpu = new GdnCpu(mem, a, a, a.eps);
  const { hk, hv, dk, dv, K, r, keyDim, convDim } = cpu;
  const { k } = a;
  const carried = a.pending !== 0n;
  const { keyStride, valueStride, keysFloats } = verifyPrepLayout(a, a.batch);
  const dkp = pad4(dk);
  const dvp = pad4(dv);
  const sc = VERIFY_ROWS * dvp;
  const convW = mem.f32(a.convWeight, convDim * K);
  const aLog = mem.f32(a.aLog, hv);
  const dtBias = mem.f32(a.dtBias, hv);
  const pre = new Float32Array(k * convDim);
  // The k rows' conv outputs and normalised q, k, all kept: the Gram entries pair rows.
  const mixed = Array.from({ length: k }, () => new Float64Array(convDim));
  const qn = Array.from({ length: k }, () => new Float64Array(keyDim));
  const kn = Array.from({ length: k }, () => new Float64Array(keyDim));
  const kk = new Float64Array(VERIFY_ROWS * VERIFY_ROWS);
  const kq = new Float64Array(VERIFY_ROWS * VERIFY_ROWS);
  const gam = new Float64Array(VERIFY_ROWS);
  for (const { p, slot, P0, row0, n } of pos) {
    // The ring takes the pending rows' inputs first (as gdn.recurrent's reference folds them
    // before running the rows), so the convs of positions P0.. read them there.
    cpu.writePendingRing(slot, P0, n);
    const rows = cpu.qkvzRows(row0, k);
    for (let t = 0; t < k; t++) cpu.preConv(rows, t, pre.subarray(t * convDim, (t + 1) * convDim));
    for (let t = 0; t < k; t++) {
      cpu.convRow(convW, cpu.ring(slot), pre, P0, P0 + t, mixed[t]!);
      cpu.normalizeQK(mixed[t]!, qn[t]!, kn[t]!);
    }
    if (carried) {
      // Positions P0 .. P0 + k − 1 at their rows of the conv stash ring: the next carried step
      // commits (or rereads) them from there; the pending rows' rows, just read, are other rows.
      const cs = cpu.convStash(slot);
      for (let t = 0; t < k; t++) cs.set(pre.subarray(t * convDim, (t + 1) * convDim), cpu.convStashRow(P0 + t) * convDim);
    }
    for (let g = 0; g < hk; g++) {
      const rec = prep.subarray((p * hk + g) * keyStride, (p * hk + g + 1) * keyStride);
      // Zero first: past d_k and rows ≥ k are zeros the state kernel's dot products run over.
      rec.fill(0);
      for (let t = 0; t < k; t++) {
        for (let i = 0; i < dk; i++) {
          rec[2 * t * dkp + i] = kn[t]![g * dk + i]!;
          rec[(2 * t + 1) * dkp + i] = qn[t]![g * dk + i]!;
        }
      }
    }
    for (let h = 0; h < hv; h++) {
      const g = Math.floor(h / r);
      // The Gram entries of key head g (from the f64 norms, as the reference's rows see them).
      kk.fill(0);
      kq.fill(0);
      for (let s = 0; s < k; s++) {
        for (let t = s; t < k; t++) {
          let sk = 0;
          let sq = 0;
          for (let i = 0; i < dk; i++) {
            sk += kn[s]![g * dk + i]! * kn[t]![g * dk + i]!;
            sq += kn[s]![g * dk + i]! * qn[t]![g * dk + i]!;
          }
          kk[4 * s + t] = sk;
          kq[4 * s + t] = sq;
        }
      }
      const base = keysFloats + (p * hv + h) * valueStride;
      const rec = prep.subarray(base, base + valueStride);
      rec.fill(0);
      let acc = 0;
      for (let t = 0; t < k; t++) {
        for (let j = 0; j < dv; j++) rec[t * dvp + j] = mixed[t]![2 * keyDim + h * dv + j]!;
        const { beta, gate } = cpu.gates(cpu.baOf(rows, t), h, aLog, dtBias);
        acc += gate;
        gam[t] = acc;
        rec[sc + BETA + t] = beta;
        rec[sc + A + t] = Math.exp(acc);
        rec[sc + GAMMA + t] = acc;
      }
      for (let s = 0; s < k; s++) {
        for (let t = s; t < k; t++) {
          const w = Math.exp(gam[t]! - gam[s]!);
          if (s < t) rec[sc + CK + 4 * s + t] = w * kk[4 * s + t]!;
          rec[sc + CQ + 4 * s + t] = w * kq[4 * s + t]!;
        }
      }
    }
  }
}

/**
 * `gdn.verify-state`: pending rows folded into the state (carried: the only state write), then
 * the k rows from the prep records by the row-block formulas (KERNELS.md "Row blocks"): y written
 * and each row's k̂, u and Γ recorded in the stash; the state never takes the new rows.
 */
export function verifyStateCpu(a: VerifyArgs, { mem }: CpuKernelContext): void {
  const name = 'gdn.verify-state';
  checkArgs(name, a);
  if (a.batch === 0) return;
  const prep = prepView(name, a, mem);
  const pos = stepPositions(name, a, mem);
  const cpu = new GdnCpu(mem, a, a, a.eps, a.yDtype);
  const { hk, hv, dk, dv, r, stashRow } = cpu;
  const { k } = a;
  const { keyStride, valueStride, keysFloats } = verifyPrepLayout(a, a.batch);
  const dkp = pad4(dk);
  const dvp = pad4(dv);
  const sc = VERIFY_ROWS * dvp;
  const normW = mem.f32(a.normWeight, dv);
  const S = new Float64Array(dk * dv);
  const ka = new Float64Array(VERIFY_ROWS * dv);
  const qb = new Float64Array(VERIFY_ROWS * dv);
  const u = Array.from({ length: VERIFY_ROWS }, () => new Float64Array(dv));
  const o = new Float64Array(dv);
  for (const { p, slot, row0, n } of pos) {
    // The fold writes the state once; the stash rows it reads are overwritten below only after
    // every head has been folded (the CUDA kernel: each head reads its own stash rows first).
    if (n > 0) cpu.foldStash(slot, n);
    const state = cpu.state(slot);
    const st = cpu.stash(slot);
    const rows = cpu.qkvzRows(row0, k);
    const out = cpu.yRows(row0, k);
    const y = out.values;
    for (let h = 0; h < hv; h++) {
      const g = Math.floor(h / r);
      const keys = prep.subarray((p * hk + g) * keyStride, (p * hk + g + 1) * keyStride);
      const base = keysFloats + (p * hv + h) * valueStride;
      const vals = prep.subarray(base, base + valueStride);
      S.set(state.subarray(h * dk * dv, (h + 1) * dk * dv));
      // One pass over S: a_t = Sᵀk̂_t, b_t = Sᵀq̂_t for all rows.
      ka.fill(0);
      qb.fill(0);
      for (let i = 0; i < dk; i++) {
        for (let t = 0; t < k; t++) {
          const ki = keys[2 * t * dkp + i]!;
          const qi = keys[(2 * t + 1) * dkp + i]!;
          for (let j = 0; j < dv; j++) {
            ka[t * dv + j]! += S[i * dv + j]! * ki;
            qb[t * dv + j]! += S[i * dv + j]! * qi;
          }
        }
      }
      for (let t = 0; t < k; t++) {
        const beta = vals[sc + BETA + t]!;
        const At = vals[sc + A + t]!;
        const ut = u[t]!;
        for (let j = 0; j < dv; j++) {
          let x = vals[t * dvp + j]! - At * ka[t * dv + j]!;
          for (let s = 0; s < t; s++) x -= vals[sc + CK + 4 * s + t]! * u[s]![j]!;
          ut[j] = beta * x;
        }
        for (let j = 0; j < dv; j++) {
          let x = At * qb[t * dv + j]!;
          for (let s = 0; s <= t; s++) x += vals[sc + CQ + 4 * s + t]! * u[s]![j]!;
          o[j] = x;
        }
        cpu.gatedNorm(o, rows, t * cpu.width + cpu.zColumn(h), normW, y.subarray((t * hv + h) * dv, (t * hv + h + 1) * dv));
        const row = (h * a.maxK + t) * stashRow;
        for (let i = 0; i < dk; i++) st[row + i] = keys[2 * t * dkp + i]!;
        for (let j = 0; j < dv; j++) st[row + dk + j] = ut[j]!;
        st[row + dk + dv] = vals[sc + GAMMA + t]!;
      }
    }
    out.store();
  }
}
