import type { CpuKernelContext, DeviceMemoryView } from '@metrale/core';

// CPU reference of kernels/ple-project.cu: the same functions, computed in f64 per row.

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

/** `count` elements of a storage dtype (0 f32, 1 bf16, 2 f16) starting at element `first`, as numbers. */
export function loadElems(mem: DeviceMemoryView, base: bigint, dtype: number, first: number, count: number): Float64Array {
  const out = new Float64Array(count);
  if (dtype === 0) {
    out.set(mem.f32(base + BigInt(first * 4), count));
    return out;
  }
  const bits = mem.u16(base + BigInt(first * 2), count);
  const box = new Float32Array(1);
  const u32 = new Uint32Array(box.buffer);
  for (let i = 0; i < count; i++) {
    const b = bits[i]!;
    if (dtype === 1) {
      u32[0] = b << 16;
      out[i] = box[0]!;
    } else {
      const sign = b & 0x8000 ? -1 : 1;
      const exp = (b >>> 10) & 0x1f;
      const frac = b & 0x3ff;
      out[i] = exp === 0 ? sign * frac * 2 ** -24 : exp === 0x1f ? (frac ? Number.NaN : sign * Infinity) : sign * (1 + frac / 1024) * 2 ** (exp - 15);
    }
  }
  return out;
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
}

export function embedGatherCpu(a: EmbedGatherArgs, { mem }: CpuKernelContext): void {
  const out = mem.f32(a.out, a.count * a.hidden);
  for (let local = 0; local < a.count; local++) {
    const row = a.firstRow + local;
    const token = mem.i32(a.tokens + BigInt(row * 4), 1)[0]!;
    const dst = out.subarray(local * a.hidden, (local + 1) * a.hidden);
    if (isPadding(mem, a.slots, a.rowStarts, a.batch, row) || token < 0 || token >= a.vocab) {
      dst.fill(0);
      continue;
    }
    const e = loadElems(mem, a.embed, a.embedDtype, token * a.hidden, a.hidden);
    for (let i = 0; i < a.hidden; i++) dst[i] = e[i]! * a.scale;
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
}

export function combineCpu(a: CombineArgs, { mem }: CpuKernelContext): void {
  const P = a.perLayer;
  const out = mem.f32(a.ple, a.count * P);
  const q = mem.f32(a.q, a.count * P);
  const w = mem.f32(a.normWeight, P);
  for (let local = 0; local < a.count; local++) {
    const row = a.firstRow + local;
    const dst = out.subarray(local * P, (local + 1) * P);
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
      dst.fill(0);
      continue;
    }
    let ss = 0;
    for (let i = 0; i < P; i++) {
      const v = q[local * P + i]! * a.projScale;
      ss += v * v;
    }
    const inv = 1 / Math.sqrt(ss / P + a.eps);
    const t = loadElems(mem, a.slotRows, a.tableDtype, slot * a.rowElems + a.layerOffset, P);
    for (let i = 0; i < P; i++) {
      dst[i] = (q[local * P + i]! * a.projScale * inv * w[i]! + t[i]! * a.tableScale) * a.inputScale;
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
