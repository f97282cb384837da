import { InvalidArgumentError, defineKernel, type FloatDtype, type Kernel, type LaunchConfig, type StepPhase, type Stream, type WeightDtype } from '@metrale/core';
import { combineCpu, expertsDownCpu, expertsRowwiseCpu, expertsSumCpu, expertsUpCpu, groupCpu, localizeCpu, routeCpu, routerGemvCpu, sharedSlotsCpu } from './moe.cpu.js';
import { moeGemm16Module, moeGemmModule, moeGroupModule, moeModule as module, moeRouteModule } from './std-modules.js';

// padSlots, padK: the step's slot table (i32 per batch position, −1 for padding; 0n: no padding)
// and the rows of a position (decode 1, verify k): a padded row gets ids −1 and weights 0, which
// every expert kernel skips, so a bucket's padding costs the experts nothing.
const ROUTE_PARAMS = {
  logits: 'ptr', bias: 'ptr', ids: 'ptr', weights: 'ptr',
  rows: 'i32', experts: 'i32', topK: 'i32', scoring: 'i32', normTopK: 'i32', nGroup: 'i32', topkGroup: 'i32', scaling: 'f32',
  padSlots: 'ptr', padK: 'i32',
} as const;

/** `std.moe_route` (kernels/std-moe-route.cu): one CTA per row, launched with `rowLaunch(rows, experts)` (its bits do not depend on the block). */
export const routeKernel = defineKernel({
  name: 'std.moe_route',
  params: ROUTE_PARAMS,
  cuda: { module: moeRouteModule, symbol: 'std_moe_route' },
  cpu: routeCpu,
});

/**
 * `std.moe_route_few`: `std.moe_route`'s ids and weights, bit for bit (the same route pass, up to 8
 * rows at once), from one CTA of 256 threads; for a few rows (`routeForm`), launched with
 * `routeFewLaunch`.
 */
export const routeFewKernel = defineKernel({
  name: 'std.moe_route_few',
  params: ROUTE_PARAMS,
  cuda: { module: moeRouteModule, symbol: 'std_moe_route_few' },
  cpu: routeCpu,
});

/**
 * `std.moe_router_gemv`: the router's f32 logits `x · Wᵀ` for a few rows (x and W of the row type
 * `dtype`, FLOAT_DTYPE_CODE), then, in the last of its CTAs to finish, `std.moe_route_few` over them:
 * router and route in one launch. `counter`: a u32 that is zero before the launch and after it (the
 * last CTA resets it), one per layer. Then, in the same CTA, what the layer would launch next:
 * with `sharedId` ≥ 0 `std.moe_shared_slots`' slots (gate `sharedGate`, or 0n), with `groups`
 * not 0n `std.moe_group`'s buffer over `groupExperts` (the same bits and buffer as theirs; -1 and
 * 0n: neither). Launched with `routerGemvLaunch`.
 */
export const routerGemvKernel = defineKernel({
  name: 'std.moe_router_gemv',
  params: {
    x: 'ptr', w: 'ptr', logits: 'ptr', counter: 'ptr', bias: 'ptr', ids: 'ptr', weights: 'ptr',
    rows: 'i32', hidden: 'i32', experts: 'i32', topK: 'i32', scoring: 'i32', normTopK: 'i32', nGroup: 'i32', topkGroup: 'i32', scaling: 'f32', dtype: 'i32',
    sharedGate: 'ptr', slotIds: 'ptr', slotWeights: 'ptr', sharedId: 'i32', groups: 'ptr', groupExperts: 'i32', padSlots: 'ptr', padK: 'i32',
  },
  cuda: { module: moeRouteModule, symbol: 'std_moe_router_gemv' },
  cpu: routerGemvCpu,
  earlyStart: 'wait-first',
});

/** Rows up to which a step routes with the few-row kernels (`routeForm`): the GEMV's accumulators hold 8 rows. */
export const FEW_ROUTE_ROWS = 8;
/** Slots the few-row forms take: the route ranks up to 32 slots (a lane each) at once, more one pick at a time. */
export const FEW_ROUTE_MAX_TOP_K = 32;

