import type { CpuKernelContext } from '@metrale/core';

// CPU reference of kernels/std-rows.cu: row-wise kernels, each row computed in f64 and stored as
// f32. Layouts: KERNELS.md.

export interface EmbedArgs {
  readonly tokens: bigint;
  readonly table: bigint;
  readonly out: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly vocab: number;
  readonly scale: number;
}

/** out[r] = scale · table[tokens[r]]; a token outside the table gives a zero row (a GPU cannot throw). */
export function embedCpu(a: EmbedArgs, { mem }: CpuKernelContext): void {
  const tokens = mem.i32(a.tokens, a.rows);
  const table = mem.f32(a.table, a.vocab * a.hidden);
  const out = mem.f32(a.out, a.rows * a.hidden);
  for (let r = 0; r < a.rows; r++) {
    const t = tokens[r]!;
    const o = r * a.hidden;
    if (t < 0 || t >= a.vocab) {
      out.fill(0, o, o + a.hidden);
      continue;
    }
    for (let i = 0; i < a.hidden; i++) out[o + i] = a.scale * table[t * a.hidden + i]!;
  }
}

export interface RmsNormArgs {
  readonly input: bigint;
  readonly output: bigint;
  readonly weight: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly eps: number;
  /** 0: y = w · x̂ (Llama, GLM); 1: y = (1 + w) · x̂ (Qwen3-Next, Gemma). */
  readonly offset: number;
}

/** One row of RMSNorm: `x / sqrt(mean(x²) + eps) · (offset + w)`; shared with the attention's q/k norms. */
export function rmsNormRow(x: ArrayLike<number>, xOff: number, w: ArrayLike<number>, out: { [i: number]: number }, oOff: number, n: number, eps: number, offset: number): void {
  let ss = 0;
  for (let i = 0; i < n; i++) ss += x[xOff + i]! * x[xOff + i]!;
  const inv = 1 / Math.sqrt(ss / n + eps);
  for (let i = 0; i < n; i++) out[oOff + i] = x[xOff + i]! * inv * (offset + w[i]!);
}

export function rmsNormCpu(a: RmsNormArgs, { mem }: CpuKernelContext): void {
  const x = mem.f32(a.input, a.rows * a.hidden);
  const y = mem.f32(a.output, a.rows * a.hidden);
  const w = mem.f32(a.weight, a.hidden);
  for (let r = 0; r < a.rows; r++) rmsNormRow(x, r * a.hidden, w, y, r * a.hidden, a.hidden, a.eps, a.offset);
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
}

/** y = (x − mean) / sqrt(var + eps) · w + b, biased variance (torch.nn.LayerNorm). */
export function layerNormCpu(a: LayerNormArgs, { mem }: CpuKernelContext): void {
  const n = a.hidden;
  const x = mem.f32(a.input, a.rows * n);
  const y = mem.f32(a.output, a.rows * n);
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
}

export interface AddArgs {
  readonly a: bigint;
  readonly b: bigint;
  readonly out: bigint;
  readonly count: number;
}

/** out = a + b elementwise (out may alias a or b). */
export function addCpu(a: AddArgs, { mem }: CpuKernelContext): void {
  const x = mem.f32(a.a, a.count);
  const y = mem.f32(a.b, a.count);
  const o = mem.f32(a.out, a.count);
  for (let i = 0; i < a.count; i++) o[i] = x[i]! + y[i]!;
}

export interface SiluMulArgs {
  readonly gateUp: bigint;
  readonly out: bigint;
  readonly rows: number;
  readonly inter: number;
}

export function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/** out[r][i] = silu(gateUp[r][i]) · gateUp[r][inter + i]: rows of [gate | up] from one GEMM. */
export function siluMulCpu(a: SiluMulArgs, { mem }: CpuKernelContext): void {
  const gu = mem.f32(a.gateUp, a.rows * 2 * a.inter);
  const out = mem.f32(a.out, a.rows * a.inter);
  for (let r = 0; r < a.rows; r++) {
    const g = r * 2 * a.inter;
    for (let i = 0; i < a.inter; i++) out[r * a.inter + i] = silu(gu[g + i]!) * gu[g + a.inter + i]!;
  }
}
