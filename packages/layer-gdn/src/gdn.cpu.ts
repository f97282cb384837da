import { InvalidArgumentError, type CpuKernelContext, type DeviceMemoryView, type DevicePtr } from '@metrale/core';
import { GdnCpu, type GdnShapeArgs, type GdnStepPointers } from './gdn-math.cpu.js';

// CPU reference of kernels/gdn-recurrent.cu, gdn-fold.cu and gdn-chunk.cu: the same functions,
// with the buffer layouts and modes of KERNELS.md, run for the whole launch at once.

/** Arguments of `gdn.recurrent` (decode and verify). */
export interface RecurrentArgs extends GdnStepPointers, GdnShapeArgs {
  /** 0: commit the k rows; 1: record them in the stash, leaving state and ring untouched. */
  readonly mode: number;
  readonly batch: number;
  readonly k: number;
  readonly eps: number;
  /** The element type y is stored in (FLOAT_DTYPE_CODE). */
  readonly yDtype: number;
}

/** Arguments of `gdn.chunk` (prefill of ragged rows). */
export interface ChunkArgs extends GdnStepPointers, GdnShapeArgs {
  readonly batch: number;
  readonly eps: number;
}

/** Arguments of `gdn.fold` (write-on-accept fold after acceptance). */
export interface FoldArgs extends GdnShapeArgs {
  readonly qkvz: DevicePtr;
  readonly slots: DevicePtr;
  readonly seqLens: DevicePtr;
  readonly naTab: DevicePtr;
  readonly state: DevicePtr;
  readonly convRing: DevicePtr;
  readonly stash: DevicePtr;
  readonly batch: number;
  readonly k: number;
}

function checkBatch(name: string, batch: number): void {
  if (!Number.isInteger(batch) || batch < 0) throw new InvalidArgumentError(`${name}: batch must be a non-negative integer, got ${batch}`);
}

/**
 * Carried mode: fold the slot's pending rows (those of its last verify that were accepted, at
 * positions L − n .. L − 1) into state (from the stash) and ring (from the conv stash, whose row
 * of position p is p mod 2·maxK).
 */
function foldPending(cpu: GdnCpu, mem: DeviceMemoryView, pending: DevicePtr, slot: number, L: number): void {
  if (pending === 0n) return;
  const n = mem.u32(pending + BigInt(4 * slot), 1)[0]!;
  if (n === 0) return;
  if (n > L) throw new InvalidArgumentError(`gdn kernels: slot ${slot} has ${n} pending rows but a committed length of ${L}`);
  cpu.foldStash(slot, n);
  cpu.writePendingRing(slot, L, n);
}

/** The rows of every real batch position: decode, verify or prefill, from the step's tables. */
function runStep(
  name: string, a: GdnStepPointers & GdnShapeArgs & { batch: number; eps: number; yDtype?: number }, mem: DeviceMemoryView,
  rowsOf: (p: number, rowStarts: Int32Array) => number, mode: { commit: boolean; record: boolean; recordConv: boolean },
): void {
  checkBatch(name, a.batch);
  if (a.batch === 0) return;
  const cpu = new GdnCpu(mem, a, a, a.eps, a.yDtype ?? 0);
  const slots = mem.i32(a.slots, a.batch);
  const seqLens = mem.i32(a.seqLens, a.batch);
  const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
  for (let p = 0; p < a.batch; p++) {
    const slot = slots[p]!;
    if (slot < 0) continue;
    const L = seqLens[p]!;
    foldPending(cpu, mem, a.pending, slot, L);
    cpu.runRows(slot, L, rowStarts[p]!, rowsOf(p, rowStarts), mode);
  }
}

/**
 * `gdn.recurrent`: k rows per batch position from rowStarts[p], at positions seqLens[p]... In
 * carried mode (`pending` ≠ 0) each slot's pending rows are folded first. Mode 0 commits the rows;
 * mode 1 records them in the stash (and, carried, their pre-conv inputs in the conv stash).
 */
export function recurrentCpu(a: RecurrentArgs, { mem }: CpuKernelContext): void {
  if (a.mode !== 0 && a.mode !== 1) throw new InvalidArgumentError(`gdn.recurrent: mode must be 0 (commit) or 1 (stash), got ${a.mode}`);
  if (!Number.isInteger(a.k) || a.k < 1) throw new InvalidArgumentError(`gdn.recurrent: k must be a positive integer, got ${a.k}`);
  if (a.mode === 1 && a.k > a.maxK) throw new InvalidArgumentError(`gdn.recurrent: a verify of k = ${a.k} rows does not fit the stash's maxK ${a.maxK}`);
  const carried = a.pending !== 0n;
  const mode = a.mode === 0 ? { commit: true, record: false, recordConv: false } : { commit: false, record: true, recordConv: carried };
  runStep('gdn.recurrent', a, mem, () => a.k, mode);
}

/** `gdn.chunk`: the ragged rows rowStarts[p]..rowStarts[p+1] of each sequence, committed (pending rows folded first); y in f32. */
export function chunkCpu(a: ChunkArgs, { mem }: CpuKernelContext): void {
  runStep('gdn.chunk', a, mem, (p, rowStarts) => rowStarts[p + 1]! - rowStarts[p]!, { commit: true, record: false, recordConv: false });
}

/**
 * `gdn.fold`: the first naTab[p] rows of the last verify into state (from the stash) and ring (the
 * pre-conv inputs of `qkvz` rows p·k + t, at positions seqLens[p] + t).
 */
export function foldCpu(a: FoldArgs, { mem }: CpuKernelContext): void {
  checkBatch('gdn.fold', a.batch);
  if (a.batch === 0) return;
  const cpu = new GdnCpu(mem, a, { ...a, y: 0n, convWeight: 0n, aLog: 0n, dtBias: 0n, normWeight: 0n, convStash: 0n }, 0);
  const slots = mem.i32(a.slots, a.batch);
  const seqLens = mem.i32(a.seqLens, a.batch);
  const naTab = mem.u32(a.naTab, a.batch);
  for (let p = 0; p < a.batch; p++) {
    const slot = slots[p]!;
    const n = naTab[p]!;
    if (slot < 0 || n === 0) continue;
    if (n > a.k) throw new InvalidArgumentError(`gdn.fold: batch position ${p} accepted ${n} rows of a verify of k = ${a.k}`);
    cpu.foldStash(slot, n);
    const rows = cpu.qkvzRows(p * a.k, n);
    cpu.writeRing(slot, seqLens[p]!, (t, out) => cpu.preConv(rows, t, out), n);
  }
}
