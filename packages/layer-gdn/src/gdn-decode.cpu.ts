import { InvalidArgumentError, elementAt, readElements, rowDtypeOf, type CpuKernelContext, type DeviceMemoryView, type DevicePtr } from '@metrale/core';
import { decodePrepStride } from './gdn-decode-launch.js';
import { pad4 } from './gdn-launch.js';
import { GdnCpu, type GdnShapeArgs, type GdnStepPointers } from './gdn-math.cpu.js';

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
  /** The element type y is stored in (FLOAT_DTYPE_CODE). */
  readonly yDtype: number;
  /**
   * gdn.decode-prep-gates: the layer's input rows [rows][hidden] in the row type (yDtype), from
   * which the prep makes the gates' raw inputs; 0n for gdn.decode-prep and the state kernels.
   */
  readonly baInput: DevicePtr;
  /** in_proj_ba [2·H_v][hidden] in the row type (per key head: b of its value heads, then a), or 0n: the raw inputs are the row's columns of qkvz. */
  readonly baWeight: DevicePtr;
  /** Elements of an input row (with baWeight). */
  readonly hidden: number;
}


/** A real batch position of a decode or verify step. */
export interface StepPosition {
  readonly p: number;
  readonly slot: number;
  /** Position of the step's (first) row (the committed length, pending rows included). */
  readonly P0: number;
  readonly row0: number;
  /** Pending carried rows (positions P0 − n .. P0 − 1). */
  readonly n: number;
}

/** The real batch positions of a decode or verify step, with their pending rows (carried mode when `pending` ≠ 0). */
export function stepPositions(name: string, a: Pick<DecodeArgs, 'slots' | 'seqLens' | 'rowStarts' | 'pending' | 'batch' | 'maxK'>, mem: DeviceMemoryView): StepPosition[] {
  const slots = mem.i32(a.slots, a.batch);
  const seqLens = mem.i32(a.seqLens, a.batch);
  const rowStarts = mem.i32(a.rowStarts, a.batch);
  const out: StepPosition[] = [];
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

/**
 * With `baWeight`, the gates' raw inputs of an input row as in_proj_ba's GEMM gives them (that
 * GEMM is then not launched): [2·H_v] dot products of the row with the weight's rows, each summed
 * in f64 in element order and rounded to f32 (the CPU backend's GEMM into the f32 qkvz row).
 */
function gateInputsOf(name: string, a: DecodeArgs, mem: DeviceMemoryView): ((row: number) => Float32Array) | undefined {
  if (a.baWeight === 0n) return undefined;
  if (a.baInput === 0n) throw new InvalidArgumentError(`${name}: baWeight is set but baInput (the layer's input rows) is a null pointer`);
  if (!Number.isSafeInteger(a.hidden) || a.hidden < 1) throw new InvalidArgumentError(`${name}: hidden must be a positive integer with baWeight set, got ${a.hidden}`);
  const dtype = rowDtypeOf(a.yDtype);
  if (dtype === 'f32') throw new InvalidArgumentError(`${name}: the gates from the input rows take bf16 or f16 rows (yDtype 1 or 2), got f32`);
  const D = a.hidden;
  const n = 2 * a.hv;
  const w = readElements(mem, a.baWeight, n * D, dtype);
  return (row) => {
    const x = readElements(mem, elementAt(a.baInput, row * D, dtype), D, dtype);
    const out = new Float32Array(n);
    for (let j = 0; j < n; j++) {
      let sum = 0;
      for (let d = 0, o = j * D; d < D; d++) sum += x[d]! * w[o + d]!;
      out[j] = sum;
    }
    return out;
  };
}

/** `gdn.decode-prep`: the prep record of every (batch position, value head), and the conv ring committed. */
export function decodePrepCpu(a: DecodeArgs, ctx: CpuKernelContext): void {
  if (a.baWeight !== 0n) throw new InvalidArgumentError('gdn.decode-prep: baWeight is set; a prep that makes the gates from the input rows runs gdn.decode-prep-gates');
  runDecodePrep('gdn.decode-prep', a, ctx);
}

/** `gdn.decode-prep-gates`: the same records, the gates' raw inputs made from the input rows and in_proj_ba. */
export function decodePrepGatesCpu(a: DecodeArgs, ctx: CpuKernelContext): void {
  if (a.baWeight === 0n) throw new InvalidArgumentError('gdn.decode-prep-gates: baWeight is a null pointer; without in_proj_ba run gdn.decode-prep');
  runDecodePrep('gdn.decode-prep-gates', a, ctx);
}

function runDecodePrep(name: string, a: DecodeArgs, { mem }: CpuKernelContext): void {
  if (a.batch === 0) return;
  const prep = prepView(name, a, mem);
  const pos = stepPositions(name, a, mem);
  const gateInputs = gateInputsOf(name, a, mem);
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
    // The ring takes the pending rows' inputs first (as gdn.recurrent's reference folds them), then
    // the conv of position P0 reads them there; the ring takes the row's own inputs last.
    cpu.writePendingRing(slot, P0, n);
    const row = cpu.qkvzRows(row0, 1);
    cpu.preConv(row, 0, pre);
    cpu.convRow(convW, cpu.ring(slot), pre, P0, P0, mixed);
    cpu.normalizeQK(mixed, qn, kn);
    const ba = gateInputs ? gateInputs(row0) : cpu.baOf(row, 0);
    for (let h = 0; h < hv; h++) {
      const g = Math.floor(h / r);
      const rec = prep.subarray((p * hv + h) * stride, (p * hv + h + 1) * stride);
      rec.fill(0);
      let kq = 0;
      for (let i = 0; i < dk; i++) {
        rec[i] = kn[g * dk + i]!;
        rec[dkp + i] = qn[g * dk + i]!;
        kq += kn[g * dk + i]! * qn[g * dk + i]!;
      }
      for (let j = 0; j < dv; j++) rec[2 * dkp + j] = mixed[2 * keyDim + h * dv + j]!;
      const { beta, gate } = cpu.gates(ba, h, aLog, dtBias);
      const sc = 2 * dkp + dvp;
      rec[sc] = beta;
      rec[sc + 1] = Math.exp(gate);
      rec[sc + 2] = kq;
    }
    cpu.writeRing(slot, P0, (_, out) => out.set(pre), 1);
  }
}

