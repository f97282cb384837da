import { InvalidArgumentError, type CpuKernelContext, type DeviceMemoryView, type DevicePtr } from '@metrale/core';
import { GdnCpu, sigmoid, silu, softplus, type GdnShapeArgs, type GdnStepPointers } from './gdn-math.cpu.js';

// CPU reference of kernels/gdn-decode.cu, the two-kernel decode (KERNELS.md "Two-kernel decode"):
// gdn.decode-prep writes each (batch position, value head)'s prep record and commits the conv
// ring; gdn.decode-state folds the slot's pending rows into the state and runs the row from the
// record. Together they are one decode step of gdn.recurrent (mode 0, k = 1).

/** Arguments of `gdn.decode-prep` and `gdn.decode-state`: a decode step (one row per batch position) and the prep buffer. */
export interface DecodeArgs extends GdnStepPointers, GdnShapeArgs {
  /** [batch][H_v][decodePrepStride] f32 (gdn-decode-launch.ts). */
  readonly prep: DevicePtr;
  readonly batch: number;
  readonly eps: number;
}

const pad4 = (x: number): number => (x + 3) & ~3;

/** f32 words of one (batch position, value head)'s prep record: k̂ [d_kp], q̂ [d_kp], v [d_vp], then β, α, k̂·q̂, 0. */
export function decodePrepStride(s: Pick<GdnShapeArgs, 'dk' | 'dv'>): number {
  return 2 * pad4(s.dk) + pad4(s.dv) + 4;
}

interface Position {
  readonly p: number;
  readonly slot: number;
  /** Position of the step's row (the committed length, pending rows included). */
  readonly P0: number;
  readonly row0: number;
  /** Pending carried rows (positions P0 − n .. P0 − 1). */
  readonly n: number;
}

/** The real batch positions of the step, with their pending rows (carried mode when `pending` ≠ 0). */
function positions(name: string, a: DecodeArgs, mem: DeviceMemoryView): Position[] {
  const slots = mem.i32(a.slots, a.batch);
  const seqLens = mem.i32(a.seqLens, a.batch);
  const rowStarts = mem.i32(a.rowStarts, a.batch);
  const out: Position[] = [];
  for (let p = 0; p < a.batch; p++) {
    const slot = slots[p]!;
    if (slot < 0) continue;
    const P0 = seqLens[p]!;
    const n = a.pending === 0n ? 0 : mem.u32(a.pending + BigInt(4 * slot), 1)[0]!;
    if (n > P0 || n > a.maxK) throw new InvalidArgumentError(`${name}: slot ${slot} has ${n} pending rows (committed length ${P0}, maxK ${a.maxK})`);
    out.push({ p, slot, P0, row0: rowStarts[p]!, n });
  }
  return out;
}

function prepView(name: string, a: DecodeArgs, mem: DeviceMemoryView): Float32Array {
  if (!Number.isInteger(a.batch) || a.batch < 0) throw new InvalidArgumentError(`${name}: batch must be a non-negative integer, got ${a.batch}`);
  if (a.prep === 0n) throw new InvalidArgumentError(`${name}: the prep buffer is a null pointer`);
  return mem.f32(a.prep, a.batch * a.hv * decodePrepStride(a));
}

