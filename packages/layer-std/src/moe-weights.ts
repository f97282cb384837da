import { readF32, WeightsError, fileOfTensor, type WeightSource } from '@metrale/core';
import type { MoeOptions } from './moe-config.js';

/** The routed experts in the device layout: gate and up rows stacked per expert, then down. */
export interface ExpertWeights {
  /** [experts][2·inter][hidden]. */
  readonly gateUp: Float32Array;
  /** [experts][hidden][inter]. */
  readonly down: Float32Array;
}

/**
 * Reads the routed experts in either layout a checkpoint may have: per expert
 * (`experts.{e}.gate_proj.weight` …, what `save_pretrained` writes and Hub checkpoints hold) or
 * fused (`experts.gate_up_proj` [E, 2I, D] and `experts.down_proj` [E, D, I], transformers' in-memory
 * form). One expert at a time is held as read.
 */
export function loadExperts(weights: WeightSource, o: MoeOptions): ExpertWeights {
  const { experts: E, inter: I, hidden: D } = o;
  if (weights.has('experts.gate_up_proj')) {
    return { gateUp: readF32(weights, 'experts.gate_up_proj', [E, 2 * I, D]), down: readF32(weights, 'experts.down_proj', [E, D, I]) };
  }
  if (!weights.has('experts.0.gate_proj.weight')) {
    throw new WeightsError(`missing tensor 'experts.0.gate_proj.weight' (nor the fused 'experts.gate_up_proj') of the MoE layer`, fileOfTensor(weights, 'experts.0.gate_proj.weight'));
  }
  const gateUp = new Float32Array(E * 2 * I * D);
  const down = new Float32Array(E * D * I);
  for (let e = 0; e < E; e++) {
    gateUp.set(readF32(weights, `experts.${e}.gate_proj.weight`, [I, D]), e * 2 * I * D);
    gateUp.set(readF32(weights, `experts.${e}.up_proj.weight`, [I, D]), (e * 2 + 1) * I * D);
    down.set(readF32(weights, `experts.${e}.down_proj.weight`, [D, I]), e * D * I);
  }
  return { gateUp, down };
}