/**
 * How a step computes its router logits and routes them. 'fused': `std.moe_router_gemv`, router
 * and route in one launch; 'few': the router GEMM (`runLinear`), then `std.moe_route_few` (an FP8
 * router weight, which the GEMV does not read); 'block': the router GEMM, then `std.moe_route`.
 * Every form gives `std.moe_route`'s ids and weights over the logits it computed (the forms' logits
 * differ by f32 rounding: the GEMV sums in another order than the GEMM).
 */
export type RouteForm = 'fused' | 'few' | 'block';

/** Scores (rows · experts) up to which the one-CTA route forms beat `std.moe_route`'s CTA per row (docs/benchmarks.md). */
export const FEW_ROUTE_SCORES = 1024;

/**
 * The one place that picks the form, from the step's rows and experts (the layer and the benches ask
 * it): few scores spend their time in launches, barriers and the GEMM's fixed cost, not in bytes, so
 * they take the one-warp-per-row route and, with a float router, the fused GEMV. Past
 * FEW_ROUTE_SCORES the one CTA of the few-row route is slower than a CTA per row.
 */
export function routeForm(rows: number, topK: number, experts: number, routerDtype: WeightDtype): RouteForm {
  if (rows > FEW_ROUTE_ROWS || topK > FEW_ROUTE_MAX_TOP_K || rows * experts > FEW_ROUTE_SCORES) return 'block';
  return routerDtype === 'f8e4m3' ? 'few' : 'fused';
}

/**
 * Rows up to which the fused route's last CTA also makes the shared expert's slots and the groups
 * buffer: its serial work grows with the entries, and from a few rows `std.moe_shared_slots` and
 * `std.moe_group` after the GEMV are faster (docs/benchmarks.md: the router's tail).
 */
export const FUSED_TAIL_ROWS = 1;

/** Whether a fused-route step of `rows` rows makes the slots and groups in the GEMV's last CTA. */
export function fusedRouteTail(rows: number): boolean {
  return rows <= FUSED_TAIL_ROWS;
}

/** Threads of `std.moe_route_few` and `std.moe_router_gemv` (kernels/std-moe-route.cu: kFewThreads). */
const FEW_THREADS = 256;
/**
 * Experts per CTA of `std.moe_router_gemv` (kernels/std-moe-route.cu: gemv_experts, which traps on
 * another grid): up to 4, fewer where the experts are few, so the weight spreads over more SMs.
 */
function gemvExperts(experts: number): number {
  return experts <= 128 ? 1 : experts <= 256 ? 2 : 4;
}

/** `std.moe_route_few`: one CTA for every row. */
export function routeFewLaunch(stream: Stream): LaunchConfig {
  return { grid: 1, block: FEW_THREADS, stream };
}

/**
 * `std.moe_router_gemv`: a CTA per 1, 2 or 4 experts (`gemvExperts`); with `gateCta` (the launch
 * makes a gated shared expert's slots: `sharedGate` and `sharedId` given) one CTA more, which makes
 * the slot weights sigmoid(x · gate) while the others make the logits (the same bits as the last
 * CTA making them after the route, which it does without).
 */
export function routerGemvLaunch(experts: number, stream: Stream, gateCta = false): LaunchConfig {
  return { grid: Math.max(1, Math.ceil(experts / gemvExperts(experts))) + (gateCta ? 1 : 0), block: FEW_THREADS, stream };
}

/**
 * `std.moe_shared_slots`: the shared expert as one more chosen expert. Each row's topK route slots
 * (ids, weights) are copied to topK + 1 slots (`slotIds`, `slotWeights`), the last the shared expert
 * (`sharedId`, whose weights the layer stacks after the routed experts') with weight
 * sigmoid(x · gate) (`gate` f32 [hidden]), or 1 where `gate` is 0n; x of the row type `dtype`.
 * Launched with `sharedSlotsLaunch`.
 */
