import type { CpuKernelContext } from '@metrale/core';

// CPU reference of kernels/sliding-window.cu: the same function, computed in f64 per row.

export interface AppendArgs {
  readonly input: bigint;
  readonly cache: bigint;
  readonly slots: bigint;
  readonly rowStarts: bigint;
  readonly positions: bigint;
  readonly batch: number;
  readonly hidden: number;
  readonly capacity: number;
}

export interface AttendArgs extends Omit<AppendArgs, 'cache'> {
  readonly output: bigint;
  readonly cache: bigint;
  readonly gain: bigint;
  readonly window: number;
  readonly scale: number;
}

function positionOfRow(rowStarts: Int32Array, batch: number, row: number): number {
  let p = 0;
  while (p + 1 < batch && rowStarts[p + 1]! <= row) p++;
  return p;
}

export function appendCpu(a: AppendArgs, { mem }: CpuKernelContext): void {
  const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
  const rows = rowStarts[a.batch]!;
  const slots = mem.i32(a.slots, a.batch);
  const positions = mem.i32(a.positions, rows);
  const input = mem.f32(a.input, rows * a.hidden);
  for (let row = 0; row < rows; row++) {
    const slot = slots[positionOfRow(rowStarts, a.batch, row)]!;
    if (slot < 0) continue;
    const dst = mem.f32(a.cache + BigInt(((slot * a.capacity + positions[row]!) * a.hidden) * 4), a.hidden);
    dst.set(input.subarray(row * a.hidden, (row + 1) * a.hidden));
  }
}

export function attendCpu(a: AttendArgs, { mem }: CpuKernelContext): void {
  const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
  const rows = rowStarts[a.batch]!;
  const slots = mem.i32(a.slots, a.batch);
  const positions = mem.i32(a.positions, rows);
  const input = mem.f32(a.input, rows * a.hidden);
  const output = mem.f32(a.output, rows * a.hidden);
  const gain = mem.f32(a.gain, a.hidden);
  const scores = new Float64Array(a.window);
  for (let row = 0; row < rows; row++) {
    const slot = slots[positionOfRow(rowStarts, a.batch, row)]!;
    if (slot < 0) continue;
    const pos = positions[row]!;
    const first = Math.max(0, pos - a.window + 1);
    const count = pos - first + 1;
    const cache = mem.f32(a.cache + BigInt(slot * a.capacity * a.hidden * 4), (first + count) * a.hidden);
    const q = input.subarray(row * a.hidden, (row + 1) * a.hidden);
    let max = -Infinity;
    for (let j = 0; j < count; j++) {
      const k = (first + j) * a.hidden;
      let s = 0;
      for (let i = 0; i < a.hidden; i++) s += q[i]! * cache[k + i]!;
      scores[j] = s * a.scale;
      max = Math.max(max, scores[j]!);
    }
    let denom = 0;
    for (let j = 0; j < count; j++) {
      scores[j] = Math.exp(scores[j]! - max);
      denom += scores[j]!;
    }
    for (let i = 0; i < a.hidden; i++) {
      let acc = 0;
      for (let j = 0; j < count; j++) acc += scores[j]! * cache[(first + j) * a.hidden + i]!;
      output[row * a.hidden + i] = (gain[i]! * acc) / denom;
    }
  }
}
