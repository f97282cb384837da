import { bf16BitsToF32, elementReader, elementWriter, f16BitsToF32, readElements, roundTo, rowDtypeOf, type CpuKernelContext } from '@metrale/core';
import { weightDtypeOf, weightMatrix, type ScaleGrid } from './elements.cpu.js';
import { silu } from './rows.cpu.js';

// CPU reference of kernels/std-moe.cu (KERNELS.md): routing, the routed experts (gate and up, then
// down and the weighted sum) and the combine with the shared expert, computed in f64 per row. Rows,
// h, y and outputs are of the row type (`rowDtype` / `dtype` codes), rounded where the kernels store
// them; expert weights of the weight type (`wDtype`: f32, bf16, f16, or FP8 codes times their block
// scales).

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
  /** i32 per batch position: the step's slot table, −1 for padding; or 0n (no padding). */
  readonly padSlots: bigint;
  /** Rows of a batch position (decode 1, verify k): row r is position ⌊r / padK⌋'s. */
  readonly padK: number;
}

/**
 * Whether row `r` is a padded batch position's (slot −1 in `padSlots`): such a row is routed to no
 * expert (ids −1, weights 0), so the expert kernels skip it.
 */
export function paddedRows(a: { readonly padSlots: bigint; readonly padK: number; readonly rows: number }, mem: CpuKernelContext['mem']): (r: number) => boolean {
  if (a.padSlots === 0n || a.padK < 1) return () => false;
  const slots = mem.i32(a.padSlots, Math.ceil(a.rows / a.padK));
  return (r) => slots[Math.floor(r / a.padK)]! < 0;
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
  const padded = paddedRows(a, mem);
  for (let r = 0; r < a.rows; r++) {
    if (padded(r)) {
      ids.fill(-1, r * a.topK, (r + 1) * a.topK);
      weights.fill(0, r * a.topK, (r + 1) * a.topK);
      continue;
    }
    const row = routeRow(logits.subarray(r * a.experts, (r + 1) * a.experts), bias, a);
    ids.set(row.ids, r * a.topK);
    weights.set(row.weights, r * a.topK);
  }
}

export interface RouterGemvArgs extends RouteArgs {
  /** [rows][hidden] of the row type `dtype`. */
  readonly x: bigint;
  /** The router weight [experts][hidden], of the row type. */
  readonly w: bigint;
  /** u32, zero before and after the launch (the CUDA kernel's count of finished CTAs). */
  readonly counter: bigint;
  readonly hidden: number;
  /** FLOAT_DTYPE_CODE of x and w. */
  readonly dtype: number;
  /**
   * The tail the layer's next kernels would be, made by the route's CTA: where `sharedId` ≥ 0,
   * the shared expert's slots into `slotIds` / `slotWeights` (`sharedSlotsCpu`, gate `sharedGate`
   * or 0n); where `groups` is not 0n, the groups buffer of the slots (or the route's ids) over
   * `groupExperts` experts (`groupCpu`).
   */
  readonly sharedGate: bigint;
  readonly slotIds: bigint;
  readonly slotWeights: bigint;
  readonly sharedId: number;
  readonly groups: bigint;
  readonly groupExperts: number;
}

/** Every 16-bit pattern's value, per type, built on first use (the weight is read through it, not decoded per launch). */
const valueTables = new Map<'bf16' | 'f16', Float32Array>();

function valueTable(dtype: 'bf16' | 'f16'): Float32Array {
  let t = valueTables.get(dtype);
  if (!t) {
    t = new Float32Array(65536);
    const decode = dtype === 'bf16' ? bf16BitsToF32 : f16BitsToF32;
    for (let b = 0; b < 65536; b++) t[b] = decode(b);
    valueTables.set(dtype, t);
  }
  return t;
}

/**
 * `std.moe_router_gemv`: logits[r][e] = Σ_d x[r][d] · w[e][d], summed in f64 in order d and rounded
 * once to f32, as the CPU backend's GEMM computes `runLinear`'s (so on that backend every route form
 * gives the same bits), then `routeCpu` over them. The counter stays zero.
 */