export const sharedSlotsKernel = defineKernel({
  name: 'std.moe_shared_slots',
  params: {
    x: 'ptr', gate: 'ptr', ids: 'ptr', weights: 'ptr', slotIds: 'ptr', slotWeights: 'ptr', rows: 'i32', hidden: 'i32', topK: 'i32', sharedId: 'i32', dtype: 'i32',
    padSlots: 'ptr', padK: 'i32',
  },
  cuda: { module: moeRouteModule, symbol: 'std_moe_shared_slots' },
  cpu: sharedSlotsCpu,
});

/** `std.moe_shared_slots`: a CTA of 256 threads per row (the gate's dot product is the work). */
export function sharedSlotsLaunch(rows: number, stream: Stream): LaunchConfig {
  return { grid: Math.max(1, rows), block: 256, stream };
}

/** Ints of the `groups` buffer of `std.moe_group` (header 3, experts chosen E, starts E + 1, entries rows·topK; KERNELS.md). */
export function moeGroupsLength(rows: number, topK: number, experts: number): number {
  return 4 + 2 * experts + rows * topK;
}

/**
 * `std.moe_group` (kernels/std-moe-group.cu): one CTA, its warps taking a segment of the entries
 * each: a warp per 64 entries, up to 32 (a decode step's few entries are not worth the barriers of
 * 1024 threads). The result does not depend on the count.
 */
export function groupLaunch(rows: number, topK: number, stream: Stream): LaunchConfig {
  return { grid: 1, block: 32 * Math.max(1, Math.min(32, Math.ceil((rows * topK) / 64))), stream };
}

/**
 * Entries (row, slot) per expert from which the layer takes the grouped kernels. On the H200
 * (docs/benchmarks.md, layer-std MoE) they beat the row-wise ones at 10 entries per expert (64
 * experts, batch 64) and lose at one or two: their CTAs (168 / 128 registers) keep 12–16 warps per
 * SM against the row-wise kernels' 64, too few bytes in flight when an expert's tile is streamed
 * for one or two rows. Both give the same bits for every row, so the switch keeps each row's
 * result batch-independent.
 */
export const GROUPED_MIN_ENTRIES_PER_EXPERT = 8;

/** Whether a step of `rows` rows runs the grouped expert kernels (else the row-wise ones). */
export function moeGrouped(rows: number, topK: number, experts: number): boolean {
  return rows * topK >= GROUPED_MIN_ENTRIES_PER_EXPERT * experts;
}

/** Weight rows per CTA tile of the grouped expert kernels: 2 per warp (kernels/std-moe.cu kRowsPerWarp) × 4 warps. */
const GROUPED_BLOCK = 128;
const GROUPED_ROWS_PER_WARP = 2;
const GROUPED_ROWS = GROUPED_ROWS_PER_WARP * (GROUPED_BLOCK / 32);
/**
 * Tiles a grouped CTA takes in turn (up: of intermediate rows, down: of output values): one load of
 * a pass's inputs into the CTA's stage serves them all where the inputs fit it.
 */
const GROUPED_UP_TILES = 4;
const GROUPED_DOWN_TILES = 8;
/** Entries a grouped CTA runs through its tiles at a time (kEntries), and its stage's rows table (kStageRowBytes). */
const GROUPED_ENTRIES = 16;
const GROUPED_STAGE_ROWS_BYTES = GROUPED_ENTRIES * 4;
/** The most dynamic shared memory a grouped CTA's stage takes: three CTAs of the up pass an SM. */
const GROUPED_STAGE_MAX_BYTES = 64 * 1024 + GROUPED_STAGE_ROWS_BYTES;

/**
 * Dynamic shared memory of a grouped expert kernel of `format` over rows `width` wide (up: hidden,
 * down: inter): the 16 entries' rows table, then blocks of 16 entries × 32 chunks of their inputs
 * (kernels/std-moe.cu EntryStage: a chunk is 4 steps of 4 elements for FP8 weights, one for float
 * ones; a step of 8 bytes on 16-bit rows, 16 on f32), as many as a pass needs (at least two) where
 * they fit GROUPED_STAGE_MAX_BYTES, loaded once a pass; else two, streamed. A kernel given less
 * than two blocks traps.
 */
