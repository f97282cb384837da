import { elementReader, elementWriter, readElements, roundRows, rowDtypeOf, type CpuKernelContext, type FloatDtype } from '@metrale/core';

// CPU reference of kernels/std-rows.cu: row-wise kernels over rows of the row type `dtype` (a code:
// 0 f32, 1 bf16, 2 f16), each row computed in f64 and rounded once where the kernel stores. Layouts:
// KERNELS.md.

export interface EmbedArgs {
  readonly tokens: bigint;
  readonly table: bigint;
  readonly out: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly vocab: number;
  readonly scale: number;
  readonly dtype: number;
}

/** out[r] = scale · table[tokens[r]]; a token outside the table gives a zero row (a GPU cannot throw). */
export function embedCpu(a: EmbedArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const tokens = mem.i32(a.tokens, a.rows);
  const table = elementReader(mem, a.table, a.vocab * a.hidden, dtype);
  const out = elementWriter(mem, a.out, a.rows * a.hidden, dtype);
  for (let r = 0; r < a.rows; r++) {
    const t = tokens[r]!;
    const o = r * a.hidden;
    const valid = t >= 0 && t < a.vocab;
    for (let i = 0; i < a.hidden; i++) out(o + i, valid ? a.scale * table(t * a.hidden + i) : 0);
  }
}

export interface RmsNormArgs {
  readonly input: bigint;
  readonly output: bigint;
  readonly weight: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly eps: number;
  /** 0: y = w · x̂ (Llama, GLM, Gemma 3n); 1: y = (1 + w) · x̂ (Qwen3-Next, Gemma). */
  readonly offset: number;
  /** 1: x̂ rounded to the row type before the weight (Llama, GLM: `w · x̂.to(dtype)`); 0: rounded once at the end. */
  readonly roundNormalized: number;
  readonly dtype: number;
}

/**
 * One row of RMSNorm: `x̂ · (offset + w)`, x̂ = x / sqrt(mean(x²) + eps), into `out` (f64; the caller
 * stores it). Rounded as Hugging Face rounds in the row type (rms_out in kernels/std-common.cuh):
 * `roundNormalized` rounds x̂ to the row type before the weight. Shared with the attention's q/k norms.
 */
export function rmsNormRow(
  x: ArrayLike<number>, xOff: number, w: ArrayLike<number>, out: { [i: number]: number }, oOff: number, n: number, eps: number, offset: number,
  roundNormalized: number, dtype: FloatDtype = 'f32',
): void {
  let ss = 0;
  for (let i = 0; i < n; i++) ss += x[xOff + i]! * x[xOff + i]!;
  const inv = 1 / Math.sqrt(ss / n + eps);
  for (let i = 0; i < n; i++) {
    const xh = x[xOff + i]! * inv;
    out[oOff + i] = (roundNormalized ? roundRows(dtype, xh) : xh) * (offset + w[i]!);
  }
}

export function rmsNormCpu(a: RmsNormArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const n = a.rows * a.hidden;
  // A decoded copy for bf16 / f16 (the kernel may run in place); the f32 view reads each row before writing it.
  const x = readElements(mem, a.input, n, dtype);
  const w = mem.f32(a.weight, a.hidden);
  if (dtype === 'f32') {
    const y = mem.f32(a.output, n);
    for (let r = 0; r < a.rows; r++) rmsNormRow(x, r * a.hidden, w, y, r * a.hidden, a.hidden, a.eps, a.offset, a.roundNormalized);
    return;
  }
  const y = new Float64Array(n);
  for (let r = 0; r < a.rows; r++) rmsNormRow(x, r * a.hidden, w, y, r * a.hidden, a.hidden, a.eps, a.offset, a.roundNormalized, dtype);
  const store = elementWriter(mem, a.output, n, dtype);
  for (let i = 0; i < n; i++) store(i, y[i]!);
}

export interface AddRmsNormArgs extends Omit<RmsNormArgs, 'input'> {
  readonly a: bigint;
  readonly b: bigint;
  readonly sum: bigint;
}

/** `std.add` into `sum`, then `std.rms_norm` of `sum` into `output`: what the fused kernel must equal bit for bit. */
export function addRmsNormCpu(a: AddRmsNormArgs, ctx: CpuKernelContext): void {
  addCpu({ a: a.a, b: a.b, out: a.sum, count: a.rows * a.hidden, dtype: a.dtype }, ctx);
  rmsNormCpu({ ...a, input: a.sum }, ctx);
}

export interface LayerNormArgs {
  readonly input: bigint;
  readonly output: bigint;
  readonly weight: bigint;
  /** 0n: no bias. */
  readonly bias: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly eps: number;
  readonly dtype: number;
}

