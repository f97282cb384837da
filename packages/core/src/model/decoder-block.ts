import type { LayerStep, TransformerLayer } from '../contract/layer.js';
import { floatBytes, type FloatDtype } from '../device/dtype.js';
import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend } from '../device/gpu-backend.js';
import { InvalidArgumentError } from '../errors.js';
import { addsResidual, type AddsResidual } from './adds-residual.js';
import type { BlockScratch } from './block-scratch.js';
import type { BlockState } from './block-state.js';
import { CompositeLayer } from './composite-layer.js';
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
  /**
   * Whether a branch that begins with an `AddsResidual` layer (a norm) after an add (the branch
   * before's, or with `pairIn` the block before's) takes that add into the layer's pass (default
   * true; the same bits either way).
   */
  readonly fuseAdds?: boolean;
  /**
   * Rows in are pairs: the residual stream and the output of the block before's last branch, whose
   * add this block takes at its start (inside its first part where that is an `AddsResidual`
   * layer). A step's pair rows are its `rows` stream rows, then its `rows` rows of that output, so
   * a pair row is two stream rows wide. Default false: rows in are the stream.
   */
  readonly pairIn?: boolean;
  /**
   * Rows out are pairs: the stream and the last branch's output, left for the next block to add.
   * Default false: the block adds them and its rows out are the stream.
   */
  readonly pairOut?: boolean;
  /** Shared by every block of a model; holds at least `maxRows` rows of the widest sub-layer row. */
  readonly scratch: BlockScratch;
  /** Element type of the residual stream (default f32). */
  readonly rowDtype?: FloatDtype;
}

/**
 * Sub-layers and residual adds presented to the driver as one `TransformerLayer` (README.md). The
 * block owns its sub-layers (dispose frees them) but not the shared scratch. Where a branch begins
 * with an `AddsResidual` layer, the add before it (the branch before's, or with `pairIn` the block
 * before's) runs inside that layer (`fuseAdds`); with `pairOut` the block leaves its last add to the
 * next block.
 */
export class DecoderBlock extends CompositeLayer {
  readonly type: string;
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  /** Each branch's parts; `adds`: its first part takes the add of the branch before. */
  readonly #branches: readonly { readonly first: number; readonly count: number; readonly adds?: AddsResidual }[];
  readonly #add: ResidualAdd;
  readonly #scratch: BlockScratch;
  readonly #rowDtype: FloatDtype;
  /** Bytes of a stream row. */
  readonly #width: number;
  readonly #pairIn: boolean;
  readonly #pairOut: boolean;

  constructor(options: DecoderBlockOptions) {
    const { branches, scratch } = options;
    // Sub-layers in branch order, flattened: the order of `BlockState.parts`.
    super(branches.flat());
    this.type = options.type ?? 'decoder-block';
    if (branches.length === 0 || branches.some((b) => b.length === 0)) {
      throw new InvalidArgumentError(`${this.type}: a decoder block needs at least one branch, and every branch at least one layer`);
    }
    const width = branches[0]![0]!.inputRowBytes;
    this.#width = width;
    this.#pairIn = options.pairIn === true;
    this.#pairOut = options.pairOut === true;
    this.inputRowBytes = width * (this.#pairIn ? 2 : 1);
    this.outputRowBytes = width * (this.#pairOut ? 2 : 1);
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
      const head = chain[0]!;
      const adds = (b > 0 || this.#pairIn) && options.fuseAdds !== false && addsResidual(head) ? head : undefined;
      const range = { first: at, count: chain.length, ...(adds ? { adds } : {}) };
      at += chain.length;
      return range;
    });
    this.#rowDtype = options.rowDtype ?? 'f32';
    const element = floatBytes(this.#rowDtype);
    if (width % element !== 0 || width > scratch.rowBytes) {
      throw this.#mismatch(`the residual stream's ${width}-byte rows must be whole ${this.#rowDtype} values and fit the scratch rows (${scratch.rowBytes} bytes)`);
    }
    this.#add = options.add;
    this.#scratch = scratch;
  }

  #mismatch(why: string): InvalidArgumentError {
    return new InvalidArgumentError(`${this.type}: ${why}`);
  }

  forward(step: LayerStep<BlockState>): void {
    this.alive('forward', 'block');
    if (step.rows > this.#scratch.maxRows) throw new InvalidArgumentError(`${this.type}: a step of ${step.rows} rows exceeds the scratch's ${this.#scratch.maxRows} rows`);
    const s = this.#scratch;
    const half = BigInt(step.rows * this.#width);
    const count = (step.rows * this.#width) / floatBytes(this.#rowDtype);
    const other = (p: DevicePtr) => (p === s.a ? s.b : s.a);
    let stream = step.input;
    // The output of the branch (or block) before, not yet added to the stream.
    let pending: DevicePtr | undefined = this.#pairIn ? step.input + half : undefined;
    this.#branches.forEach(({ first, count: n, adds }, b) => {
      const last = b === this.#branches.length - 1;
      const passOn = last && this.#pairOut;
      // The stream a pair leaves with is the output's first half.
      const sumAt = passOn ? step.output : s.residual;
      let src = stream;
      let j = 0;
      if (pending !== undefined) {
        if (adds) {
          // Its output goes where neither addend is.
          src = passOn && n === 1 ? step.output + half : other(pending);
          adds.forwardAdded(this.partStep(step, first, sumAt, src), { a: stream, b: pending, sum: sumAt });
          j = 1;
        } else {
          step.section?.('residual-add');
          this.#add.add(step.gpu, step.stream, stream, pending, sumAt, count, this.#rowDtype);
          src = sumAt;
        }
        stream = sumAt;
        pending = undefined;
      } else if (passOn) {
        // Nothing added before the one branch: the stream leaves as it came.
        step.gpu.copyDeviceAsync(step.output, stream, Number(half), step.stream);
      }
      for (; j < n; j++) {
        const dst = passOn && j === n - 1 ? step.output + half : other(src);
        this.runPart(step, first + j, src, dst);
        src = dst;
      }
      if (passOn) return;
      if (!last) {
        // Added at the next branch's start.
        pending = src;
        return;
      }
      step.section?.('residual-add');
      this.#add.add(step.gpu, step.stream, stream, src, step.output, count, this.#rowDtype);
    });
  }
}
