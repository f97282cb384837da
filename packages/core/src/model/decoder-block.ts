import type { LayerStep, TransformerLayer } from '../contract/layer.js';
import type { LayerState } from '../contract/layer-state.js';
import type { DevicePtr } from '../device/device-ptr.js';
import { floatBytes, type FloatDtype } from '../device/dtype.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { InvalidArgumentError } from '../errors.js';
import type { BlockScratch } from './block-scratch.js';
import type { BlockState } from './block-state.js';
import { compositeHooks } from './composite-hooks.js';
import type { ResidualAdd } from './residual-add.js';

export interface DecoderBlockOptions {
  readonly gpu: GpuBackend;
  /** Shown in errors and by `type` (e.g. `qwen3_next.linear_attention`). */
  readonly type?: string;
  /**
   * Each branch is a chain of sub-layers over the residual stream x, added back: x ← x + chain(x).
   * Qwen3-Next: [[input_layernorm, mixer], [post_attention_layernorm, mlp]].
   */
  readonly branches: readonly (readonly TransformerLayer<any>[])[];
  readonly add: ResidualAdd;
  /** Shared by every block of a model; holds at least `maxRows` rows of the widest sub-layer row. */
  readonly scratch: BlockScratch;
  /** Element type of the residual stream (default f32). */
  readonly rowDtype?: FloatDtype;
}

/**
 * Sub-layers and residual adds presented to the driver as one `TransformerLayer` (README.md). The
 * block owns its sub-layers (dispose frees them) but not the shared scratch.
 */
export class DecoderBlock implements TransformerLayer<BlockState> {
  readonly type: string;
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  /** Sub-layers in branch order, flattened: the order of `BlockState.parts`. */
  readonly layers: readonly TransformerLayer<LayerState>[];
  readonly #branches: readonly { readonly first: number; readonly count: number }[];
  readonly #add: ResidualAdd;
  readonly #scratch: BlockScratch;
  readonly #rowDtype: FloatDtype;
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
  declare stateSnapshotBytes?: TransformerLayer<BlockState>['stateSnapshotBytes'];
  declare stateSnapshotBind?: TransformerLayer<BlockState>['stateSnapshotBind'];
  declare saveStateSnapshot?: TransformerLayer<BlockState>['saveStateSnapshot'];
  declare resumeAt?: TransformerLayer<BlockState>['resumeAt'];

  constructor(options: DecoderBlockOptions) {
    const { branches, scratch } = options;
    this.type = options.type ?? 'decoder-block';
    if (branches.length === 0 || branches.some((b) => b.length === 0)) {
      throw new InvalidArgumentError(`${this.type}: a decoder block needs at least one branch, and every branch at least one layer`);
    }
    const first = branches[0]![0]!;
    this.inputRowBytes = this.outputRowBytes = first.inputRowBytes;
    const width = this.inputRowBytes;
    let at = 0;
    this.#branches = branches.map((chain, b) => {
      if (chain[0]!.inputRowBytes !== width) throw this.#mismatch(`branch ${b} starts with ${chain[0]!.type}, which reads ${chain[0]!.inputRowBytes}-byte rows, but the residual stream has ${width}-byte rows`);
      chain.forEach((l, j) => {
        if (j > 0 && l.inputRowBytes !== chain[j - 1]!.outputRowBytes) {
          throw this.#mismatch(`in branch ${b}, ${l.type} reads ${l.inputRowBytes}-byte rows but ${chain[j - 1]!.type} writes ${chain[j - 1]!.outputRowBytes}-byte rows`);
        }
        if (l.outputRowBytes > scratch.rowBytes) throw this.#mismatch(`${l.type} writes ${l.outputRowBytes}-byte rows, wider than the scratch rows (${scratch.rowBytes} bytes)`);
      });
      const last = chain[chain.length - 1]!;
      if (last.outputRowBytes !== width) throw this.#mismatch(`branch ${b} ends with ${last.type}, which writes ${last.outputRowBytes}-byte rows, but the residual stream has ${width}-byte rows`);
      const range = { first: at, count: chain.length };
      at += chain.length;
      return range;
    });
    this.#rowDtype = options.rowDtype ?? 'f32';
    const element = floatBytes(this.#rowDtype);
    if (width % element !== 0 || width > scratch.rowBytes) {
      throw this.#mismatch(`the residual stream's ${width}-byte rows must be whole ${this.#rowDtype} values and fit the scratch rows (${scratch.rowBytes} bytes)`);
    }
    this.layers = branches.flat() as TransformerLayer<LayerState>[];
    this.#add = options.add;
    this.#scratch = scratch;
    Object.assign(this, compositeHooks(this.layers));
  }

  #mismatch(why: string): InvalidArgumentError {
    return new InvalidArgumentError(`${this.type}: ${why}`);
  }

  openState(slot: number): BlockState {
    this.#alive('openState');
    return { slot, parts: this.layers.map((l) => l.openState(slot)) };
  }

  closeState(state: BlockState): void {
    this.layers.forEach((l, i) => l.closeState(state.parts[i]!));
  }

  inspectState(state: BlockState): unknown {
    return this.layers.map((l, i) => l.inspectState?.(state.parts[i]!) ?? null);
  }

  forward(step: LayerStep<BlockState>): void {
    this.#alive('forward');
    if (step.rows > this.#scratch.maxRows) throw new InvalidArgumentError(`${this.type}: a step of ${step.rows} rows exceeds the scratch's ${this.#scratch.maxRows} rows`);
    const s = this.#scratch;
    const count = (step.rows * this.inputRowBytes) / floatBytes(this.#rowDtype);
    let stream = step.input;
    this.#branches.forEach(({ first, count: n }, b) => {
      let src = stream;
      for (let j = 0; j < n; j++) {
        const dst = j % 2 === 0 ? s.a : s.b;
        const layer = this.layers[first + j]!;
        step.section?.(layer.type);
        layer.forward(this.#subStep(step, first + j, src, dst));
        src = dst;
      }
      // The last branch writes the block's output; the others the stream (in place after the first).
      const out = b === this.#branches.length - 1 ? step.output : s.residual;
      step.section?.('residual-add');
      this.#add.add(step.gpu, step.stream, stream, src, out, count, this.#rowDtype);
      stream = out;
    });
  }

  /** The step as sub-layer `i` sees it: its own states, the buffers the block chose. */
  #subStep(step: LayerStep<BlockState>, i: number, input: DevicePtr, output: DevicePtr): LayerStep<LayerState> {
    const states = step.host.states.map((st) => st?.parts[i]);
    return { ...step, input, output, host: { ...step.host, states } };
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const l of this.layers) l.dispose();
  }

  #alive(where: string): void {
    if (this.#disposed) throw new InvalidArgumentError(`${this.type}: ${where} on a disposed block`);
  }
}