export function groupedStageBytes(format: ExpertFormat, width: number): number {
  const chunkElements = format.startsWith('fp8') ? 16 : 4;
  const block = GROUPED_ENTRIES * 32 * (chunkElements / 4) * (format === 'f32' ? 16 : 8);
  const blocks = Math.max(2, Math.ceil(Math.floor(width / chunkElements) / 32));
  const all = GROUPED_STAGE_ROWS_BYTES + blocks * block;
  return all <= GROUPED_STAGE_MAX_BYTES ? all : GROUPED_STAGE_ROWS_BYTES + 2 * block;
}

/** Expert slots of the grouped kernels: at most one row of CTAs per expert, per (row, slot) entry. */
const slots = (rows: number, topK: number, experts: number): number => Math.max(1, Math.min(experts, rows * topK));

/**
 * `std.moe_experts_up` of `format`: CTAs (GROUPED_UP_TILES tiles of 8 intermediate rows, expert
 * slot), a warp per 2 rows of a tile; the slots are the grid's rows, so that the kernel can start
 * the last expert's CTAs (the stacked shared expert's, the most entries) first.
 */
export function expertsUpLaunch(format: ExpertFormat, rows: number, topK: number, hidden: number, inter: number, experts: number, stream: Stream): LaunchConfig {
  const grid: [number, number] = [Math.ceil(inter / (GROUPED_ROWS * GROUPED_UP_TILES)), slots(rows, topK, experts)];
  return { grid, block: GROUPED_BLOCK, sharedBytes: groupedStageBytes(format, hidden), stream };
}

/** `std.moe_experts_down` of `format`: CTAs (GROUPED_DOWN_TILES tiles of 8 output values, expert slot), a warp per 2 values of a tile. */
export function expertsDownLaunch(format: ExpertFormat, rows: number, topK: number, hidden: number, inter: number, experts: number, stream: Stream): LaunchConfig {
  const grid: [number, number] = [Math.ceil(hidden / (GROUPED_ROWS * GROUPED_DOWN_TILES)), slots(rows, topK, experts)];
  return { grid, block: GROUPED_BLOCK, sharedBytes: groupedStageBytes(format, inter), stream };
}

/** `std.moe_experts` (the weighted sum): CTAs (row, 512 values), a thread per 4 values. */
export function expertsLaunch(rows: number, hidden: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, rows), Math.ceil(hidden / 512)], block: 128, stream };
}

export const groupKernel = defineKernel({
  name: 'std.moe_group',
  params: { ids: 'ptr', groups: 'ptr', rows: 'i32', experts: 'i32', topK: 'i32' },
  cuda: { module: moeGroupModule, symbol: 'std_moe_group' },
  cpu: groupCpu,
});

/** `output[r] = Σ_j w_rj · y[r][j]`: y and output of the row type `dtype` (FLOAT_DTYPE_CODE). */
export const expertsKernel = defineKernel({
  name: 'std.moe_experts',
  params: { y: 'ptr', ids: 'ptr', weights: 'ptr', output: 'ptr', rows: 'i32', hidden: 'i32', experts: 'i32', topK: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'std_moe_experts' },
  cpu: expertsSumCpu,
  earlyStart: 'wait-first',
});

// ---- the expert kernels, per (weight type, row type) ----------------------------------------------

/**
 * How the routed experts are stored and what they multiply: weights in the row type (f32, bf16,
 * f16), or FP8 E4M3 with block scales over bf16 / f16 rows. Each has its own CUDA symbols
 * (kernels/std-moe.cu: the expert kernels are templates heavy on registers); the CPU twins are
 * shared and read the codes.
 */
export type ExpertFormat = 'f32' | 'bf16' | 'f16' | 'fp8-bf16' | 'fp8-f16';

export const EXPERT_FORMATS: readonly ExpertFormat[] = ['f32', 'bf16', 'f16', 'fp8-bf16', 'fp8-f16'];

