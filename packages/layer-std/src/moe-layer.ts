import {
  FLOAT_DTYPE_CODE, WeightsError, floatBytes, readF32, readLinear, runLinear, uploadLinear, flatLaunch, rowLaunch, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep,
  type LinearWeight, type Precision, type WeightSource,
} from '@metrale/core';
import { WEIGHT_DTYPE_CODE } from './elements.cpu.js';
import { precisionOf } from './layer-precision.js';
import type { MoeOptions } from './moe-config.js';
import { checkMoe } from './moe-config.js';
import {
  EXPERT_KERNELS, combineKernel, expertFormat, expertsDownLaunch, expertsGemm, expertsGemmLaunch, expertsKernel, expertsLaunch, expertsRowwiseLaunch, expertsUpLaunch,
  expertsUpRowwiseLaunch, groupKernel, groupLaunch, localizeKernel, moeGrouped, moeGroupsLength, moeTensorCores, routeFewKernel, routeFewLaunch, routeForm, routeKernel,
  fusedRouteTail, routerGemvKernel, routerGemvLaunch, sharedSlotsKernel, sharedSlotsLaunch, type ExpertKernels, type RouteForm,
} from './moe-kernels.js';
import { loadExperts, withSharedExpert, type ExpertMatrices } from './moe-weights.js';
import { requireKernels } from './require-kernels.js';
import { siluMulKernel } from './rows-kernels.js';
import { acquireScratch, type ScratchLease } from './shared-scratch.js';
import { StatelessLayer } from './stateless-layer.js';
import { SwiGlu } from './swiglu.js';

const SCRATCH_PARTS = ['logits', 'ids', 'weights', 'slotIds', 'slotWeights', 'groups', 'h', 'y', 'routed', 'shared', 'gate'] as const;
type ScratchPart = (typeof SCRATCH_PARTS)[number];

/** The route kernels' `padSlots` and `padK`. */
interface RoutePadding {
  readonly padSlots: DevicePtr;
  readonly padK: number;
}

/**
 * The route's padding arguments: a decode or verify step's slot table and rows per batch position,
 * so a bucket's padded rows are routed to no expert. Prefill has no padding, nor has a bucket of one
 * position (no batch is smaller); there the kernels read no table.
 */
function padding(step: LayerStep<LayerState>): RoutePadding {
  return step.phase === 'prefill' || step.batch === 1 ? { padSlots: 0n, padK: 0 } : { padSlots: step.tables.slots, padK: step.k };
}

/** What the fused route makes after the route itself: the shared expert's slots, the groups buffer. */
interface RouteTail {
  readonly slots: boolean;
  readonly groups: boolean;
}

/** A stacked expert weight on the device: its elements and, for FP8, its block scales (else 0n). */
interface DeviceExperts {
  readonly data: DevicePtr;
  readonly scales: DevicePtr;
}

/**
 * A mixture-of-experts feed-forward: router GEMM (f32 logits) → `std.moe_route` (ids and weights per
 * row; up to FEW_ROUTE_ROWS rows `std.moe_router_gemv`, both in one launch, or for an FP8 router the
 * GEMM then `std.moe_route_few`, as `routeForm` decides) → experts, the shared expert among them
 * (gated or not): where it has the routed experts' width and type and every rank holds it whole,
 * its weights are stacked after theirs and `std.moe_shared_slots` adds it to each row's slots with
 * weight sigmoid(gate · x) or 1, so one pass of the expert kernels sums routed and shared experts
 * in f32; else it runs apart (SwiGLU) and `std.moe_combine` adds it. Experts: from GROUPED_MIN_ENTRIES_PER_EXPERT (row, slot) entries per
 * expert, `std.moe_group` (the entries by expert, on the device) → `std.moe_experts_up` →
 * `std.moe_experts_down` (each chosen expert's weights read once per step for all the rows that
 * chose it) → `std.moe_experts` (Σ weight · y, in slot order); below, `std.moe_experts_up_rowwise`
 * → `std.moe_experts_rowwise` (per row and expert). Both paths give a row the same bits, so its
 * output does not depend on the batch.
 * With bf16 / f16 rows, steps take `std.moe_gemm_up` / `std.moe_gemm_down` instead of either path
 * (`moeTensorCores`: every step with 16-bit weights, prefill steps with FP8 ones): the same grouping
 * on tensor cores, at any batch, so a row's result still depends on nothing else in the step.
 * Rows, h, y, the routed sum and the shared expert are in the row type, the expert kernels of the
 * weights' format (`ExpertFormat`). Tensors, prefix removed: `gate.weight`,
 * `gate.e_score_correction_bias` (sigmoid routing), `experts.*`, `shared_expert.*` +
 * `shared_expert_gate.weight` (Qwen3-Next) or `shared_experts.*` (GLM-5). The intermediates live in
 * a scratch buffer the model's MoE layers share (`acquireScratch`): they run one after another.
 *
 * Expert parallelism (`localExperts`): the router scores every expert, `std.moe_localize` maps the
 * chosen ones onto the rank's experts and sends the rest to a zero expert with weight 0, and the
 * expert kernels run over the rank's experts; the layer's output is the rank's part of the sum.
 */
