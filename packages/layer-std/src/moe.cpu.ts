import type { CpuKernelContext } from '@metrale/core';
import { silu } from './rows.cpu.js';

// CPU reference of kernels/std-moe.cu (KERNELS.md): routing, the routed experts (gate and up, then
// down and the weighted sum) and the combine with the shared expert, computed in f64 per row.

export interface RouteArgs {
  readonly logits: bigint;
  /** f32 [experts] `e_score_correction_bias`, or 0n. */
  readonly bias: bigint;
  readonly ids: bigint;
  readonly weights: bigint;
  readonly rows: number;
  readonly experts: number;
  readonly topK: number;
  /** 0: softmax scoring; 1: sigmoid scoring. */
  readonly scoring: number;
  readonly normTopK: number;
  readonly nGroup: number;
  readonly topkGroup: number;
  readonly scaling: number;
}

/** A non-finite score (padding rows hold garbage) sorts last, so every row gets valid ids. */
const finite = (v: number): number => (Number.isFinite(v) ? v : -Infinity);

/** Indices of the `k` largest values, largest first; ties go to the lower index. */
export function topIndices(values: ArrayLike<number>, k: number, keep?: (i: number) => boolean): number[] {
  const idx: number[] = [];
  for (let i = 0; i < values.length; i++) if (!keep || keep(i)) idx.push(i);
  idx.sort((a, b) => finite(values[b]!) - finite(values[a]!) || a - b);
  return idx.slice(0, k);
}

/** One row's routing: expert ids and weights (Qwen3-Next or GLM-5/DeepSeek-V3 rules, moe-config.ts). */
export function routeRow(logits: ArrayLike<number>, bias: ArrayLike<number> | undefined, a: Omit<RouteArgs, 'logits' | 'bias' | 'ids' | 'weights' | 'rows'>): { ids: number[]; weights: number[] } {
  const E = a.experts;
  const score = new Float64Array(E);
  if (a.scoring === 0) {
    let max = -Infinity;
    for (let e = 0; e < E; e++) max = Math.max(max, finite(logits[e]!));
    let sum = 0;
    for (let e = 0; e < E; e++) {
      score[e] = Number.isFinite(logits[e]!) ? Math.exp(logits[e]! - max) : 0;
      sum += score[e]!;
    }
    for (let e = 0; e < E; e++) score[e]! /= sum || 1;
  } else {
    for (let e = 0; e < E; e++) score[e] = 1 / (1 + Math.exp(-logits[e]!));
  }
  const choice = Float64Array.from(score, (s, e) => s + (bias ? bias[e]! : 0));
  let keep: ((e: number) => boolean) | undefined;
  if (a.nGroup > 1) {
    const size = E / a.nGroup;
    const groupScore = Array.from({ length: a.nGroup }, (_, g) => {
      const top = topIndices(choice.subarray(g * size, (g + 1) * size), Math.min(2, size));
      return top.reduce((s, i) => s + finite(choice[g * size + i]!), 0);
    });
    const kept = new Set(topIndices(groupScore, a.topkGroup));
    keep = (e) => kept.has(Math.floor(e / size));
  }
  const ids = topIndices(choice, a.topK, keep);
  const weights = ids.map((e) => score[e]!);
  if (a.normTopK) {
    const sum = weights.reduce((s, w) => s + w, 0) + (a.scoring === 1 ? 1e-20 : 0);
    for (let j = 0; j < weights.length; j++) weights[j]! /= sum;
  }
  return { ids, weights: weights.map((w) => w * a.scaling) };
}

export function routeCpu(a: RouteArgs, { mem }: CpuKernelContext): void {
  const logits = mem.f32(a.logits, a.rows * a.experts);
  const bias = a.bias === 0n ? undefined : mem.f32(a.bias, a.experts);
  const ids = mem.i32(a.ids, a.rows * a.topK);
  const weights = mem.f32(a.weights, a.rows * a.topK);
  for (let r = 0; r < a.rows; r++) {
    const row = routeRow(logits.subarray(r * a.experts, (r + 1) * a.experts), bias, a);
    ids.set(row.ids, r * a.topK);
    weights.set(row.weights, r * a.topK);
  }
}

/** What the expert kernels take: the rows' expert ids, the activations h between them, the shapes. */
interface ExpertPass {
  readonly ids: bigint;
  /** f32 [rows][topK][inter]: written by `std.moe_experts_up`, read by `std.moe_experts_down`. */
  readonly h: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly inter: number;
  readonly experts: number;
  readonly topK: number;
}

