// A tiny Gemma 3n text config and random weights for the PLE layer, in memory (MemoryWeightSource)
// or as a safetensors file. Values are scaled so every stage is O(1): table rows ~ 1/sqrt(P) (the
// lookup multiplies by sqrt(P)), projections ~ 1/sqrt(fan-in), norm weights around 1.
import {
  MemoryWeightSource,
  SeededRandom,
  encodeSafetensors,
  tensorOf,
  toBf16,
  type HostTensor,
  type LayerLimits,
} from '@metrale/core';
import { f32ToF16Bits } from '@metrale/layer-ple';

export type Dtype = 'f32' | 'bf16' | 'f16';

export interface PleDims {
  readonly hidden: number;
  readonly perLayer: number;
  readonly layers: number;
  readonly vocab: number;
  readonly tableVocab: number;
  readonly layerIndex: number;
  readonly eps?: number;
}

export const SMALL: PleDims = { hidden: 32, perLayer: 8, layers: 3, vocab: 48, tableVocab: 40, layerIndex: 1 };

export interface PleSetup {
  readonly dims: PleDims;
  readonly config: Record<string, unknown>;
  readonly tensors: HostTensor[];
  readonly weights: MemoryWeightSource;
  readonly layerIndex: number;
}

function encode(values: Float32Array, shape: number[], name: string, dtype: Dtype): HostTensor {
  if (dtype === 'f32') return tensorOf(name, values, shape);
  if (dtype === 'bf16') return tensorOf(name, toBf16(values), shape, 'bf16');
  return tensorOf(name, Uint16Array.from(values, (v) => f32ToF16Bits(v)), shape, 'f16');
}

/** The HF config fields the layer reads (and a few it ignores, as a real config has). */
export function pleConfig(d: PleDims): Record<string, unknown> {
  return {
    model_type: 'gemma3n_text',
    hidden_size: d.hidden,
    hidden_size_per_layer_input: d.perLayer,
    num_hidden_layers: d.layers,
    vocab_size: d.vocab,
    vocab_size_per_layer_input: d.tableVocab,
    rms_norm_eps: d.eps ?? 1e-6,
    hidden_activation: 'gelu_pytorch_tanh',
    altup_num_inputs: 4,
    laurel_rank: 4,
  };
}

/**
 * Random weights for decoder layer `d.layerIndex` (and, with `allLayers`, for every layer, so
 * several layers can share one cache), with the table, the embedding and the other weights (the
 * projections and norms: `weights`) in the given dtypes.
 */
export function pleSetup(seed = 1, d: PleDims = SMALL, opts: { table?: Dtype; embed?: Dtype; weights?: Dtype; allLayers?: boolean; prefix?: string } = {}): PleSetup {
  const r = new SeededRandom(seed);
  const { hidden: D, perLayer: P, layers: L, vocab: V, tableVocab: Vp } = d;
  const pre = opts.prefix ?? '';
  const w = opts.weights ?? 'f32';
  const tensors: HostTensor[] = [
    encode(r.normals(V * D, 0.5), [V, D], `${pre}embed_tokens.weight`, opts.embed ?? 'f32'),
    encode(r.normals(Vp * L * P, 1 / Math.sqrt(P)), [Vp, L * P], `${pre}embed_tokens_per_layer.weight`, opts.table ?? 'f32'),
    encode(r.normals(L * P * D, 1 / Math.sqrt(D)), [L * P, D], `${pre}per_layer_model_projection.weight`, w),
    encode(Float32Array.from({ length: P }, () => 0.5 + r.float()), [P], `${pre}per_layer_projection_norm.weight`, w),
  ];
  const layers = opts.allLayers ? Array.from({ length: L }, (_, i) => i) : [d.layerIndex];
  for (const l of layers) {
    tensors.push(
      encode(r.normals(P * D, 1 / Math.sqrt(D)), [P, D], `${pre}layers.${l}.per_layer_input_gate.weight`, w),
      encode(r.normals(D * P, 1 / Math.sqrt(P)), [D, P], `${pre}layers.${l}.per_layer_projection.weight`, w),
      encode(Float32Array.from({ length: D }, () => 0.5 + r.float()), [D], `${pre}layers.${l}.post_per_layer_input_norm.weight`, w),
    );
  }
  return { dims: d, config: pleConfig(d), tensors, weights: new MemoryWeightSource('ple test weights', tensors), layerIndex: d.layerIndex };
}

/** The setup's tensors as safetensors bytes. */
export function setupBytes(setup: PleSetup): Uint8Array {
  return encodeSafetensors(setup.tensors);
}

export const LIMITS: LayerLimits = { maxSeqs: 4, maxSeqLen: 64, maxBatch: 4, maxK: 3, maxRows: 24 };