export function routerGemvCpu(a: RouterGemvArgs, ctx: CpuKernelContext): void {
  const { mem } = ctx;
  const dtype = rowDtypeOf(a.dtype);
  const D = a.hidden;
  const E = a.experts;
  const x = readElements(mem, a.x, a.rows * D, dtype);
  const logits = mem.f32(a.logits, a.rows * E);
  const f32 = dtype === 'f32' ? mem.f32(a.w, E * D) : undefined;
  const bits = dtype === 'f32' ? undefined : mem.u16(a.w, E * D);
  const table = dtype === 'f32' ? undefined : valueTable(dtype);
  for (let e = 0; e < E; e++) {
    const o = e * D;
    for (let r = 0; r < a.rows; r++) {
      let sum = 0;
      if (f32) for (let d = 0; d < D; d++) sum += x[r * D + d]! * f32[o + d]!;
      else for (let d = 0; d < D; d++) sum += x[r * D + d]! * table![bits![o + d]!]!;
      logits[r * E + e] = sum;
    }
  }
  routeCpu(a, ctx);
  const shared = a.sharedId >= 0;
  if (shared) {
    sharedSlotsCpu({
      x: a.x, gate: a.sharedGate, ids: a.ids, weights: a.weights, slotIds: a.slotIds, slotWeights: a.slotWeights, rows: a.rows, hidden: D, topK: a.topK, sharedId: a.sharedId, dtype: a.dtype,
      padSlots: a.padSlots, padK: a.padK,
    }, ctx);
  }
  if (a.groups !== 0n) groupCpu({ ids: shared ? a.slotIds : a.ids, groups: a.groups, rows: a.rows, experts: a.groupExperts, topK: a.topK + (shared ? 1 : 0) }, ctx);
}

/** What the expert kernels take: the rows' expert ids, the activations h between them, the shapes, the types. */
interface ExpertPass {
  readonly ids: bigint;
  /** [rows][topK][inter] of the row type: written by `std.moe_experts_up`, read by `std.moe_experts_down`. */
  readonly h: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly inter: number;
  readonly experts: number;
  readonly topK: number;
  /** WEIGHT_DTYPE_CODE of the expert weights. */
  readonly wDtype: number;
  /** FLOAT_DTYPE_CODE of x, h, y and the output. */
  readonly rowDtype: number;
}

/** The ids of an expert pass, with its shapes and types. */
function passOf(a: ExpertPass, mem: CpuKernelContext['mem']) {
  return { D: a.hidden, I: a.inter, topK: a.topK, ids: mem.i32(a.ids, a.rows * a.topK), rows: rowDtypeOf(a.rowDtype), weight: weightDtypeOf(a.wDtype) };
}

/** Expert e's weight matrix, decoded once per launch. */
function expertMatrices(mem: CpuKernelContext['mem'], data: bigint, scales: bigint, a: ExpertPass, grid: ScaleGrid): (e: number) => ArrayLike<number> {
  const weight = weightDtypeOf(a.wDtype);
  const done = new Map<number, ArrayLike<number>>();
  return (e) => {
    let m = done.get(e);
    if (!m) done.set(e, (m = weightMatrix(mem, data, scales, weight, e, grid)));
    return m;
  };
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
  /** [experts][2·inter][hidden]: gate rows, then up rows. */
  readonly gateUp: bigint;
  /** FP8: per expert the gate's [⌈I/128⌉][⌈D/128⌉] scale grid, then the up's; 0n for float weights. */
  readonly gateUpScales: bigint;
}

/** h[r][j] = silu(gate_e · x) ⊙ (up_e · x), e = ids[r][j]; zeros for an id outside [0, experts). */
export function expertsUpCpu(a: ExpertsUpArgs, { mem }: CpuKernelContext): void {
  const { D, I, topK, ids, rows } = passOf(a, mem);
  const x = readElements(mem, a.input, a.rows * D, rows);
  const h = elementWriter(mem, a.h, a.rows * topK * I, rows);
  const matrix = expertMatrices(mem, a.gateUp, a.gateUpScales, a, { parts: 2, partRows: I, cols: D });
  for (let r = 0; r < a.rows; r++) {
    for (let j = 0; j < topK; j++) {
      const e = ids[r * topK + j]!;
      const o = (r * topK + j) * I;
      if (e < 0 || e >= a.experts) {
        for (let i = 0; i < I; i++) h(o + i, 0);
        continue;
      }
      const gateUp = matrix(e);
      for (let i = 0; i < I; i++) {
        let g = 0;
        let u = 0;
        for (let d = 0; d < D; d++) {
          const xv = x[r * D + d]!;
          g += gateUp[i * D + d]! * xv;
          u += gateUp[(I + i) * D + d]! * xv;
        }
        h(o + i, silu(g) * u);
      }
    }
  }
}

