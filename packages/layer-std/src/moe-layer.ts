import { readF32, type DevicePtr, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type WeightSource } from '@metrale/core';
import type { MoeOptions } from './moe-config.js';
import { checkMoe } from './moe-config.js';
import {
  combineKernel, expertsDownKernel, expertsDownLaunch, expertsKernel, expertsLaunch, expertsRowwiseKernel, expertsRowwiseLaunch, expertsUpKernel, expertsUpLaunch,
  expertsUpRowwiseKernel, expertsUpRowwiseLaunch, groupKernel, groupLaunch, moeGrouped, moeGroupsLength, routeKernel,
} from './moe-kernels.js';
import { loadExperts } from './moe-weights.js';
import { requireKernels } from './require-kernels.js';
import { rowLaunch, siluMulKernel } from './rows-kernels.js';
import { StatelessLayer } from './stateless-layer.js';
import { SwiGlu } from './swiglu.js';

/**
 * A mixture-of-experts feed-forward: router GEMM → `std.moe_route` (ids and weights per row) →
 * experts → plus the shared expert, gated or not (`std.moe_combine`). Experts: from
 * GROUPED_MIN_ENTRIES_PER_EXPERT (row, slot) entries per expert, `std.moe_group` (the entries by
 * expert, on the device) → `std.moe_experts_up` → `std.moe_experts_down` (each chosen expert's
 * weights read once per step for all the rows that chose it) → `std.moe_experts` (Σ weight · y, in
 * slot order); below, `std.moe_experts_up_rowwise` → `std.moe_experts_rowwise` (per row and
 * expert). Both paths give a row the same bits, so its output does not depend on the batch.
 * Tensors, prefix removed: `gate.weight`, `gate.e_score_correction_bias` (sigmoid routing),
 * `experts.*`, `shared_expert.*` + `shared_expert_gate.weight` (Qwen3-Next) or `shared_experts.*`
 * (GLM-5).
 */
export class MoeLayer extends StatelessLayer {
  readonly type = 'moe';
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly options: MoeOptions;
  readonly #w: { router: DevicePtr; bias: DevicePtr; gateUp: DevicePtr; down: DevicePtr; sharedGate: DevicePtr };
  readonly #shared: SwiGlu | undefined;
  /**
   * Scratch: router logits, ids, weights, entries by expert, expert activations h, expert outputs y,
   * routed sum, shared output, shared gate logits.
   */
  readonly #s: {
    logits: DevicePtr; ids: DevicePtr; weights: DevicePtr; groups: DevicePtr; h: DevicePtr; y: DevicePtr; routed: DevicePtr; shared: DevicePtr; gate: DevicePtr;
  };

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: MoeOptions) {
    requireKernels(gpu, 'moe', [
      routeKernel, groupKernel, expertsUpKernel, expertsDownKernel, expertsKernel, expertsUpRowwiseKernel, expertsRowwiseKernel, combineKernel, siluMulKernel,
    ]);
    super(gpu, limits);
    this.options = checkMoe(options);
    const { hidden: D, experts: E, topK } = options;
    this.inputRowBytes = this.outputRowBytes = 4 * D;
    const m = this.memory;
    const R = limits.maxRows;
    try {
      const router = m.upload(readF32(weights, 'gate.weight', [E, D]));
      const bias = options.routing.scoreBias ? m.upload(readF32(weights, 'gate.e_score_correction_bias', [E])) : 0n;
      const experts = loadExperts(weights, options);
      const gateUp = m.upload(experts.gateUp);
      const down = m.upload(experts.down);
      const sh = options.shared;
      this.#shared = sh ? new SwiGlu(m, weights, sh.prefix, D, sh.inter, R) : undefined;
      const sharedGate = sh?.gate ? m.upload(readF32(weights, sh.gate, [1, D])) : 0n;
      this.#w = { router, bias, gateUp, down, sharedGate };
      this.#s = {
        logits: m.alloc(4 * R * E), ids: m.alloc(4 * R * topK), weights: m.alloc(4 * R * topK), h: m.alloc(4 * R * topK * options.inter),
        // The grouped path's scratch, only where maxRows can reach it.
        groups: moeGrouped(R, topK, E) ? m.alloc(4 * moeGroupsLength(R, topK, E)) : 0n, y: moeGrouped(R, topK, E) ? m.alloc(4 * R * topK * D) : 0n, routed: m.alloc(4 * R * D), shared: m.alloc(4 * R * D), gate: m.alloc(4 * R),
      };
    } catch (error) {
      m.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const { gpu, stream, rows, input, output } = step;
    const { hidden: D, experts: E, topK, inter, routing } = this.options;
    const w = this.#w;
    const s = this.#s;
    gpu.gemm({ m: rows, n: E, k: D, a: input, b: w.router, c: s.logits, transB: true, dtype: 'f32', stream });
    gpu.launch(routeKernel, rowLaunch(rows, E, stream), {
      logits: s.logits, bias: w.bias, ids: s.ids, weights: s.weights, rows, experts: E, topK,
      scoring: routing.scoring === 'softmax' ? 0 : 1, normTopK: routing.normTopK ? 1 : 0, nGroup: routing.nGroup, topkGroup: routing.topkGroup, scaling: routing.scaling,
    });
    const shared = this.#shared;
    const routed = shared ? s.routed : output;
    if (moeGrouped(rows, topK, E)) {
      gpu.launch(groupKernel, groupLaunch(E, stream), { ids: s.ids, groups: s.groups, rows, experts: E, topK });
      gpu.launch(expertsUpKernel, expertsUpLaunch(rows, topK, inter, E, stream), {
        input, ids: s.ids, groups: s.groups, gateUp: w.gateUp, h: s.h, rows, hidden: D, inter, experts: E, topK,
      });
      gpu.launch(expertsDownKernel, expertsDownLaunch(rows, topK, D, E, stream), {
        h: s.h, ids: s.ids, groups: s.groups, down: w.down, y: s.y, rows, hidden: D, inter, experts: E, topK,
      });
      gpu.launch(expertsKernel, expertsLaunch(rows, D, stream), { y: s.y, ids: s.ids, weights: s.weights, output: routed, rows, hidden: D, experts: E, topK });
    } else {
      gpu.launch(expertsUpRowwiseKernel, expertsUpRowwiseLaunch(rows, topK, inter, stream), {
        input, ids: s.ids, gateUp: w.gateUp, h: s.h, rows, hidden: D, inter, experts: E, topK,
      });
      gpu.launch(expertsRowwiseKernel, expertsRowwiseLaunch(rows, D, stream), {
        h: s.h, ids: s.ids, weights: s.weights, down: w.down, output: routed, rows, hidden: D, inter, experts: E, topK,
      });
    }
    if (!shared) return;
    shared.run(gpu, stream, input, s.shared, rows);
    if (w.sharedGate !== 0n) gpu.gemm({ m: rows, n: 1, k: D, a: input, b: w.sharedGate, c: s.gate, transB: true, dtype: 'f32', stream });
    gpu.launch(combineKernel, rowLaunch(rows, D, stream), {
      routed: s.routed, shared: s.shared, gate: w.sharedGate !== 0n ? s.gate : 0n, output, rows, hidden: D,
    });
  }
}
