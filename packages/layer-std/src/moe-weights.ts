import { WeightsError, fileOfTensor, readFloats, readLinear, type HostLinear, type Precision, type WeightDtype, type WeightSource } from '@metrale/core';
import type { MoeOptions } from './moe-config.js';

/** One stacked expert weight on the host, in the layout the expert kernels read. */
export interface ExpertMatrices {
  readonly dtype: WeightDtype;
  /** The experts' elements one after another, row-major, little-endian. */
  readonly data: Uint8Array;
  /** FP8: each expert's block-scale grids one after another (see `ExpertWeights`); absent for float weights. */
  readonly scales?: Float32Array;
}

/** The routed experts in the device layout: gate and up rows stacked per expert, then down. */
export interface ExpertWeights {
  /**
   * [experts][2·inter][hidden]: gate rows, then up rows. FP8 scales: per expert the gate's
   * [⌈I/128⌉][⌈D/128⌉] grid then the up's (so the kernels need not care whether I is a whole number
   * of blocks).
   */
  readonly gateUp: ExpertMatrices;
  /** [experts][hidden][inter]; FP8 scales: per expert one [⌈D/128⌉][⌈I/128⌉] grid. */
  readonly down: ExpertMatrices;
  /** Experts held: all, or an expert-parallel rank's plus its zero expert. */
  readonly experts: number;
}

/** Concatenates per-expert parts of one type (gate, up, gate, up, … or down, down, …). */
function concat(parts: readonly HostLinear[], what: string): ExpertMatrices {
  const first = parts[0]!;
  for (const p of parts) {
    if (p.dtype !== first.dtype) {
      throw new WeightsError(`'${p.name}' is ${p.dtype} but '${first.name}' is ${first.dtype}; the MoE's ${what} weights must all have one type`);
    }
  }
  const data = new Uint8Array(parts.reduce((n, p) => n + p.data.length, 0));
  let at = 0;
  for (const p of parts) {
    data.set(p.data, at);
    at += p.data.length;
  }
  if (first.dtype !== 'f8e4m3') return { dtype: first.dtype, data };
  const scales = new Float32Array(parts.reduce((n, p) => n + p.scales!.length, 0));
  at = 0;
  for (const p of parts) {
    scales.set(p.scales!, at);
    at += p.scales!.length;
  }
  return { dtype: 'f8e4m3', data, scales };
}

/**
 * Reads the routed experts in either layout a checkpoint may have: per expert
 * (`experts.{e}.gate_proj.weight` …, what `save_pretrained` writes and Hub checkpoints hold, FP8
 * with their `weight_scale_inv` in the FP8 releases) or fused (`experts.gate_up_proj` [E, 2I, D] and
 * `experts.down_proj` [E, D, I], transformers' in-memory form, float only). Float weights are held in
 * `precision.rows`; FP8 ones stay FP8 when `precision.fp8Weights`, else they are dequantized.
 */
export function loadExperts(weights: WeightSource, o: MoeOptions, precision: Precision): ExpertWeights {
  const { inter: I, hidden: D } = o;
  // Expert parallelism: this rank's experts only, whose fused tensors the rank's view already split.
  const first = o.localExperts?.first ?? 0;
  const E = o.localExperts?.count ?? o.experts;
  const loaded = loadExpertRange(weights, first, E, I, D, precision);
  return o.localExperts ? withZeroExpert(loaded) : loaded;
}

function loadExpertRange(weights: WeightSource, first: number, E: number, I: number, D: number, precision: Precision): ExpertWeights {
  if (weights.has('experts.gate_up_proj')) {
    const rows = precision.rows;
    return {
      gateUp: { dtype: rows, data: readFloats(weights, 'experts.gate_up_proj', [E, 2 * I, D], rows) },
      down: { dtype: rows, data: readFloats(weights, 'experts.down_proj', [E, D, I], rows) },
      experts: E,
    };
  }
  if (!weights.has('experts.0.gate_proj.weight')) {
    throw new WeightsError(`missing tensor 'experts.0.gate_proj.weight' (nor the fused 'experts.gate_up_proj') of the MoE layer`, fileOfTensor(weights, 'experts.0.gate_proj.weight'));
  }
  const gateUp: HostLinear[] = [];
  const down: HostLinear[] = [];
  for (let e = first; e < first + E; e++) {
    gateUp.push(readLinear(weights, `experts.${e}.gate_proj.weight`, [I, D], precision), readLinear(weights, `experts.${e}.up_proj.weight`, [I, D], precision));
    down.push(readLinear(weights, `experts.${e}.down_proj.weight`, [D, I], precision));
  }
  return { gateUp: concat(gateUp, 'gate and up'), down: concat(down, 'down'), experts: E };
}

/**
 * The shared expert (`{prefix}gate_proj`, `up_proj`, `down_proj`, of width `inter`, the routed
 * experts' own) stacked after the routed experts as one more expert, so the expert kernels run it
 * as a chosen expert of every row (`std.moe_shared_slots`); undefined where its weights load in
 * another type than the routed experts' (one FP8, the other not).
 */
export function withSharedExpert(w: ExpertWeights, weights: WeightSource, prefix: string, inter: number, hidden: number, precision: Precision): ExpertWeights | undefined {
  const gateUp = [
    readLinear(weights, `${prefix}gate_proj.weight`, [inter, hidden], precision), readLinear(weights, `${prefix}up_proj.weight`, [inter, hidden], precision),
  ];
  const down = readLinear(weights, `${prefix}down_proj.weight`, [hidden, inter], precision);
  const expert = { gateUp: concat(gateUp, 'shared expert gate and up'), down: concat([down], 'shared expert down') };
  if (expert.gateUp.dtype !== w.gateUp.dtype || expert.down.dtype !== w.down.dtype) return undefined;
  const append = (m: ExpertMatrices, more: ExpertMatrices): ExpertMatrices => {
    const data = new Uint8Array(m.data.length + more.data.length);
    data.set(m.data);
    data.set(more.data, m.data.length);
    if (!m.scales) return { dtype: m.dtype, data };
    const scales = new Float32Array(m.scales.length + more.scales!.length);
    scales.set(m.scales);
    scales.set(more.scales!, m.scales.length);
    return { dtype: m.dtype, data, scales };
  };
  return { gateUp: append(w.gateUp, expert.gateUp), down: append(w.down, expert.down), experts: w.experts + 1 };
}

/** One more expert after the others, all zeros (its scales too): where an expert-parallel rank sends the entries of other ranks' experts. */
function withZeroExpert(w: ExpertWeights): ExpertWeights {
  const grow = (m: ExpertMatrices, experts: number): ExpertMatrices => {
    const data = new Uint8Array(m.data.length + m.data.length / experts);
    data.set(m.data);
    if (!m.scales) return { dtype: m.dtype, data };
    const scales = new Float32Array(m.scales.length + m.scales.length / experts);
    scales.set(m.scales);
    return { dtype: m.dtype, data, scales };
  };
  return { gateUp: grow(w.gateUp, w.experts), down: grow(w.down, w.experts), experts: w.experts + 1 };
}