/** The ids and h views of an expert pass, with its shapes. */
function passViews(a: ExpertPass, mem: CpuKernelContext['mem']) {
  return { D: a.hidden, I: a.inter, topK: a.topK, ids: mem.i32(a.ids, a.rows * a.topK), h: mem.f32(a.h, a.rows * a.topK * a.inter) };
}

export interface GroupArgs {
  readonly ids: bigint;
  /** i32 [moeGroupsLength(rows, topK, experts)] (layout in KERNELS.md). */
  readonly groups: bigint;
  readonly rows: number;
  readonly experts: number;
  readonly topK: number;
}

/**
 * The step's entries rj = r·topK + j grouped by expert: header [experts chosen, ids outside
 * [0, experts), entries in range], the experts chosen ascending, the start of each one's entries
 * (and the end), then the entries by expert and rj, then the ids outside the experts by rj.
 */
export function groupCpu(a: GroupArgs, { mem }: CpuKernelContext): void {
  const E = a.experts;
  const n = a.rows * a.topK;
  const ids = mem.i32(a.ids, n);
  const g = mem.i32(a.groups, 4 + 2 * E + n);
  const lists: number[][] = Array.from({ length: E }, () => []);
  const outside: number[] = [];
  for (let rj = 0; rj < n; rj++) {
    const e = ids[rj]!;
    if (e >= 0 && e < E) lists[e]!.push(rj);
    else outside.push(rj);
  }
  let active = 0;
  let at = 0;
  const order = 4 + 2 * E;
  for (let e = 0; e < E; e++) {
    const list = lists[e]!;
    if (list.length === 0) continue;
    g[3 + active] = e;
    g[3 + E + active] = at;
    g.set(list, order + at);
    at += list.length;
    active++;
  }
  g[3 + E + active] = at;
  g.set(outside, order + at);
  g[0] = active;
  g[1] = outside.length;
  g[2] = at;
}

export interface ExpertsUpArgs extends ExpertPass {
  readonly input: bigint;
  /** The entries by expert (`std.moe_group`); the CUDA kernel reads them, the reference the ids. */
  readonly groups?: bigint;
  /** f32 [experts][2·inter][hidden]: gate rows, then up rows. */
  readonly gateUp: bigint;
}

/** h[r][j] = silu(gate_e · x) ⊙ (up_e · x), e = ids[r][j]; zeros for an id outside [0, experts). */
export function expertsUpCpu(a: ExpertsUpArgs, { mem }: CpuKernelContext): void {
  const { D, I, topK, ids, h } = passViews(a, mem);
  const x = mem.f32(a.input, a.rows * D);
  const gateUp = mem.f32(a.gateUp, a.experts * 2 * I * D);
  for (let r = 0; r < a.rows; r++) {
    for (let j = 0; j < topK; j++) {
      const e = ids[r * topK + j]!;
      const o = (r * topK + j) * I;
      if (e < 0 || e >= a.experts) {
        h.fill(0, o, o + I);
        continue;
      }
      const gu = e * 2 * I * D;
      for (let i = 0; i < I; i++) {
        let g = 0;
        let u = 0;
        for (let d = 0; d < D; d++) {
          const xv = x[r * D + d]!;
          g += gateUp[gu + i * D + d]! * xv;
          u += gateUp[gu + (I + i) * D + d]! * xv;
        }
        h[o + i] = silu(g) * u;
      }
    }
  }
}

export interface ExpertsDownArgs extends ExpertPass {
  /** The entries by expert (`std.moe_group`); the CUDA kernel reads them, the reference the ids. */
  readonly groups: bigint;
  /** f32 [experts][hidden][inter]. */
  readonly down: bigint;
  /** f32 [rows][topK][hidden]: each expert's output, before the routing weights. */
  readonly y: bigint;
}