/** `gdn.decode-state`: pending rows folded into the state, then the row from its prep record (state and y written). */
export function decodeStateCpu(a: DecodeArgs, ctx: CpuKernelContext): void {
  runDecodeState('gdn.decode-state', a, ctx);
}

/** `gdn.decode-state-plain`: the same for a step without a pending table (the kernel traps on one). */
export function decodeStatePlainCpu(a: DecodeArgs, ctx: CpuKernelContext): void {
  if (a.pending !== 0n) {
    throw new InvalidArgumentError('gdn.decode-state-plain: pending is set; a carried decode step (a pending table bound) runs gdn.decode-state');
  }
  runDecodeState('gdn.decode-state-plain', a, ctx);
}

function runDecodeState(name: string, a: DecodeArgs, { mem }: CpuKernelContext): void {
  if (a.batch === 0) return;
  const prep = prepView(name, a, mem);
  const pos = stepPositions(name, a, mem);
  const cpu = new GdnCpu(mem, a, a, a.eps, a.yDtype);
  const { hv, dk, dv } = cpu;
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
    const out = cpu.yRows(row0, 1);
    const y = out.values;
    for (let h = 0; h < hv; h++) {
      const rec = prep.subarray((p * hv + h) * stride, (p * hv + h + 1) * stride);
      const sc = 2 * dkp + dvp;
      S.set(state.subarray(h * dk * dv, (h + 1) * dk * dv));
      cpu.headStep(S, rec.subarray(0, dk), rec.subarray(dkp, dkp + dk), rec.subarray(2 * dkp, 2 * dkp + dv), rec[sc]!, rec[sc + 1]!, u, o);
      state.set(S, h * dk * dv);
      cpu.gatedNorm(o, row, cpu.zColumn(h), normW, y.subarray(h * dv, (h + 1) * dv));
    }
    out.store();
  }
}
