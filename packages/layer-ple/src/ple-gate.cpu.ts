import type { CpuKernelContext } from '@metrale/core';
import { isPadding } from './ple-project.cpu.js';

// CPU reference of kernels/ple-gate.cu: the same functions, computed in f64 per row.

/** GELU with the tanh approximation, as torch.nn.functional.gelu(x, approximate="tanh"). */
export function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
}

export interface GateMulArgs {
  readonly h: bigint;
  readonly g: bigint;
  readonly ple: bigint;
  readonly slots: bigint;
  readonly rowStarts: bigint;
  readonly batch: number;
  readonly firstRow: number;
  readonly count: number;
  readonly perLayer: number;
}

export function gateMulCpu(a: GateMulArgs, { mem }: CpuKernelContext): void {
  const P = a.perLayer;
  const h = mem.f32(a.h, a.count * P);
  const g = mem.f32(a.g, a.count * P);
  const ple = mem.f32(a.ple, a.count * P);
  for (let local = 0; local < a.count; local++) {
    const skip = isPadding(mem, a.slots, a.rowStarts, a.batch, a.firstRow + local);
    for (let i = local * P; i < (local + 1) * P; i++) h[i] = skip ? 0 : geluTanh(g[i]!) * ple[i]!;
  }
}

export interface OutNormArgs {
  readonly y: bigint;
  readonly weight: bigint;
  readonly slots: bigint;
  readonly rowStarts: bigint;
  readonly batch: number;
  readonly firstRow: number;
  readonly count: number;
  readonly hidden: number;
  readonly eps: number;
}

export function outNormCpu(a: OutNormArgs, { mem }: CpuKernelContext): void {
  const D = a.hidden;
  const y = mem.f32(a.y, a.count * D);
  const w = mem.f32(a.weight, D);
  for (let local = 0; local < a.count; local++) {
    const row = y.subarray(local * D, (local + 1) * D);
    if (isPadding(mem, a.slots, a.rowStarts, a.batch, a.firstRow + local)) {
      row.fill(0);
      continue;
    }
    let ss = 0;
    for (let i = 0; i < D; i++) ss += row[i]! * row[i]!;
    const inv = 1 / Math.sqrt(ss / D + a.eps);
    for (let i = 0; i < D; i++) row[i] = row[i]! * inv * w[i]!;
  }
}