const SYMBOL_SUFFIX: Readonly<Record<ExpertFormat, string>> = { f32: '', bf16: '_bf16', f16: '_f16', 'fp8-bf16': '_fp8_bf16', 'fp8-f16': '_fp8_f16' };

/** The format of expert weights of type `weight` over rows of type `rows`; throws for a pair no kernel reads. */
export function expertFormat(weight: WeightDtype, rows: FloatDtype): ExpertFormat {
  if (weight === 'f8e4m3') {
    if (rows === 'f32') throw new InvalidArgumentError('moe: FP8 expert weights multiply bf16 or f16 rows, not f32; dequantize them for the f32 path (precision.fp8Weights false)');
    return `fp8-${rows}`;
  }
  if (weight !== rows) throw new InvalidArgumentError(`moe: ${weight} expert weights cannot multiply ${rows} rows; hold the weights in the row type`);
  return rows;
}

/** The parameters every expert kernel ends with: shapes, then the weight and row type codes. */
const PASS = { rows: 'i32', hidden: 'i32', inter: 'i32', experts: 'i32', topK: 'i32', wDtype: 'i32', rowDtype: 'i32' } as const;
const UP_PARAMS = { input: 'ptr', ids: 'ptr', gateUp: 'ptr', gateUpScales: 'ptr', h: 'ptr', ...PASS } as const;
const GROUPED_UP_PARAMS = { input: 'ptr', ids: 'ptr', groups: 'ptr', gateUp: 'ptr', gateUpScales: 'ptr', h: 'ptr', ...PASS } as const;
const GROUPED_DOWN_PARAMS = { h: 'ptr', ids: 'ptr', groups: 'ptr', down: 'ptr', downScales: 'ptr', y: 'ptr', ...PASS } as const;
const ROWWISE_PARAMS = { h: 'ptr', ids: 'ptr', weights: 'ptr', down: 'ptr', downScales: 'ptr', output: 'ptr', ...PASS } as const;

/**
 * The four expert kernels of one format. Arguments: weights `gateUp` [E][2I][D] and `down` [E][D][I]
 * of type `wDtype` (WEIGHT_DTYPE_CODE), with `gateUpScales` / `downScales` (0n for float weights;
 * layout in moe-weights.ts); x, h, y and the output of type `rowDtype` (FLOAT_DTYPE_CODE).
 */
export interface ExpertKernels {
  /** The weights' and rows' format these kernels take. */
  readonly format: ExpertFormat;
  /** `std.moe_experts_up`: the grouped gate/up pass (CTAs per expert and weight tile). */
  readonly up: Kernel<typeof GROUPED_UP_PARAMS>;
  /** `std.moe_experts_down`: the grouped down pass into y. */
  readonly down: Kernel<typeof GROUPED_DOWN_PARAMS>;
  /** `std.moe_experts_up_rowwise`: gate/up per (row, slot). */
  readonly upRowwise: Kernel<typeof UP_PARAMS>;
  /** `std.moe_experts_rowwise`: down and the weighted sum per row. */
  readonly rowwise: Kernel<typeof ROWWISE_PARAMS>;
  /**
   * `std.moe_gemm_up` / `std.moe_gemm_down` (kernels/std-moe-gemm.cu, -16bit.cu): the grouped
   * passes on tensor cores; the same arguments and outputs as `up` / `down`. None for f32 rows.
   * `everyStepFrom`: the layers built for decode batches of at least this many sequences
   * (`LayerLimits.maxBatch`) take them in decode and verify steps too; the others in prefill steps
   * only. `few`: `std.moe_gemm_up_few` / `_down_few`, the same products in smaller tiles for steps
   * of few rows, bit for bit the large pair's; `expertsGemm` picks.
   */
  readonly gemm?: ExpertGemm & { readonly everyStepFrom: number; readonly few?: ExpertGemm };
}