export interface ExpertsDownArgs extends ExpertPass {
  /** The entries by expert (`std.moe_group`); the CUDA kernel reads them, the reference the ids. */
  readonly groups: bigint;
  /** [experts][hidden][inter]. */
  readonly down: bigint;
  /** FP8: per expert one [⌈D/128⌉][⌈I/128⌉] scale grid; 0n for float weights. */
  readonly downScales: bigint;
  /** [rows][topK][hidden] of the row type: each expert's output, before the routing weights. */
  readonly y: bigint;
}

/** One expert's output for one entry: down_e · h[rj] (f64). */
function downRow(down: ArrayLike<number>, h: ArrayLike<number>, ho: number, D: number, I: number, out: Float64Array): void {
  for (let d = 0; d < D; d++) {
    let s = 0;
    for (let i = 0; i < I; i++) s += down[d * I + i]! * h[ho + i]!;
    out[d] = s;
  }
}

/** y[r][j] = down_e · h[r][j], e = ids[r][j]; zeros for an id outside [0, experts). */
export function expertsDownCpu(a: ExpertsDownArgs, { mem }: CpuKernelContext): void {
  const { D, I, topK, ids, rows } = passOf(a, mem);
  const h = readElements(mem, a.h, a.rows * topK * I, rows);
  const y = elementWriter(mem, a.y, a.rows * topK * D, rows);
  const matrix = expertMatrices(mem, a.down, a.downScales, a, { parts: 1, partRows: D, cols: I });
  const out = new Float64Array(D);
  for (let rj = 0; rj < a.rows * topK; rj++) {
    const e = ids[rj]!;
    if (e < 0 || e >= a.experts) out.fill(0);
    else downRow(matrix(e), h, rj * I, D, I, out);
    for (let d = 0; d < D; d++) y(rj * D + d, out[d]!);
  }
}

export interface ExpertsSumArgs {
  /** [rows][topK][hidden] of the row type (`std.moe_experts_down`). */
  readonly y: bigint;
  readonly ids: bigint;
  readonly weights: bigint;
  readonly output: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly experts: number;
  readonly topK: number;
  readonly dtype: number;
}

/** output[r] = Σ_j weights[r][j] · y[r][j] in order j, ids outside [0, experts) skipped. */
export function expertsSumCpu(a: ExpertsSumArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const D = a.hidden;
  const topK = a.topK;
  const ids = mem.i32(a.ids, a.rows * topK);
  const w = mem.f32(a.weights, a.rows * topK);
  const y = elementReader(mem, a.y, a.rows * topK * D, dtype);
  const out = elementWriter(mem, a.output, a.rows * D, dtype);
  for (let r = 0; r < a.rows; r++) {
    for (let d = 0; d < D; d++) {
      let acc = 0;
      for (let j = 0; j < topK; j++) {
        const e = ids[r * topK + j]!;
        if (e < 0 || e >= a.experts) continue;
        acc += w[r * topK + j]! * y((r * topK + j) * D + d);
      }
      out(r * D + d, acc);
    }
  }
}

export interface ExpertsRowwiseArgs extends ExpertPass {
  readonly weights: bigint;
  /** [experts][hidden][inter]. */
  readonly down: bigint;
  /** FP8: per expert one [⌈D/128⌉][⌈I/128⌉] scale grid; 0n for float weights. */
  readonly downScales: bigint;
  readonly output: bigint;
}

/**
 * `std.moe_experts_rowwise`: output[r] = Σ_j weights[r][j] · R(down_e · h[r][j]) (ids outside [0, experts)
 * skipped), R the rounding to the row type: the same numbers as expertsDownCpu then expertsSumCpu,
 * so either path gives a row the same bits.
 */