export class MoeLayer extends StatelessLayer {
  readonly type = 'moe';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: MoeOptions;
  readonly precision: Precision;
  /** How the shared expert runs: 'slot' (one more expert of the routed kernels), 'apart' (SwiGLU + combine), or undefined (none). */
  readonly sharedExpert: 'slot' | 'apart' | undefined;
  readonly #kernels: ExpertKernels;
  readonly #w: {
    router: LinearWeight; bias: DevicePtr;
    /** `std.moe_router_gemv`'s count of finished CTAs: zero between launches (its last CTA resets it); this layer's own. */
    routeCounter: DevicePtr;
    gateUp: DeviceExperts; down: DeviceExperts; sharedGate: LinearWeight | undefined; wDtype: number;
    /** Experts the kernels index: all, or the rank's plus its zero expert, or all plus the shared expert. */
    held: number;
    /** The shared expert as the expert kernels' last expert (`std.moe_shared_slots`): its gate (f32 [hidden], or 0n ungated). */
    sharedSlot: { gate: DevicePtr } | undefined;
  };
  /** The shared expert run apart (cuBLAS SwiGLU, then `std.moe_combine`) where it cannot be a slot. */
  readonly #shared: SwiGlu | undefined;
  /**
   * Scratch, as offsets into the model's shared MoE scratch (`acquireScratch`: every MoE layer of
   * the model uses it in turn): router logits (f32), ids, weights (f32), the slots with the shared
   * expert (ids, f32 weights), entries by expert, expert activations h, expert outputs y, routed
   * sum, shared output (row type), shared gate logits (f32).
   */
  readonly #s: Readonly<Record<ScratchPart, number>>;
  readonly #scratch: ScratchLease;
  /** The parts' pointers, resolved at the first forward (the shared buffer no longer moves once read). */
  #parts: Readonly<Record<ScratchPart, DevicePtr>> | undefined;

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: MoeOptions) {
    requireKernels(gpu, 'moe', [routeKernel, routeFewKernel, routerGemvKernel, sharedSlotsKernel, groupKernel, expertsKernel, combineKernel, siluMulKernel, ...(options.localExperts ? [localizeKernel] : [])]);
    super(gpu, limits);
    this.options = checkMoe(options);
    const precision = (this.precision = precisionOf(options.precision, 'moe'));
    const rows = precision.rows;
    const { hidden: D, experts: E, topK } = options;
    const bytes = floatBytes(rows);
    this.inputRowBytes = this.outputRowBytes = bytes * D;
    const m = this.memory;
    const R = limits.maxRows;
    try {
      const routedOnly = loadExperts(weights, options, precision);
      const sh = options.shared;
      // The shared expert as one more expert of the routed kernels, where it has their width and
      // every rank holds it whole (not split by expert parallelism).
      const stacked = sh && !options.localExperts && sh.inter === options.inter ? withSharedExpert(routedOnly, weights, sh.prefix, sh.inter, D, precision) : undefined;
      const experts = stacked ?? routedOnly;
      if (experts.gateUp.dtype !== experts.down.dtype) {
        throw new WeightsError(`the MoE's expert gate/up weights are ${experts.gateUp.dtype} but its down weights ${experts.down.dtype}; the expert kernels read one type`);
      }
      this.#kernels = EXPERT_KERNELS[expertFormat(experts.gateUp.dtype, rows)];
      const k = this.#kernels;
      requireKernels(gpu, 'moe', [k.up, k.down, k.upRowwise, k.rowwise, ...(k.gemm ? [k.gemm.up, k.gemm.down] : []), ...(k.gemm?.few ? [k.gemm.few.up, k.gemm.few.down] : [])]);
      const upload = (host: ExpertMatrices): DeviceExperts => ({ data: m.upload(host.data), scales: host.scales ? m.upload(host.scales) : 0n });
      const linear = (name: string, shape: readonly [number, number]) => uploadLinear(gpu, (n) => m.alloc(n), readLinear(weights, name, shape, precision));
      this.#w = {
        router: linear('gate.weight', [E, D]),
        bias: options.routing.scoreBias ? m.upload(readF32(weights, 'gate.e_score_correction_bias', [E])) : 0n,
        routeCounter: m.upload(new Uint32Array(1)),
        gateUp: upload(experts.gateUp),
        down: upload(experts.down),
        sharedGate: sh?.gate && !stacked ? linear(sh.gate, [1, D]) : undefined,
        wDtype: WEIGHT_DTYPE_CODE[experts.gateUp.dtype],
        held: experts.experts,
        sharedSlot: stacked ? { gate: sh?.gate ? m.upload(readF32(weights, sh.gate, [D])) : 0n } : undefined,
      };
      const apart = sh && !stacked;
      this.sharedExpert = stacked ? 'slot' : apart ? 'apart' : undefined;
      this.#shared = apart ? new SwiGlu(m, weights, sh.prefix, D, sh.inter, R, precision) : undefined;
      const held = experts.experts;
      // Slots per row the expert kernels take: the route's, and the shared expert's.
      const slots = topK + (stacked ? 1 : 0);
      const grouped = moeGrouped(R, slots, held) || moeTensorCores(this.#kernels, 'prefill', D, options.inter, limits.maxBatch);
      // The grouped path's groups and y only where maxRows can reach it; the shared expert's buffers only where it runs apart.
      const sizes: Record<ScratchPart, number> = {
        logits: 4 * R * E, ids: 4 * R * topK, weights: 4 * R * topK, slotIds: stacked ? 4 * R * slots : 0, slotWeights: stacked ? 4 * R * slots : 0,
        groups: grouped ? 4 * moeGroupsLength(R, slots, held) : 0, h: bytes * R * slots * options.inter, y: grouped ? bytes * R * slots * D : 0,
        routed: apart ? bytes * R * D : 0, shared: apart ? bytes * R * D : 0, gate: apart ? 4 * R : 0,
      };
      let at = 0;
      const offsets = {} as Record<ScratchPart, number>;
      for (const name of SCRATCH_PARTS) {
        offsets[name] = at;
        at += Math.ceil(sizes[name] / 256) * 256;
      }
      this.#s = offsets;
      this.#scratch = acquireScratch(gpu, 'moe', at);
    } catch (error) {
      m.free();
      throw error;
    }
  }

  override dispose(): void {
    this.#scratch?.release();
    super.dispose();
  }

  #resolveParts(): Record<ScratchPart, DevicePtr> {
    const base = this.#scratch.ptr;
    return Object.fromEntries(SCRATCH_PARTS.map((name) => [name, base + BigInt(this.#s[name])])) as Record<ScratchPart, DevicePtr>;
  }

  /**
   * Router logits, then ids and weights per row into the scratch, in the form `routeForm` chose for
   * the step. The fused form also makes `tail`: the shared expert's slots and the groups buffer.
   */
  #route(step: LayerStep<LayerState>, form: RouteForm, s: Readonly<Record<ScratchPart, DevicePtr>>, tail: RouteTail, pad: RoutePadding): void {
    const { gpu, stream, rows, input } = step;
    const { hidden: D, experts, topK, routing } = this.options;
    const w = this.#w;
    const dtype = this.precision.rows;
    const route = {
      bias: w.bias, ids: s.ids, weights: s.weights, rows, experts, topK,
      scoring: routing.scoring === 'softmax' ? 0 : 1, normTopK: routing.normTopK ? 1 : 0, nGroup: routing.nGroup, topkGroup: routing.topkGroup, scaling: routing.scaling,
      ...pad,
    };
    if (form === 'fused') {
      const gated = tail.slots && w.sharedSlot !== undefined && w.sharedSlot.gate !== 0n;
      gpu.launch(routerGemvKernel, routerGemvLaunch(experts, stream, gated), {
        x: input, w: w.router.data, logits: s.logits, counter: w.routeCounter, ...route, hidden: D, dtype: FLOAT_DTYPE_CODE[dtype],
        sharedGate: w.sharedSlot?.gate ?? 0n, slotIds: s.slotIds, slotWeights: s.slotWeights, sharedId: tail.slots ? w.held - 1 : -1,
        groups: tail.groups ? s.groups : 0n, groupExperts: w.held,
      });
      return;
    }
    runLinear(gpu, { m: rows, x: input, w: w.router, y: s.logits, xDtype: dtype, yDtype: 'f32', stream });
    if (form === 'few') gpu.launch(routeFewKernel, routeFewLaunch(stream), { logits: s.logits, ...route });
    else gpu.launch(routeKernel, rowLaunch(rows, experts, stream), { logits: s.logits, ...route });
  }

  protected run(step: LayerStep<LayerState>): void {
    const { gpu, stream, rows, input, output } = step;
    const { hidden: D, topK, inter, localExperts } = this.options;
    const w = this.#w;
    // The experts the kernels after the route index.
    const E = w.held;
    const s = (this.#parts ??= this.#resolveParts());
    const k = this.#kernels;
    const dtype = this.precision.rows;
    const codes = { wDtype: w.wDtype, rowDtype: FLOAT_DTYPE_CODE[dtype] };
    // The slots the expert kernels take: the route's, or those plus the shared expert's (the last expert held).
    const slot = w.sharedSlot;
    const slots = slot ? topK + 1 : topK;
    const tensorCores = moeTensorCores(k, step.phase, D, inter, this.limits.maxBatch);
    const grouped = tensorCores || moeGrouped(rows, slots, E);
    const form = routeForm(rows, topK, this.options.experts, w.router.dtype);
    // The fused route's CTA makes the slots and groups itself at few rows, where no localizing comes between.
    const fusedTail = form === 'fused' && !localExperts && fusedRouteTail(rows);
    const pad = padding(step);
    this.#route(step, form, s, { slots: fusedTail && slot !== undefined, groups: fusedTail && grouped }, pad);
    if (localExperts) {
      gpu.launch(localizeKernel, flatLaunch(rows * topK, stream), { ids: s.ids, weights: s.weights, entries: rows * topK, first: localExperts.first, count: localExperts.count });
    }
    if (slot && !fusedTail) {
      gpu.launch(sharedSlotsKernel, sharedSlotsLaunch(rows, stream), {
        x: input, gate: slot.gate, ids: s.ids, weights: s.weights, slotIds: s.slotIds, slotWeights: s.slotWeights, rows, hidden: D, topK, sharedId: E - 1, dtype: codes.rowDtype,
        ...pad,
      });
    }
    const ids = slot ? s.slotIds : s.ids;
    const weights = slot ? s.slotWeights : s.weights;
    const shared = this.#shared;
    const routed = shared ? s.routed : output;
    const pass = { rows, hidden: D, inter, experts: E, topK: slots, ...codes };
    if (grouped) {
      const gemm = tensorCores ? expertsGemm(k, rows) : undefined;
      const up = gemm ? gemm.up : k.up;
      const down = gemm ? gemm.down : k.down;
      if (!fusedTail) gpu.launch(groupKernel, groupLaunch(rows, slots, stream), { ids, groups: s.groups, rows, experts: E, topK: slots });
      gpu.launch(up, gemm ? expertsGemmLaunch(gemm, 'up', rows, slots, inter, E, gpu.device.computeCapability, stream) : expertsUpLaunch(k.format, rows, slots, D, inter, E, stream), {
        input, ids, groups: s.groups, gateUp: w.gateUp.data, gateUpScales: w.gateUp.scales, h: s.h, ...pass,
      });
      gpu.launch(down, gemm ? expertsGemmLaunch(gemm, 'down', rows, slots, D, E, gpu.device.computeCapability, stream) : expertsDownLaunch(k.format, rows, slots, D, inter, E, stream), {
        h: s.h, ids, groups: s.groups, down: w.down.data, downScales: w.down.scales, y: s.y, ...pass,
      });
      gpu.launch(expertsKernel, expertsLaunch(rows, D, stream), {
        y: s.y, ids, weights, output: routed, rows, hidden: D, experts: E, topK: slots, dtype: codes.rowDtype,
      });
    } else {
      gpu.launch(k.upRowwise, expertsUpRowwiseLaunch(rows, slots, inter, stream), {
        input, ids, gateUp: w.gateUp.data, gateUpScales: w.gateUp.scales, h: s.h, ...pass,
      });
      gpu.launch(k.rowwise, expertsRowwiseLaunch(rows, D, stream), {
        h: s.h, ids, weights, down: w.down.data, downScales: w.down.scales, output: routed, ...pass,
      });
    }
    if (!shared) return;
    shared.run(gpu, stream, input, s.shared, rows);
    if (w.sharedGate) runLinear(gpu, { m: rows, x: input, w: w.sharedGate, y: s.gate, xDtype: dtype, yDtype: 'f32', stream });
    gpu.launch(combineKernel, rowLaunch(rows, D, stream), {
      routed: s.routed, shared: s.shared, gate: w.sharedGate ? s.gate : 0n, output, rows, hidden: D, dtype: codes.rowDtype,
    });
  }
}
