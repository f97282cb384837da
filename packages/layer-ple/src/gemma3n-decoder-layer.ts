import { CompositeLayer, FLOAT_DTYPE_CODE, InvalidArgumentError, floatBytes, flatLaunch, rowLaunch, type BlockState, type DevicePtr, type LayerLimits, type LayerStep, type TransformerLayer } from '@metrale/core';
import type { AltUpCorrectLayer, AltUpPredictLayer } from './altup-layers.js';
import { copyKernel, pleAddKernel, sum3Kernel } from './gemma3n-kernels.js';
import type { Gemma3nScratch } from './gemma3n-scratch.js';
import { requireGemma3nKernels } from './gemma3n-stateless.js';
import type { LaurelLayer } from './laurel-layer.js';

/** The parts of one Gemma 3n decoder layer; the model's builder makes them (std layers for norms, attention and MLP). */
export interface Gemma3nDecoderParts {
  readonly predict: AltUpPredictLayer;
  /** `input_layernorm`, `post_attention_layernorm`, `pre_feedforward_layernorm`, `post_feedforward_layernorm`: rows of H. */
  readonly inputNorm: TransformerLayer<any>;
  readonly laurel: LaurelLayer;
  readonly attention: TransformerLayer<any>;
  readonly postAttentionNorm: TransformerLayer<any>;
  readonly preFeedforwardNorm: TransformerLayer<any>;
  readonly mlp: TransformerLayer<any>;
  readonly postFeedforwardNorm: TransformerLayer<any>;
  readonly correct: AltUpCorrectLayer;
  /** The per-layer input path (layer-ple's `PleLayer`): rows of H in and out, of the scratch's row type. */
  readonly ple: TransformerLayer<any>;
}

export interface Gemma3nDecoderOptions {
  /** Shown in errors (`gemma3n_text layer 3 (sliding_attention)`). */
  readonly type: string;
  readonly limits: LayerLimits;
  readonly scratch: Gemma3nScratch;
  /** `altup.correct_output_scale` [H] (row-type values in f32), or undefined when `altup_correct_scale` is false. */
  readonly correctOutputScale?: Float32Array;
}

const ORDER = ['predict', 'inputNorm', 'laurel', 'attention', 'postAttentionNorm', 'preFeedforwardNorm', 'mlp', 'postFeedforwardNorm', 'correct', 'ple'] as const;

/**
 * One Gemma 3n decoder layer (`Gemma3nTextDecoderLayer.forward`) over rows of the n AltUp streams
 * (n·H in, n·H out), from its parts:
 *   pred = predict(s); a = pred_k; an = input_layernorm(a)
 *   h = (a + post_attention_layernorm(attention(an)) + laurel(an)) / √2
 *   o2 = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))
 *   corr = correct(pred, o2); corr_1 … corr_{n−1} += ple(corr_k · correct_output_scale)
 * The layer owns its parts (dispose frees them), not the shared scratch. Its hooks are its parts'
 * (the attention's cache and room checks, the PLE's prestage), each with its own sub-state.
 */
export class Gemma3nDecoderLayer extends CompositeLayer {
  readonly type: string;
  readonly inputRowBytes: number;
  readonly outputRowBytes: number;
  readonly #parts: Gemma3nDecoderParts;
  readonly #o: Gemma3nDecoderOptions;
  /** The device copy of correct_output_scale, or 0n. */
  readonly #scale: DevicePtr;

