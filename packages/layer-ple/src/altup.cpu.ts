import { elementAccess, roundRows, rowDtypeOf, type CpuKernelContext } from '@metrale/core';

// CPU twins of kernels/altup.cu's kernels (Gemma3nTextAltUp; docs/models/gemma3n-text.md,
// steps 3, 5 and 7). Rows hold n streams of H values ([rows][n][H]) in the row type; router and
// coefficient weights are f32 (holding row-type values). f64 inside, rounded where the kernel stores
// and where Hugging Face holds a value in the row type (the router's input and output, the modalities).

interface Router {
  readonly routerNorm: bigint;
  /** [n][H]: `modality_router.weight`. */
  readonly router: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly n: number;
  readonly active: number;
  readonly eps: number;
  readonly dtype: number;
}

export interface PredictArgs extends Router {
  readonly streams: bigint;
  readonly pred: bigint;
  /** [n·n][n]: `prediction_coefs.weight`. */
  readonly coefs: bigint;
}

export interface CorrectArgs extends Router {
  /** [rows][n + 1][H]: the predictions, then the activated active stream (the layer's output). */
  readonly input: bigint;
  readonly corr: bigint;
  /** [n][n]: `correction_coefs.weight`. */
  readonly coefs: bigint;
}

/**
 * tanh(modality_router(router_norm(x) · router_input_scale)): the n modalities of one row's vector x.
 * In bf16 / f16 as Hugging Face holds each step in the row type: the norm's output (rounded once,
 * Gemma3nRMSNorm), router_input_scale (the row type's 1 / H), their product, and the router's output
 * before the tanh. In f32 (the reference path) the input is x̂ · w / H.
 */
function modalities(a: Router, x: (i: number) => number, mem: CpuKernelContext['mem']): Float64Array {
  const dtype = rowDtypeOf(a.dtype);
  const H = a.hidden;
  const w = mem.f32(a.routerNorm, H);
  const r = mem.f32(a.router, a.n * H);
  let ss = 0;
  for (let i = 0; i < H; i++) ss += x(i) * x(i);
  const inv = 1 / Math.sqrt(ss / H + a.eps);
  const scale = roundRows(dtype, Math.fround(1 / H));
  const input = (i: number): number => (dtype === 'f32' ? (x(i) * inv * w[i]!) / H : roundRows(dtype, roundRows(dtype, x(i) * inv * w[i]!) * scale));
  const m = new Float64Array(a.n);
  for (let j = 0; j < a.n; j++) {
    let s = 0;
    for (let i = 0; i < H; i++) s += input(i) * r[j * H + i]!;
    m[j] = roundRows(dtype, Math.tanh(roundRows(dtype, s)));
  }
  return m;
}

/** pred_j = s_j + Σ_i R_ji · s_i, R_ji = prediction_coefs(m)[j·n + i], m the modalities of the active stream. */
export function predictCpu(a: PredictArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const [H, n] = [a.hidden, a.n];
  const s = elementAccess(mem, a.streams, a.rows * n * H, dtype);
  const p = elementAccess(mem, a.pred, a.rows * n * H, dtype);
  const c = mem.f32(a.coefs, n * n * n);
  for (let r = 0; r < a.rows; r++) {
    const base = r * n * H;
    const m = modalities(a, (i) => s.get(base + a.active * H + i), mem);
    const R = new Float64Array(n * n);
    for (let o = 0; o < n * n; o++) {
      let v = 0;
      for (let l = 0; l < n; l++) v += c[o * n + l]! * m[l]!;
      R[o] = roundRows(dtype, v);
    }
    const out = new Float64Array(n * H);
    for (let j = 0; j < n; j++) {
      for (let h = 0; h < H; h++) {
        let v = s.get(base + j * H + h);
        for (let i = 0; i < n; i++) v += R[j * n + i]! * s.get(base + i * H + h);
        out[j * H + h] = v;
      }
    }
    for (let i = 0; i < n * H; i++) p.set(base + i, out[i]!);
  }
}

/** corr_j = pred_j + (correction_coefs(m')_j + 1) · (o − pred_k), m' the modalities of the activated row o. */
export function correctCpu(a: CorrectArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const [H, n] = [a.hidden, a.n];
  const x = elementAccess(mem, a.input, a.rows * (n + 1) * H, dtype);
  const out = elementAccess(mem, a.corr, a.rows * n * H, dtype);
  const c = mem.f32(a.coefs, n * n);
  for (let r = 0; r < a.rows; r++) {
    const base = r * (n + 1) * H;
    const act = base + n * H;
    const m = modalities(a, (i) => x.get(act + i), mem);
    const values = new Float64Array(n * H);
    for (let j = 0; j < n; j++) {
      let cj = 0;
      for (let l = 0; l < n; l++) cj += c[j * n + l]! * m[l]!;
      cj = roundRows(dtype, roundRows(dtype, cj) + 1);
      for (let h = 0; h < H; h++) {
        const innovation = roundRows(dtype, x.get(act + h) - x.get(base + a.active * H + h));
        values[j * H + h] = x.get(base + j * H + h) + cj * innovation;
      }
    }
    for (let i = 0; i < n * H; i++) out.set(r * n * H + i, values[i]!);
  }
}

export interface MagnitudeArgs {
  /** The rows whose RMS is the target, every `targetStride` elements. */
  readonly target: bigint;
  readonly targetStride: number;
  /** [rows][H] packed. */
  readonly y: bigint;
  readonly out: bigint;
  readonly outStride: number;
  readonly rows: number;
  readonly hidden: number;
  readonly dtype: number;
}

/** out = y · rms(target) / sqrt(max(mean(y²), 1e−5)), rms without ε (AltUp's stream init and unembedding). */
export function magnitudeCpu(a: MagnitudeArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const H = a.hidden;
  const t = elementAccess(mem, a.target, (a.rows - 1) * a.targetStride + H, dtype);
  const y = elementAccess(mem, a.y, a.rows * H, dtype);
  const o = elementAccess(mem, a.out, (a.rows - 1) * a.outStride + H, dtype);
  for (let r = 0; r < a.rows; r++) {
    let tt = 0;
    let yy = 0;
    for (let i = 0; i < H; i++) {
      tt += t.get(r * a.targetStride + i) ** 2;
      yy += y.get(r * H + i) ** 2;
    }
    const scale = roundRows(dtype, Math.sqrt(tt / H)) / roundRows(dtype, Math.sqrt(Math.max(roundRows(dtype, yy / H), 1e-5)));
    for (let i = 0; i < H; i++) o.set(r * a.outStride + i, y.get(r * H + i) * roundRows(dtype, scale));
  }
}

export interface StreamsMeanArgs {
  readonly streams: bigint;
  readonly out: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly n: number;
  readonly dtype: number;
}

/** out = mean over the n streams of each row. */
export function streamsMeanCpu(a: StreamsMeanArgs, { mem }: CpuKernelContext): void {
  const [H, n] = [a.hidden, a.n];
  const dtype = rowDtypeOf(a.dtype);
  const s = elementAccess(mem, a.streams, a.rows * n * H, dtype);
  const o = elementAccess(mem, a.out, a.rows * H, dtype);
  for (let r = 0; r < a.rows; r++) {
    for (let i = 0; i < H; i++) {
      let v = 0;
      for (let j = 0; j < n; j++) v += s.get((r * n + j) * H + i);
      o.set(r * H + i, v / n);
    }
  }
}
