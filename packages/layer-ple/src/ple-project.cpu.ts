import { elementAt, elementReader, elementWriter, readElements, roundRows, rowDtypeOf, type CpuKernelContext, type DeviceMemoryView } from '@metrale/core';

// CPU reference of kernels/ple-project.cu: the same functions, computed in f64 per row, rows of the
// row type `dtype` rounded where the kernel rounds them (roundRows: not at all in f32).

/** Batch position of a row: the last p with rowStarts[p] <= row. */
export function positionOfRow(rowStarts: Int32Array, batch: number, row: number): number {
  let lo = 0;
  let hi = batch - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (rowStarts[mid]! <= row) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** True for a row of a padding position (slot −1) or past the step's rows. */
export function isPadding(mem: DeviceMemoryView, slots: bigint, rowStarts: bigint, batch: number, row: number): boolean {
  const starts = mem.i32(rowStarts, batch + 1);
  if (row >= starts[batch]!) return true;
  return mem.i32(slots, batch)[positionOfRow(starts, batch, row)]! < 0;
}

/** `count` elements of a storage dtype (0 f32, 1 bf16, 2 f16) starting at element `first`, as values. */
export function loadElems(mem: DeviceMemoryView, base: bigint, code: number, first: number, count: number): Float32Array {
  const dtype = rowDtypeOf(code);
  return readElements(mem, elementAt(base, first, dtype), count, dtype);
}

export interface EmbedGatherArgs {
  readonly out: bigint;
  readonly embed: bigint;
  readonly embedDtype: number;
  readonly tokens: bigint;
  readonly slots: bigint;
  readonly rowStarts: bigint;
  readonly batch: number;
  readonly firstRow: number;
  readonly count: number;
  readonly hidden: number;
  readonly vocab: number;
  readonly scale: number;
  /** The row type of `out`. */
  readonly dtype: number;
}

export function embedGatherCpu(a: EmbedGatherArgs, { mem }: CpuKernelContext): void {
  const D = a.hidden;
  const dtype = rowDtypeOf(a.dtype);
  const out = elementWriter(mem, a.out, a.count * D, dtype);
  for (let local = 0; local < a.count; local++) {
    const row = a.firstRow + local;
    const token = mem.i32(a.tokens + BigInt(row * 4), 1)[0]!;
    if (isPadding(mem, a.slots, a.rowStarts, a.batch, row) || token < 0 || token >= a.vocab) {
      for (let i = 0; i < D; i++) out(local * D + i, 0);
      continue;
    }
    const e = loadElems(mem, a.embed, a.embedDtype, token * D, D);
    for (let i = 0; i < D; i++) out(local * D + i, roundRows(dtype, e[i]!) * a.scale);
  }
}

export interface CombineArgs {
  readonly ple: bigint;
  readonly q: bigint;
  readonly normWeight: bigint;
  readonly slotRows: bigint;
  readonly tableDtype: number;
  readonly rowSlots: bigint;
  readonly map: bigint;
  readonly tokens: bigint;
  readonly slots: bigint;
  readonly rowStarts: bigint;
  readonly batch: number;
  readonly firstRow: number;
  readonly count: number;
  readonly perLayer: number;
  readonly rowElems: number;
  readonly layerOffset: number;
  readonly tableVocab: number;
  readonly projScale: number;
  readonly tableScale: number;
  readonly inputScale: number;
  readonly eps: number;
  /** The row type of `ple` and `q`. */
  readonly dtype: number;
}

export function combineCpu(a: CombineArgs, { mem }: CpuKernelContext): void {
  const P = a.perLayer;
  const dtype = rowDtypeOf(a.dtype);
  const r = (x: number): number => roundRows(dtype, x);
  const out = elementWriter(mem, a.ple, a.count * P, dtype);
  const q = elementReader(mem, a.q, a.count * P, dtype);
  const w = mem.f32(a.normWeight, P);
  for (let local = 0; local < a.count; local++) {
    const row = a.firstRow + local;
    const at = local * P;
    let slot = -1;
    if (!isPadding(mem, a.slots, a.rowStarts, a.batch, row)) {
      if (a.rowSlots !== 0n) {
        slot = mem.i32(a.rowSlots + BigInt(local * 4), 1)[0]!;
      } else {
        const token = mem.i32(a.tokens + BigInt(row * 4), 1)[0]!;
        slot = mem.i32(a.map + BigInt((token >= 0 && token < a.tableVocab ? token : 0) * 4), 1)[0]!;
      }
    }
    if (slot < 0) {
      for (let i = 0; i < P; i++) out(at + i, 0);
      continue;
    }
    // q · projScale, held in the row type (HF: `per_layer_projection *= per_layer_projection_scale`).
    const scaled = Float64Array.from({ length: P }, (_, i) => r(q(at + i) * a.projScale));
    let ss = 0;
    for (const v of scaled) ss += v * v;
    const inv = 1 / Math.sqrt(ss / P + a.eps);
    const t = loadElems(mem, a.slotRows, a.tableDtype, slot * a.rowElems + a.layerOffset, P);
    for (let i = 0; i < P; i++) {
      // The norm's output, the scaled table row and their sum are each held in the row type.
      out(at + i, r(r(scaled[i]! * inv * w[i]!) + r(r(t[i]!) * a.tableScale)) * a.inputScale);
    }
  }
}

export interface MapSetArgs {
  readonly map: bigint;
  readonly n: number;
  readonly t0: number;
  readonly s0: number;
  readonly t1: number;
  readonly s1: number;
  readonly t2: number;
  readonly s2: number;
  readonly t3: number;
  readonly s3: number;
}

export function mapSetCpu(a: MapSetArgs, { mem }: CpuKernelContext): void {
  const pairs = [[a.t0, a.s0], [a.t1, a.s1], [a.t2, a.s2], [a.t3, a.s3]] as const;
  for (let i = 0; i < a.n && i < 4; i++) mem.i32(a.map + BigInt(pairs[i]![0] * 4), 1)[0] = pairs[i]![1];
}