export function expertsRowwiseCpu(a: ExpertsRowwiseArgs, { mem }: CpuKernelContext): void {
  const { D, I, topK, ids, rows } = passOf(a, mem);
  const w = mem.f32(a.weights, a.rows * topK);
  const h = readElements(mem, a.h, a.rows * topK * I, rows);
  const out = elementWriter(mem, a.output, a.rows * D, rows);
  const matrix = expertMatrices(mem, a.down, a.downScales, a, { parts: 1, partRows: D, cols: I });
  const acc = new Float64Array(D);
  const y = new Float64Array(D);
  for (let r = 0; r < a.rows; r++) {
    acc.fill(0);
    for (let j = 0; j < topK; j++) {
      const e = ids[r * topK + j]!;
      if (e < 0 || e >= a.experts) continue;
      const wj = w[r * topK + j]!;
      downRow(matrix(e), h, (r * topK + j) * I, D, I, y);
      // Each expert's output rounded to the row type, as std.moe_experts_down stores it.
      for (let d = 0; d < D; d++) acc[d]! += wj * roundTo(rows, y[d]!);
    }
    for (let d = 0; d < D; d++) out(r * D + d, acc[d]!);
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
  readonly dtype: number;
}

/** output = routed + g · shared, g = sigmoid(gate logit) or 1, rounded once to the row type. */
export function combineCpu(a: CombineArgs, { mem }: CpuKernelContext): void {
  const dtype = rowDtypeOf(a.dtype);
  const n = a.rows * a.hidden;
  const routed = elementReader(mem, a.routed, n, dtype);
  const shared = elementReader(mem, a.shared, n, dtype);
  const gate = a.gate === 0n ? undefined : mem.f32(a.gate, a.rows);
  const out = elementWriter(mem, a.output, n, dtype);
  for (let r = 0; r < a.rows; r++) {
    const g = gate ? 1 / (1 + Math.exp(-gate[r]!)) : 1;
    for (let d = 0; d < a.hidden; d++) out(r * a.hidden + d, routed(r * a.hidden + d) + g * shared(r * a.hidden + d));
  }
}

export interface SharedSlotsArgs {
  /** [rows][hidden] of the row type `dtype`. */
  readonly x: bigint;
  /** f32 [hidden] shared expert gate, or 0n (weight 1). */
  readonly gate: bigint;
  readonly ids: bigint;
  readonly weights: bigint;
  /** [rows][topK + 1]: the route's slots, then the shared expert's. */
  readonly slotIds: bigint;
  readonly slotWeights: bigint;
  readonly rows: number;
  readonly hidden: number;
  readonly topK: number;
  readonly sharedId: number;
  readonly dtype: number;
  /** As `RouteArgs`': a padded row's shared slot is −1 too (its weight made as any row's). */
  readonly padSlots: bigint;
  readonly padK: number;
}

/**
 * `std.moe_shared_slots`: each row's route slots, then the shared expert `sharedId` with weight
 * sigmoid(Σ_d x[r][d] · gate[d]) (f64 sum in order d, rounded to f32 as the kernel's sum is, the
 * sigmoid in f64) or 1.
 */
export function sharedSlotsCpu(a: SharedSlotsArgs, { mem }: CpuKernelContext): void {
  const K = a.topK;
  const S = K + 1;
  const ids = mem.i32(a.ids, a.rows * K);
  const weights = mem.f32(a.weights, a.rows * K);
  const slotIds = mem.i32(a.slotIds, a.rows * S);
  const slotWeights = mem.f32(a.slotWeights, a.rows * S);
  const x = a.gate === 0n ? undefined : readElements(mem, a.x, a.rows * a.hidden, rowDtypeOf(a.dtype));
  const gate = a.gate === 0n ? undefined : mem.f32(a.gate, a.hidden);
  const padded = paddedRows(a, mem);
  for (let r = 0; r < a.rows; r++) {
    for (let j = 0; j < K; j++) {
      slotIds[r * S + j] = ids[r * K + j]!;
      slotWeights[r * S + j] = weights[r * K + j]!;
    }
    let g = 1;
    if (x && gate) {
      let sum = 0;
      for (let d = 0; d < a.hidden; d++) sum += x[r * a.hidden + d]! * gate[d]!;
      g = 1 / (1 + Math.exp(-Math.fround(sum)));
    }
    slotIds[r * S + K] = padded(r) ? -1 : a.sharedId;
    slotWeights[r * S + K] = g;
  }
}

export interface LocalizeArgs {
  readonly ids: bigint;
  readonly weights: bigint;
  readonly entries: number;
  readonly first: number;
  readonly count: number;
}

/** Expert parallelism: entries of experts [first, first + count) get local ids; the others the zero expert `count` and weight 0. */
export function localizeCpu(a: LocalizeArgs, { mem }: CpuKernelContext): void {
  const ids = mem.i32(a.ids, a.entries);
  const weights = mem.f32(a.weights, a.entries);
  for (let i = 0; i < a.entries; i++) {
    const local = ids[i]! - a.first;
    if (local >= 0 && local < a.count) ids[i] = local;
    else {
      ids[i] = a.count;
      weights[i] = 0;
    }
  }
}