/** A pair of tensor-core expert GEMMs and their CTA shape. */
export interface ExpertGemm {
  readonly up: Kernel<typeof GROUPED_UP_PARAMS>;
  readonly down: Kernel<typeof GROUPED_DOWN_PARAMS>;
  readonly tiles: GemmTiles;
}

/** The CTA shape of a format's tensor-core expert GEMMs (its kernel file's constants). */
interface GemmTiles {
  /** Entries (row, slot) per CTA. */
  readonly entries: number;
  /** Output columns per CTA of the up pass (of I) and of the down pass (of D). */
  readonly upColumns: number;
  readonly downColumns: number;
  readonly threads: number;
  /** Dynamic shared memory (0: the kernel's is static). */
  readonly sharedBytes: number;
  /** Dynamic shared memory of the sm_90a build's up and down passes (compute capability 9.0), where they take wgmma; else `sharedBytes`. */
  readonly sharedBytesWgmma?: { readonly up: number; readonly down: number };
  /** Output columns per CTA of the sm_90a build's down pass, where they differ from `downColumns`. */
  readonly downColumnsWgmma?: number;
}

/**
 * kernels/std-moe-gemm-16bit.cu: `entries` × 128 weight rows; mma.sync with 3 stages of 32-wide k
 * tiles (rows of 40 elements), or on sm_90a wgmma with stages of 64-wide ones (+ 1 KiB to align):
 * 3 for the large pair, 8 (up) and 4 (down) for the few-row pair.
 */
const tiles16Bit = (entries: number, wgmmaStages: { up: number; down: number }): GemmTiles => {
  const stage = (entries + 128) * 64 * 2;
  return {
    entries, upColumns: 64, downColumns: 128, threads: 2 * entries, sharedBytes: 3 * (entries + 128) * 40 * 2,
    sharedBytesWgmma: { up: wgmmaStages.up * stage + 1024, down: wgmmaStages.down * stage + 1024 },
  };
};
const TILES_16BIT = tiles16Bit(128, { up: 3, down: 3 });
const TILES_16BIT_FEW = tiles16Bit(64, { up: 8, down: 4 });
/**
 * Rows of a step up to which the layer takes the few-row GEMMs: each expert then has at most this
 * many entries, one 64-entry tile.
 */
export const FEW_GEMM_ROWS = 64;
/**
 * kernels/std-moe-gemm.cu (FP8 weights): 64 entries × 64 columns on wmma (static shared memory);
 * on sm_90a wgmma over 64 entries × 128 weight rows (kernels/std-moe-gemm-wg.cuh), stages of 64
 * input rows and 128 × 64 codes, the converted weight tile and 1 KiB to align: 3 stages for the
 * large pair, 8 (up) and 4 (down) for the few-row pair.
 */
const tilesFp8 = (wgmmaStages: { up: number; down: number }): GemmTiles => {
  const stage = 64 * 128 + 128 * 64;
  const bytes = (stages: number) => stages * stage + 128 * 128 + 1024;
  return {
    entries: 64, upColumns: 64, downColumns: 64, threads: 128, sharedBytes: 0,
    sharedBytesWgmma: { up: bytes(wgmmaStages.up), down: bytes(wgmmaStages.down) }, downColumnsWgmma: 128,
  };
};
const TILES_FP8 = tilesFp8({ up: 3, down: 3 });
const TILES_FP8_FEW = tilesFp8({ up: 8, down: 4 });

/**
 * The decode batch (`LayerLimits.maxBatch`) from which a layer with FP8 experts takes the
 * tensor-core GEMMs in decode and verify steps too. Below it the CUDA-core kernels, which read one
 * or a few rows' experts faster; from it the GEMMs, which do many rows' products several times
 * faster (docs/benchmarks.md, "FP8 experts by the batch a layer is built for"). A layer keeps its
 * choice for every step, so a row's bits never depend on the batch it shares.
 */
export const FP8_TENSOR_CORE_MIN_BATCH = 32;