  constructor(parts: Gemma3nDecoderParts, options: Gemma3nDecoderOptions) {
    super(ORDER.map((k) => parts[k]));
    this.type = options.type;
    requireGemma3nKernels(options.scratch.gpu, this.type, [copyKernel, sum3Kernel, pleAddKernel]);
    this.#parts = parts;
    this.#o = options;
    const s = options.scratch;
    const row = floatBytes(s.rows) * s.hidden;
    // Rows in and out, in rows of H: predict n → n, correct n + 1 → n, every other part (the PLE's included) 1 → 1.
    const widths = (k: (typeof ORDER)[number]) => (k === 'predict' ? [s.streams, s.streams] : k === 'correct' ? [s.streams + 1, s.streams] : [1, 1]);
    const wrong = ORDER.flatMap((k) => {
      const [i, o] = widths(k).map((w) => w * row) as [number, number];
      const p = parts[k];
      return p.inputRowBytes === i && p.outputRowBytes === o ? [] : [`${k} has ${p.inputRowBytes} → ${p.outputRowBytes}, not ${i} → ${o}`];
    });
    if (wrong.length) {
      throw new InvalidArgumentError(
        `${this.type}: its parts' rows do not match the scratch's (${s.streams} streams of ${s.hidden} ${s.rows} values; bytes per row in → out): ` +
          `${wrong.join('; ')}. Build every part, the 'ple' layer included, with the model's precision (rows ${s.rows})`,
      );
    }
    this.inputRowBytes = this.outputRowBytes = row * s.streams;
    if (options.correctOutputScale && options.correctOutputScale.length !== s.hidden) {
      throw new InvalidArgumentError(`${this.type}: correct_output_scale has ${options.correctOutputScale.length} values, not hidden_size ${s.hidden}`);
    }
    const gpu = s.gpu;
    this.#scale = options.correctOutputScale ? gpu.alloc(4 * s.hidden) : 0n;
    if (options.correctOutputScale) gpu.upload(this.#scale, options.correctOutputScale);
  }

  forward(step: LayerStep<BlockState>): void {
    this.alive('forward');
    const s = this.#o.scratch;
    const { rows, gpu, stream } = step;
    if (rows > s.maxRows) throw new InvalidArgumentError(`${this.type}: a step of ${rows} rows exceeds the scratch's ${s.maxRows} rows`);
    const [H, n] = [s.hidden, s.streams];
    const k = this.#parts.predict.options.active;
    const dtype = FLOAT_DTYPE_CODE[s.rows];
    const bytes = floatBytes(s.rows);
    const run = (name: (typeof ORDER)[number], input: DevicePtr, output: DevicePtr) => this.runPart(step, ORDER.indexOf(name), input, output);
    const copy = (src: DevicePtr, srcStride: number, dst: DevicePtr, dstStride: number, width: number, dstDtype = dtype, scale: DevicePtr = 0n) =>
      gpu.launch(copyKernel, rowLaunch(rows, width, stream), { src, srcStride, dst, dstStride, scale, rows, hidden: width, srcDtype: dtype, dstDtype });
    const sum = (a: DevicePtr, b: DevicePtr, c: DevicePtr, out: DevicePtr, scale: number) =>
      gpu.launch(sum3Kernel, flatLaunch(rows * H, stream), { a, b, c, out, count: rows * H, scale, dtype });

    run('predict', step.input, s.pred);
    copy(s.pred + BigInt(k * H * bytes), n * H, s.active, H, H);
    run('inputNorm', s.active, s.normed);
    run('laurel', s.normed, s.laurel);
    run('attention', s.normed, s.a);
    run('postAttentionNorm', s.a, s.b);
    sum(s.active, s.b, s.laurel, s.residual, Math.SQRT1_2);
    run('preFeedforwardNorm', s.residual, s.a);
    run('mlp', s.a, s.b);
    run('postFeedforwardNorm', s.b, s.a);
    sum(s.residual, s.a, 0n, s.b, 1);
    copy(s.pred, n * H, s.correctIn, (n + 1) * H, n * H);
    copy(s.b, H, s.correctIn + BigInt(n * H * bytes), (n + 1) * H, H);
    run('correct', s.correctIn, step.output);
    copy(step.output + BigInt(k * H * bytes), n * H, s.pleIn, H, H, dtype, this.#scale);
    run('ple', s.pleIn, s.pleOut);
    step.section?.('ple-add');
    gpu.launch(pleAddKernel, rowLaunch(rows, H, stream), { streams: step.output, y: s.pleOut, rows, hidden: H, n, dtype });
  }

  protected override disposeOwn(): void {
    if (this.#scale !== 0n) this.#o.scratch.gpu.free(this.#scale);
  }
}