/** y[r][j] = down_e · h[r][j], e = ids[r][j]; zeros for an id outside [0, experts). */
export function expertsDownCpu(a: ExpertsDownArgs, { mem }: CpuKernelContext): void {
  const { D, I, topK, ids, h } = passViews(a, mem);
  const down = mem.f32(a.down, a.experts * D * I);
  const y = mem.f32(a.y, a.rows * topK * D);
  for (let rj = 0; rj < a.rows * topK; rj++) {
    const e = ids[rj]!;
    const o = rj * D;
    if (e < 0 || e >= a.experts) {
      y.fill(0, o, o + D);
      continue;
    }
    const ho = rj * I;
    const dn = e * D * I;
    for (let d = 0; d < D; d++) {
      let s = 0;
      for (let i = 0; i < I; i++) s += down[dn + d * I + i]! * h[ho + i]!;
      y[o + d] = s;
    }
  }
}

export interface ExpertsSumArgs {
  /** f32 [rows][topK][hidden] (`std.moe_experts_down`). */
  readonly y: bigint;
  readonly ids: bigint;
  readonly weights: bigint;
  readonly output: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly experts: number;
  readonly topK: number;
}

/** output[r] = Σ_j weights[r][j] · y[r][j] in order j, ids outside [0, experts) skipped. */
export function expertsSumCpu(a: ExpertsSumArgs, { mem }: CpuKernelContext): void {
  const D = a.hidden;
  const topK = a.topK;
  const ids = mem.i32(a.ids, a.rows * topK);
  const w = mem.f32(a.weights, a.rows * topK);
  const y = mem.f32(a.y, a.rows * topK * D);
  const out = mem.f32(a.output, a.rows * D);
  for (let r = 0; r < a.rows; r++) {
    for (let d = 0; d < D; d++) {
      let acc = 0;
      for (let j = 0; j < topK; j++) {
        const e = ids[r * topK + j]!;
        if (e < 0 || e >= a.experts) continue;
        acc += w[r * topK + j]! * y[(r * topK + j) * D + d]!;
      }
      out[r * D + d] = acc;
    }
  }
}

export interface ExpertsRowwiseArgs extends ExpertPass {
  readonly weights: bigint;
  /** f32 [experts][hidden][inter]. */
  readonly down: bigint;
  readonly output: bigint;
}

/**
 * `std.moe_experts_rowwise`: output[r] = Σ_j weights[r][j] · f32(down_e · h[r][j]) (ids outside [0, experts)
 * skipped): the same numbers as expertsDownCpu then expertsSumCpu, so either path gives a row the same bits.
 */
export function expertsRowwiseCpu(a: ExpertsRowwiseArgs, { mem }: CpuKernelContext): void {
  const { D, I, topK, ids, h } = passViews(a, mem);
  const w = mem.f32(a.weights, a.rows * topK);
  const down = mem.f32(a.down, a.experts * D * I);
  const out = mem.f32(a.output, a.rows * D);
  const acc = new Float64Array(D);
  for (let r = 0; r < a.rows; r++) {
    acc.fill(0);
    for (let j = 0; j < topK; j++) {
      const e = ids[r * topK + j]!;
      if (e < 0 || e >= a.experts) continue;
      const wj = w[r * topK + j]!;
      const ho = (r * topK + j) * I;
      const dn = e * D * I;
      for (let d = 0; d < D; d++) {
        let s = 0;
        for (let i = 0; i < I; i++) s += down[dn + d * I + i]! * h[ho + i]!;
        acc[d]! += wj * Math.fround(s); // each expert's output rounded to f32, as std.moe_experts_down stores it
      }
    }
    for (let d = 0; d < D; d++) out[r * D + d] = acc[d]!;
  }
}

export interface CombineArgs {
  readonly routed: bigint;
  readonly shared: bigint;
  /** f32 [rows] logits of the shared expert's gate, or 0n for an ungated shared expert. */
  readonly gate: bigint;
  readonly output: bigint;
  readonly rows: number;
  readonly hidden: number;
}

/** output = routed + g · shared, g = sigmoid(gate logit) or 1. */
export function combineCpu(a: CombineArgs, { mem }: CpuKernelContext): void {
  const n = a.rows * a.hidden;
  const routed = mem.f32(a.routed, n);
  const shared = mem.f32(a.shared, n);
  const gate = a.gate === 0n ? undefined : mem.f32(a.gate, a.rows);
  const out = mem.f32(a.output, n);
  for (let r = 0; r < a.rows; r++) {
    const g = gate ? 1 / (1 + Math.exp(-gate[r]!)) : 1;
    for (let d = 0; d < a.hidden; d++) out[r * a.hidden + d] = routed[r * a.hidden + d]! + g * shared[r * a.hidden + d]!;
  }
}