function expertKernelsOf(format: ExpertFormat): ExpertKernels {
  const name = (base: string) => (format === 'f32' ? base : `${base}.${format}`);
  const symbol = (base: string) => `${base}${SYMBOL_SUFFIX[format]}`;
  return {
    format,
    up: defineKernel({ name: name('std.moe_experts_up'), params: GROUPED_UP_PARAMS, cuda: { module, symbol: symbol('std_moe_experts_up') }, cpu: expertsUpCpu }),
    down: defineKernel({ name: name('std.moe_experts_down'), params: GROUPED_DOWN_PARAMS, cuda: { module, symbol: symbol('std_moe_experts_down') }, cpu: expertsDownCpu }),
    upRowwise: defineKernel({ name: name('std.moe_experts_up_rowwise'), params: UP_PARAMS, cuda: { module, symbol: symbol('std_moe_experts_up_rowwise') }, cpu: expertsUpCpu }),
    rowwise: defineKernel({ name: name('std.moe_experts_rowwise'), params: ROWWISE_PARAMS, cuda: { module, symbol: symbol('std_moe_experts_rowwise') }, cpu: expertsRowwiseCpu }),
    ...(format === 'f32'
      ? {}
      : {
          gemm: (() => {
            const fp8 = format.startsWith('fp8');
            const gemmModule = fp8 ? moeGemmModule : moeGemm16Module;
            // The 16-bit GEMMs begin with early_start (std-common.cuh); the FP8 pair does not.
            const early = fp8 ? {} : { earlyStart: 'wait-first' as const };
            const pair = (base: string, tiles: GemmTiles): ExpertGemm => ({
              up: defineKernel({
                name: name(`std.moe_gemm_up${base}`), params: GROUPED_UP_PARAMS, cuda: { module: gemmModule, symbol: symbol(`std_moe_gemm_up${base}`) }, cpu: expertsUpCpu, ...early,
              }),
              down: defineKernel({
                name: name(`std.moe_gemm_down${base}`), params: GROUPED_DOWN_PARAMS, cuda: { module: gemmModule, symbol: symbol(`std_moe_gemm_down${base}`) }, cpu: expertsDownCpu, ...early,
              }),
              tiles,
            });
            return {
              ...pair('', fp8 ? TILES_FP8 : TILES_16BIT),
              few: pair('_few', fp8 ? TILES_FP8_FEW : TILES_16BIT_FEW),
              everyStepFrom: fp8 ? FP8_TENSOR_CORE_MIN_BATCH : 1,
            };
          })(),
        }),
  };
}

/**
 * Whether a step runs the tensor-core expert GEMMs: where the format has them and the widths suit
 * them (16-element vectors of k), in prefill steps, and in decode and verify steps too where the
 * layer's decode batch reaches the format's `everyStepFrom` (always for 16-bit weights; from
 * FP8_TENSOR_CORE_MIN_BATCH for FP8). One kernel pair for every decode step keeps a row's bits
 * independent of the step it is in: the GEMMs never split k and sum it in a fixed order, so a row
 * alone and in any batch gets the same result; the CUDA-core kernels, where a layer keeps them for
 * decode, give a row the same bits at any batch too (a prompt's rows never share a step with them).
 */
export function moeTensorCores(kernels: ExpertKernels, phase: StepPhase, hidden: number, inter: number, maxBatch: number): boolean {
  const g = kernels.gemm;
  return g !== undefined && (phase === 'prefill' || maxBatch >= g.everyStepFrom) && hidden % 16 === 0 && inter % 16 === 0;
}

/**
 * The tensor-core expert GEMMs a step of `rows` rows takes: the few-row pair up to FEW_GEMM_ROWS
 * (where the weights must stream at the copy rate and the products are few), else the large pair.
 * Both give a row the same bits, so the choice never changes a result.
 */
export function expertsGemm(kernels: ExpertKernels, rows: number): ExpertGemm {
  const g = kernels.gemm;
  if (!g) throw new InvalidArgumentError('expertsGemm: this expert format has no tensor-core GEMMs (f32 rows); check moeTensorCores first');
  return g.few && rows <= FEW_GEMM_ROWS ? g.few : g;
}

