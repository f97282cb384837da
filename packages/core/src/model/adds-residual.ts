import type { LayerStep, TransformerLayer } from '../contract/layer.js';
import type { LayerState } from '../contract/layer-state.js';
import type { DevicePtr } from '../device/device-ptr.js';

/** The residual add a sub-layer takes into its own pass: `sum = a + b`, as `ResidualAdd` computes it. */
export interface ResidualOperands {
  readonly a: DevicePtr;
  readonly b: DevicePtr;
  /** Where the sum goes (the residual stream the next branch adds to); may alias `a` or `b`. */
  readonly sum: DevicePtr;
}

/**
 * A sub-layer that can begin with the residual add before it (a norm: vLLM's fused add + RMSNorm).
 * `forwardAdded` writes `sum` bit for bit as the block's `ResidualAdd` would (f32 sum of the two
 * stored values, rounded once to the row type), then the layer's output from that sum, as if the
 * block had run the add and then `forward` with `step.input = sum`. Core's `DecoderBlock` calls it
 * where a branch begins with such a layer after an add (a branch after the first, or with `pairIn`
 * the first): one launch fewer an add.
 */
export interface AddsResidual {
  forwardAdded(step: LayerStep<LayerState>, residual: ResidualOperands): void;
}

/** Whether `layer` can take the residual add before it (`AddsResidual`). */
export function addsResidual(layer: TransformerLayer<any>): layer is TransformerLayer<any> & AddsResidual {
  return typeof (layer as Partial<AddsResidual>).forwardAdded === 'function';
}
