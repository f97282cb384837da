import { elementAccess, elementReader, elementWriter, roundRows, rowDtypeOf, type CpuKernelContext } from '@metrale/core';
import { isPadding } from './ple-project.cpu.js';

// CPU reference of kernels/ple-gate.cu: the same functions, computed in f64 per row, rows of the
// row type `dtype` rounded where the kernel rounds them (roundRows: not at all in f32).

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
  /** The row type of `h`, `g` and `ple`. */
  readonly dtype: number;
}

export function gateMulCpu(a: GateMulArgs, { mem }: CpuKernelContext): void {
  const P = a.perLayer;
  const dtype = rowDtypeOf(a.dtype);
  const h = elementWriter(mem, a.h, a.count * P, dtype);
  const g = elementReader(mem, a.g, a.count * P, dtype);
  const ple = elementReader(mem, a.ple, a.count * P, dtype);
  for (let local = 0; local < a.count; local++) {
    const skip = isPadding(mem, a.slots, a.rowStarts, a.batch, a.firstRow + local);
    // The activation is held in the row type before the product (HF: act_fn, then torch.multiply).
    for (let i = local * P; i < (local + 1) * P; i++) h(i, skip ? 0 : roundRows(dtype, geluTanh(g(i))) * ple(i));
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
  /** The row type of `y`. */
  readonly dtype: number;
}

export function outNormCpu(a: OutNormArgs, { mem }: CpuKernelContext): void {
  const D = a.hidden;
  const y = elementAccess(mem, a.y, a.count * D, rowDtypeOf(a.dtype));
  const w = mem.f32(a.weight, D);
  for (let local = 0; local < a.count; local++) {
    const at = local * D;
    if (isPadding(mem, a.slots, a.rowStarts, a.batch, a.firstRow + local)) {
      for (let i = 0; i < D; i++) y.set(at + i, 0);
      continue;
    }
    let ss = 0;
    for (let i = 0; i < D; i++) {
      const v = y.get(at + i);
      ss += v * v;
    }
    const inv = 1 / Math.sqrt(ss / D + a.eps);
    for (let i = 0; i < D; i++) y.set(at + i, y.get(at + i) * inv * w[i]!);
  }
}