/**
 * `gemm`'s up pass (n = inter) or down pass (n = hidden): CTAs (tile slot, output columns), tile
 * slots the fastest. Where the entries fall is on the device, so the slots are a bound: one per
 * tile of entries, and one more per expert that can be chosen (each expert's last tile may be
 * partial).
 */
export function expertsGemmLaunch(
  gemm: ExpertGemm, pass: 'up' | 'down', rows: number, topK: number, n: number, experts: number, capability: readonly [number, number], stream: Stream,
): LaunchConfig {
  const t = gemm.tiles;
  const entries = Math.max(1, rows * topK);
  // The fatbin's sm_90a code runs only on compute capability 9.0; elsewhere the sm_80 code (or its PTX).
  const wgmma = capability[0] === 9 && capability[1] === 0 && t.sharedBytesWgmma !== undefined;
  const columns = pass === 'up' ? t.upColumns : wgmma ? (t.downColumnsWgmma ?? t.downColumns) : t.downColumns;
  const shared = wgmma ? t.sharedBytesWgmma![pass] : t.sharedBytes;
  return {
    grid: [Math.ceil(entries / t.entries) + Math.min(experts, entries), Math.ceil(n / columns)], block: t.threads, stream,
    ...(shared > 0 ? { sharedBytes: shared } : {}),
  };
}

/** The expert kernels of every format. */
export const EXPERT_KERNELS: Readonly<Record<ExpertFormat, ExpertKernels>> = Object.freeze(
  Object.fromEntries(EXPERT_FORMATS.map((f) => [f, expertKernelsOf(f)])) as Record<ExpertFormat, ExpertKernels>,
);

// The f32 kernels under their own names (the reference path).
export const expertsUpKernel = EXPERT_KERNELS.f32.up;
export const expertsDownKernel = EXPERT_KERNELS.f32.down;
export const expertsUpRowwiseKernel = EXPERT_KERNELS.f32.upRowwise;
export const expertsRowwiseKernel = EXPERT_KERNELS.f32.rowwise;

// The per-(row, expert) kernels: each row re-reads its experts' weights. The layer's path below
// GROUPED_MIN_ENTRIES_PER_EXPERT; the grouped kernels give the same bits (test/gpu).

/**
 * `std.moe_experts_up_rowwise`: one CTA per (row, expert slot) and 16 intermediate rows (two a
 * warp) for one row; 32 (two tiles, four a warp) for several, which measured faster there.
 */
export function expertsUpRowwiseLaunch(rows: number, topK: number, inter: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, rows * topK), Math.ceil(inter / (rows === 1 ? 16 : 32))], block: 256, stream };
}

/**
 * `std.moe_experts_rowwise`: for one row a CTA per 4 output values (two warps each, halves of the
 * slots); for several a CTA per row and 16 values (two a warp).
 */
export function expertsRowwiseLaunch(rows: number, hidden: number, stream: Stream): LaunchConfig {
  return { grid: [Math.max(1, rows), Math.ceil(hidden / (rows === 1 ? 4 : 16))], block: 256, stream };
}

/** `out = routed + σ(gate) · shared`: routed, shared and output of the row type `dtype`, gate logits f32 (or 0n). */
export const combineKernel = defineKernel({
  name: 'std.moe_combine',
  params: { routed: 'ptr', shared: 'ptr', gate: 'ptr', output: 'ptr', rows: 'i32', hidden: 'i32', dtype: 'i32' },
  cuda: { module, symbol: 'std_moe_combine' },
  cpu: combineCpu,
});

/**
 * Expert parallelism: the route's (row, slot) entries made local to a rank holding experts
 * [first, first + count) and a zero expert after them (`count`), which the others get with weight 0.
 */
export const localizeKernel = defineKernel({
  name: 'std.moe_localize',
  params: { ids: 'ptr', weights: 'ptr', entries: 'i32', first: 'i32', count: 'i32' },
  cuda: { module, symbol: 'std_moe_localize' },
  cpu: localizeCpu,
});