/** `gdn.decode-prep`: the prep record of every (batch position, value head), and the conv ring committed. */
export function decodePrepCpu(a: DecodeArgs, { mem }: CpuKernelContext): void {
  if (a.batch === 0) return;
  const prep = prepView('gdn.decode-prep', a, mem);
  const pos = positions('gdn.decode-prep', a, mem);
  const cpu = new GdnCpu(mem, a, a, a.eps);
  const { hv, dk, dv, K, r, keyDim, convDim } = cpu;
  const stride = decodePrepStride(a);
  const dkp = pad4(dk);
  const dvp = pad4(dv);
  const convW = mem.f32(a.convWeight, convDim * K);
  const aLog = mem.f32(a.aLog, hv);
  const dtBias = mem.f32(a.dtBias, hv);
  const pre = new Float32Array(convDim);
  const mixed = new Float64Array(convDim);
  const qn = new Float64Array(keyDim);
  const kn = new Float64Array(keyDim);
  for (const { p, slot, P0, row0, n } of pos) {
    const ring = cpu.ring(slot);
    const convStash = n > 0 ? cpu.convStash(slot) : undefined;
    cpu.preConv(cpu.qkvzRows(row0, 1), 0, pre);
    // Causal depthwise conv over positions P0−K+1..P0: the row itself, pending rows from the conv
    // stash, older ones from the ring; then SiLU.
    for (let c = 0; c < convDim; c++) {
      let acc = 0;
      for (let tap = 0; tap < K; tap++) {
        const x = P0 - K + 1 + tap;
        if (x < 0) continue;
        const v = x === P0 ? pre[c]! : x >= P0 - n ? convStash![cpu.convStashRow(x) * convDim + c]! : ring[(x % K) * convDim + c]!;
        acc += convW[c * K + tap]! * v;
      }
      mixed[c] = silu(acc);
    }
    cpu.normalizeQK(mixed, qn, kn);
    const ba = mem.f32(a.ba + BigInt(4 * row0 * 2 * hv), 2 * hv);
    for (let h = 0; h < hv; h++) {
      const g = Math.floor(h / r);
      const hl = h % r;
      const rec = prep.subarray((p * hv + h) * stride, (p * hv + h + 1) * stride);
      rec.fill(0);
      let kq = 0;
      for (let i = 0; i < dk; i++) {
        rec[i] = kn[g * dk + i]!;
        rec[dkp + i] = qn[g * dk + i]!;
        kq += kn[g * dk + i]! * qn[g * dk + i]!;
      }
      for (let j = 0; j < dv; j++) rec[2 * dkp + j] = mixed[2 * keyDim + h * dv + j]!;
      const sc = 2 * dkp + dvp;
      rec[sc] = sigmoid(ba[g * 2 * r + hl]!);
      rec[sc + 1] = Math.exp(-Math.exp(aLog[h]!) * softplus(ba[g * 2 * r + r + hl]! + dtBias[h]!));
      rec[sc + 2] = kq;
    }
    // The ring takes the pending rows' inputs and the row's (positions P0 − n .. P0).
    if (convStash) cpu.writeRing(slot, P0 - n, (t, out) => out.set(convStash.subarray(cpu.convStashRow(P0 - n + t) * convDim, (cpu.convStashRow(P0 - n + t) + 1) * convDim)), n);
    cpu.writeRing(slot, P0, (_, out) => out.set(pre), 1);
  }
}

/** `gdn.decode-state`: pending rows folded into the state, then the row from its prep record (state and y written). */
export function decodeStateCpu(a: DecodeArgs, { mem }: CpuKernelContext): void {
  if (a.batch === 0) return;
  const prep = prepView('gdn.decode-state', a, mem);
  const pos = positions('gdn.decode-state', a, mem);
  const cpu = new GdnCpu(mem, a, a, a.eps);
  const { hv, dk, dv, r } = cpu;
  const stride = decodePrepStride(a);
  const dkp = pad4(dk);
  const dvp = pad4(dv);
  const normW = mem.f32(a.normWeight, dv);
  const u = new Float64Array(dv);
  const o = new Float64Array(dv);
  const S = new Float64Array(dk * dv);
  for (const { p, slot, row0, n } of pos) {
    if (n > 0) cpu.foldStash(slot, n);
    const state = cpu.state(slot);
    const row = cpu.qkvzRows(row0, 1);
    const y = mem.f32(a.y + BigInt(4 * row0 * hv * dv), hv * dv);
    for (let h = 0; h < hv; h++) {
      const rec = prep.subarray((p * hv + h) * stride, (p * hv + h + 1) * stride);
      const sc = 2 * dkp + dvp;
      const beta = rec[sc]!;
      const alpha = rec[sc + 1]!;
      const s0 = h * dk * dv;
      // S ← αS; u = β(v − Sᵀk̂); S ← S + k̂ uᵀ; o = Sᵀq̂.
      for (let e = 0; e < dk * dv; e++) S[e] = alpha * state[s0 + e]!;
      for (let j = 0; j < dv; j++) {
        let kv = 0;
        for (let i = 0; i < dk; i++) kv += S[i * dv + j]! * rec[i]!;
        u[j] = beta * (rec[2 * dkp + j]! - kv);
      }
      o.fill(0);
      for (let i = 0; i < dk; i++) {
        for (let j = 0; j < dv; j++) {
          S[i * dv + j]! += rec[i]! * u[j]!;
          o[j]! += S[i * dv + j]! * rec[dkp + i]!;
        }
      }
      for (let e = 0; e < dk * dv; e++) state[s0 + e] = S[e]!;
      let ms = 0;
      for (let j = 0; j < dv; j++) ms += o[j]! ** 2;
      const inv = 1 / Math.sqrt(ms / dv + a.eps);
      const g = Math.floor(h / r);
      const z0 = g * (2 * dk + 2 * r * dv) + 2 * dk + r * dv + (h % r) * dv;
      for (let j = 0; j < dv; j++) y[h * dv + j] = normW[j]! * o[j]! * inv * silu(row[z0 + j]!);
    }
  }
}