/** y = (x − mean) / sqrt(var + eps) · w + b, biased variance (torch.nn.LayerNorm), rounded once to the row type. */
export function layerNormCpu(a: LayerNormArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const n = a.hidden;
  const x = readElements(mem, a.input, a.rows * n, dtype);
  const y = dtype === 'f32' ? mem.f32(a.output, a.rows * n) : new Float64Array(a.rows * n);
  const w = mem.f32(a.weight, n);
  const b = a.bias === 0n ? undefined : mem.f32(a.bias, n);
  for (let r = 0; r < a.rows; r++) {
    const o = r * n;
    let mean = 0;
    for (let i = 0; i < n; i++) mean += x[o + i]!;
    mean /= n;
    let v = 0;
    for (let i = 0; i < n; i++) v += (x[o + i]! - mean) ** 2;
    const inv = 1 / Math.sqrt(v / n + a.eps);
    for (let i = 0; i < n; i++) y[o + i] = (x[o + i]! - mean) * inv * w[i]! + (b ? b[i]! : 0);
  }
  if (dtype === 'f32') return;
  const store = elementWriter(mem, a.output, a.rows * n, dtype);
  for (let i = 0; i < a.rows * n; i++) store(i, y[i]!);
}

export interface AddArgs {
  readonly a: bigint;
  readonly b: bigint;
  readonly out: bigint;
  readonly count: number;
  readonly dtype: number;
}

/** out = a + b elementwise (out may alias a or b): the sum of the two stored values, rounded once. */
export function addCpu(a: AddArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const x = elementReader(mem, a.a, a.count, dtype);
  const y = elementReader(mem, a.b, a.count, dtype);
  const o = elementWriter(mem, a.out, a.count, dtype);
  for (let i = 0; i < a.count; i++) o(i, x(i) + y(i));
}

export interface SiluMulArgs {
  readonly gateUp: bigint;
  readonly out: bigint;
  readonly rows: number;
  readonly inter: number;
  readonly dtype: number;
}

export function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/** out[r][i] = silu(gateUp[r][i]) · gateUp[r][inter + i]: rows of [gate | up] from one GEMM (or two into one buffer). */
export function siluMulCpu(a: SiluMulArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const gu = elementReader(mem, a.gateUp, a.rows * 2 * a.inter, dtype);
  const out = elementWriter(mem, a.out, a.rows * a.inter, dtype);
  for (let r = 0; r < a.rows; r++) {
    const g = r * 2 * a.inter;
    for (let i = 0; i < a.inter; i++) out(r * a.inter + i, silu(gu(g + i)) * gu(g + a.inter + i));
  }
}

export interface GeluMulArgs extends SiluMulArgs {
  /** Φ⁻¹(sparsity) as f32 (Gemma 3n's `std_multiplier`), rounded to the row type by the kernel; read when `sparse` is 1. */
  readonly cutoff: number;
  readonly sparse: number;
}

/** GELU with the tanh approximation (`gelu_pytorch_tanh`). */
export function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
}

/**
 * out[r][i] = gelu_tanh(g'_i) · up_i over rows of [gate | up]; with `sparse`, g' = relu(g − (mean(g) +
 * std(g) · cutoff)) (population std over the row, Gemma 3n's `_gaussian_topk`), rounded to the row
 * type before the activation, else g' = g. In bf16 / f16 each step is rounded to the row type as
 * Hugging Face holds it: the multiplier (`.type(inputs.dtype)`), the mean, the std (its own mean
 * unrounded), their product and the cut-off.
 */
export function geluMulCpu(a: GeluMulArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const I = a.inter;
  const gu = readElements(mem, a.gateUp, a.rows * 2 * I, dtype);
  const out = elementWriter(mem, a.out, a.rows * I, dtype);
  for (let r = 0; r < a.rows; r++) {
    const g = r * 2 * I;
    let shift = 0;
    if (a.sparse) {
      let mean = 0;
      for (let i = 0; i < I; i++) mean += gu[g + i]!;
      mean /= I;
      let v = 0;
      for (let i = 0; i < I; i++) v += (gu[g + i]! - mean) ** 2;
      const sd = Math.sqrt(v / I);
      shift = dtype === 'f32' ? mean + sd * a.cutoff : roundRows(dtype, roundRows(dtype, mean) + roundRows(dtype, roundRows(dtype, sd) * roundRows(dtype, a.cutoff)));
    }
    for (let i = 0; i < I; i++) {
      const x = a.sparse ? roundRows(dtype, Math.max(gu[g + i]! - shift, 0)) : gu[g + i]!;
      out(r * I + i, geluTanh(x) * gu[g + I + i]!);
    }
  }
}

export interface SoftcapArgs {
  readonly x: bigint;
  readonly count: number;
  readonly cap: number;
}

/** x = cap · tanh(x / cap) over f32 values, in place (final logit soft-capping). */
export function softcapCpu(a: SoftcapArgs, { mem }: CpuKernelContext): void {
  const x = mem.f32(a.x, a.count);
  for (let i = 0; i < a.count; i++) x[i] = a.cap * Math.tanh(x[i]! / a.cap);
}
