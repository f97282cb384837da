import type { LayerStep, TransformerLayer } from '../contract/layer.js';
import type { LayerState } from '../contract/layer-state.js';
import type { DevicePtr } from '../device/device-ptr.js';
import { InvalidArgumentError } from '../errors.js';
import type { BlockState } from './block-state.js';
import { compositeHooks } from './composite-hooks.js';

/**
 * A layer made of sub-layers that its own `forward` runs (core's `DecoderBlock`, a model's own
 * decoder layer such as Gemma 3n's): their states side by side in a `BlockState`, the contract's
 * hooks forwarded to the parts that have them (`compositeHooks`), each part stepping with its own
 * state. It owns its parts: `dispose` frees them, then what `disposeOwn` frees.
 */
export abstract class CompositeLayer implements TransformerLayer<BlockState> {
  abstract readonly type: string;
  abstract readonly inputRowBytes: number;
  abstract readonly outputRowBytes: number;
  /** The parts in the order of `BlockState.parts`. */
  readonly layers: readonly TransformerLayer<LayerState>[];
  #disposed = false;

  declare decodePrestage?: TransformerLayer<BlockState>['decodePrestage'];
  declare decodePrestageRearm?: TransformerLayer<BlockState>['decodePrestageRearm'];
  declare checkReplayRoom?: TransformerLayer<BlockState>['checkReplayRoom'];
  declare syncReplayedStep?: TransformerLayer<BlockState>['syncReplayedStep'];
  declare gdnWoaStashSeqFloats?: TransformerLayer<BlockState>['gdnWoaStashSeqFloats'];
  declare gdnWoaBind?: TransformerLayer<BlockState>['gdnWoaBind'];
  declare gdnCarrySeqFloats?: TransformerLayer<BlockState>['gdnCarrySeqFloats'];
  declare gdnCarryBind?: TransformerLayer<BlockState>['gdnCarryBind'];
  declare gdnVerifyRunBatched?: TransformerLayer<BlockState>['gdnVerifyRunBatched'];
  declare gdnFoldAccepted?: TransformerLayer<BlockState>['gdnFoldAccepted'];
  declare kvPageBytes?: TransformerLayer<BlockState>['kvPageBytes'];
  declare kvBind?: TransformerLayer<BlockState>['kvBind'];
  declare kvUnbind?: TransformerLayer<BlockState>['kvUnbind'];
  declare stateSnapshotBytes?: TransformerLayer<BlockState>['stateSnapshotBytes'];
  declare stateSnapshotBind?: TransformerLayer<BlockState>['stateSnapshotBind'];
  declare saveStateSnapshot?: TransformerLayer<BlockState>['saveStateSnapshot'];
  declare resumeAt?: TransformerLayer<BlockState>['resumeAt'];

  constructor(layers: readonly TransformerLayer<any>[]) {
    this.layers = layers as TransformerLayer<LayerState>[];
    Object.assign(this, compositeHooks(this.layers));
  }

  openState(slot: number): BlockState {
    this.alive('openState');
    return { slot, parts: this.layers.map((l) => l.openState(slot)) };
  }

  closeState(state: BlockState): void {
    this.layers.forEach((l, i) => l.closeState(state.parts[i]!));
  }

  inspectState(state: BlockState): unknown {
    return this.layers.map((l, i) => l.inspectState?.(state.parts[i]!) ?? null);
  }

  abstract forward(step: LayerStep<BlockState>): void;

  /** Runs part `i` over the step's rows from `input` into `output`, with its own states (a profiler section named after it). */
  protected runPart(step: LayerStep<BlockState>, i: number, input: DevicePtr, output: DevicePtr): void {
    this.layers[i]!.forward(this.partStep(step, i, input, output));
  }

  /** The step part `i` sees (its own states), its profiler section opened. */
  protected partStep(step: LayerStep<BlockState>, i: number, input: DevicePtr, output: DevicePtr): LayerStep<LayerState> {
    step.section?.(this.layers[i]!.type);
    const states = step.host.states.map((st) => st?.parts[i]);
    return { ...step, input, output, host: { ...step.host, states } } as LayerStep<LayerState>;
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const l of this.layers) l.dispose();
    this.disposeOwn();
  }

  /** Frees what the layer holds besides its parts (nothing by default). */
  protected disposeOwn(): void {}

  /** Throws when the layer was disposed (`where`: the call, in the message). */
  protected alive(where: string, noun = 'layer'): void {
    if (this.#disposed) throw new InvalidArgumentError(`${this.type}: ${where} on a disposed ${noun}`);
  }
}
