// A tiny Gemma 3n text config and random AltUp / Laurel weights for the plugin's Gemma 3n layer
// types, named as in the text model with its prefix removed (`layers.l.altup.*`, `layers.l.laurel.*`,
// `altup_projections.*`, `altup_unembed_projections.*`). Scaled so every stage is O(1).
import { MemoryWeightSource, SeededRandom, tensorOf } from '@metrale/core';

export interface Gemma3nSetup {
  readonly config: Record<string, unknown>;
  readonly weights: MemoryWeightSource;
  readonly layerIndex: number;
}

/** hidden 24, 4 streams with the active one at 1 (as the tiny fixture: an adapter assuming 0 fails), Laurel rank 6, decoder layer 1. */
export function gemma3nSetup(seed: number, dims = { hidden: 24, streams: 4, active: 1, rank: 6, layerIndex: 1 }): Gemma3nSetup {
  const { hidden: H, streams: n, rank: r, layerIndex: l } = dims;
  const random = new SeededRandom(seed);
  const t = (name: string, shape: number[], scale: number, offset = 0) =>
    tensorOf(name, random.normals(shape.reduce((a, b) => a * b, 1), scale).map((v) => offset + v), shape);
  const tensors = [
    t(`layers.${l}.altup.router_norm.weight`, [H], 0.3, 1),
    t(`layers.${l}.altup.modality_router.weight`, [n, H], 0.5),
    t(`layers.${l}.altup.prediction_coefs.weight`, [n * n, n], 0.4),
    t(`layers.${l}.altup.correction_coefs.weight`, [n, n], 0.4),
    t(`layers.${l}.laurel.linear_left.weight`, [r, H], 1 / Math.sqrt(H)),
    t(`layers.${l}.laurel.linear_right.weight`, [H, r], 1 / Math.sqrt(r)),
    t(`layers.${l}.laurel.post_laurel_norm.weight`, [H], 0.3, 1),
    ...Array.from({ length: n - 1 }, (_, i) => t(`altup_projections.${i}.weight`, [H, H], 1 / Math.sqrt(H))),
    ...Array.from({ length: n - 1 }, (_, i) => t(`altup_unembed_projections.${i}.weight`, [H, H], 1 / Math.sqrt(H))),
  ];
  const config = {
    model_type: 'gemma3n_text', hidden_size: H, num_hidden_layers: l + 2, vocab_size: 64, altup_num_inputs: n, altup_active_idx: dims.active,
    laurel_rank: r, rms_norm_eps: 1e-6, hidden_activation: 'gelu_pytorch_tanh',
  };
  return { config, weights: new MemoryWeightSource('tiny gemma3n altup/laurel', tensors), layerIndex: l };
}
