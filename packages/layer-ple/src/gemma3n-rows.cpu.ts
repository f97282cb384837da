import { elementAccess, elementReader, roundRows, rowDtypeOf, type CpuKernelContext } from '@metrale/core';

// CPU twins of kernels/gemma3n-rows.cu's kernels: the data movement and residual arithmetic of a
// Gemma 3n decoder layer (docs/models/gemma3n-text.md, step 5). f64 inside, one rounding per store.

export interface CopyArgs {
  readonly src: bigint;
  readonly srcStride: number;
  readonly dst: bigint;
  readonly dstStride: number;
  /** f32 [H] multiplied in, or 0n for none. */
  readonly scale: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly srcDtype: number;
  readonly dstDtype: number;
}

/** dst[r][0..H) = src[r][0..H) (· scale), rows at their strides, converted between row types. */
export function copyCpu(a: CopyArgs, { mem }: CpuKernelContext): void {
  const H = a.hidden;
  const s = elementAccess(mem, a.src, (a.rows - 1) * a.srcStride + H, rowDtypeOf(a.srcDtype));
  const d = elementAccess(mem, a.dst, (a.rows - 1) * a.dstStride + H, rowDtypeOf(a.dstDtype));
  const w = a.scale === 0n ? undefined : mem.f32(a.scale, H);
  for (let r = 0; r < a.rows; r++) {
    for (let i = 0; i < H; i++) d.set(r * a.dstStride + i, s.get(r * a.srcStride + i) * (w ? w[i]! : 1));
  }
}

export interface Sum3Args {
  readonly a: bigint;
  readonly b: bigint;
  /** 0n: a + b only. */
  readonly c: bigint;
  readonly out: bigint;
  readonly count: number;
  readonly scale: number;
  readonly dtype: number;
}

/** out = ((a + b) + c) · scale elementwise; out may alias an input (the attention residual with Laurel, and o2 = h + mlp). */
export function sum3Cpu(x: Sum3Args, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(x.dtype);
  const [a, b, o] = [elementAccess(mem, x.a, x.count, dtype), elementAccess(mem, x.b, x.count, dtype), elementAccess(mem, x.out, x.count, dtype)];
  const c = x.c === 0n ? undefined : elementAccess(mem, x.c, x.count, dtype);
  for (let i = 0; i < x.count; i++) o.set(i, (a.get(i) + b.get(i) + (c ? c.get(i) : 0)) * x.scale);
}

export interface PleAddArgs {
  /** [rows][n][H] in the row type. */
  readonly streams: bigint;
  /** [rows][H] in the row type: the PLE layer's output. */
  readonly y: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly n: number;
  readonly dtype: number;
}

/** streams_i += y for i = 1 … n − 1 (HF adds the per-layer input to corrected_predictions[1:], whatever the active index). */
export function pleAddCpu(a: PleAddArgs, { mem }: CpuKernelContext): void {
  const [H, n] = [a.hidden, a.n];
  const dtype = rowDtypeOf(a.dtype);
  const s = elementAccess(mem, a.streams, a.rows * n * H, dtype);
  const y = elementReader(mem, a.y, a.rows * H, dtype);
  for (let r = 0; r < a.rows; r++) {
    for (let j = 1; j < n; j++) for (let i = 0; i < H; i++) s.set((r * n + j) * H + i, s.get((r * n + j) * H + i) + y(r * H + i));
  }
}

export interface NormAddArgs {
  readonly x: bigint;
  readonly t: bigint;
  readonly weight: bigint;
  readonly out: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly eps: number;
  readonly dtype: number;
}

/** out = x + RMSNorm(t) · w (plain w; Laurel's residual: an + post_laurel_norm(right(left(an)))). */
export function normAddCpu(a: NormAddArgs, { mem }: CpuKernelContext): void {
  const H = a.hidden;
  const dtype = rowDtypeOf(a.dtype);
  const [x, t, o] = [elementAccess(mem, a.x, a.rows * H, dtype), elementAccess(mem, a.t, a.rows * H, dtype), elementAccess(mem, a.out, a.rows * H, dtype)];
  const w = mem.f32(a.weight, H);
  for (let r = 0; r < a.rows; r++) {
    let ss = 0;
    for (let i = 0; i < H; i++) ss += t.get(r * H + i) ** 2;
    const inv = 1 / Math.sqrt(ss / H + a.eps);
    const normed = Float64Array.from({ length: H }, (_, i) => t.get(r * H + i) * inv * w[i]!);
    for (let i = 0; i < H; i++) o.set(r * H + i, x.get(r * H + i) + roundRows(dtype, normed[i]!));
  }
}

