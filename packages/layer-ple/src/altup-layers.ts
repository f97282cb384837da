import {
  FLOAT_DTYPE_CODE, WeightsError, readF32, rowLaunch, type GpuBackend, type Kernel, type LayerLimits, type LayerState, type LayerStep, type Precision, type WeightSource,
} from '@metrale/core';
import { ALTUP_MAX_STREAMS, altupCorrectKernel, altupPredictKernel } from './altup-kernels.js';
import { asRowValues, Gemma3nRowLayer, requireGemma3nKernels, rowTypeOf } from './gemma3n-stateless.js';

/** A decoder layer's AltUp (`Gemma3nTextAltUp`): n streams of `hidden`, the active one `active`. */
export interface AltUpOptions {
  readonly hidden: number;
  /** n: `altup_num_inputs`. */
  readonly streams: number;
  /** k: `altup_active_idx`. */
  readonly active: number;
  /** `rms_norm_eps` of `router_norm`. */
  readonly eps: number;
  readonly precision?: Precision;
}

function checkAltUp(gpu: GpuBackend, o: AltUpOptions): void {
  if (!Number.isSafeInteger(o.streams) || o.streams < 2) throw new WeightsError(`config: altup_num_inputs must be an integer ≥ 2, got ${o.streams}`);
  if (!Number.isSafeInteger(o.active) || o.active < 0 || o.active >= o.streams) throw new WeightsError(`config: altup_active_idx must be in 0..${o.streams - 1}, got ${o.active}`);
  // The CUDA kernels keep a row's n modalities and n² coefficients in shared memory.
  if (gpu.kind !== 'cpu' && o.streams > ALTUP_MAX_STREAMS) {
    throw new WeightsError(`config: altup_num_inputs ${o.streams} is more than the ${ALTUP_MAX_STREAMS} AltUp streams the ${gpu.kind} kernels take; run the model on the CPU backend (--backend cpu)`);
  }
}

/** What distinguishes the two halves: their type, kernel, coefficient tensor (`altup.` removed) and input width in streams. */
interface Half {
  readonly type: string;
  readonly kernel: Kernel<any>;
  readonly coefs: string;
  readonly coefRows: number;
  readonly inStreams: number;
}

/**
 * One half of `Gemma3nTextAltUp`: rows of n streams (or more) in, n out, through a router both
 * halves share: router_norm [H] and modality_router [n, H], then the half's coefficients [·, n].
 */
abstract class AltUpHalf extends Gemma3nRowLayer {
  readonly options: AltUpOptions;
  readonly #w: { readonly routerNorm: bigint; readonly router: bigint; readonly coefs: bigint };

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AltUpOptions, half: Half) {
    checkAltUp(gpu, options);
    const rows = rowTypeOf(options.precision, half.type);
    requireGemma3nKernels(gpu, half.type, [half.kernel]);
    const { hidden: H, streams: n } = options;
    super(gpu, limits, rows, half.inStreams * H, n * H);
    this.options = options;
    const upload = (name: string, shape: number[]) => this.memory.upload(asRowValues(readF32(weights, name, shape), rows));
    this.#w = this.allocate(() => ({
      routerNorm: upload('router_norm.weight', [H]),
      router: upload('modality_router.weight', [n, H]),
      coefs: upload(half.coefs, [half.coefRows, n]),
    }));
  }

  /** The kernel arguments both halves take besides their input and output rows. */
  protected routerArgs(step: LayerStep<LayerState>) {
    const o = this.options;
    return { ...this.#w, rows: step.rows, hidden: o.hidden, n: o.streams, active: o.active, eps: o.eps, dtype: FLOAT_DTYPE_CODE[this.rows] };
  }
}

/**
 * AltUp's predict (`Gemma3nTextAltUp.predict`): rows of n streams in, their predictions out (n·H
 * each); the coefficients come from the active stream through the router:
 * m = tanh(modality_router(router_norm(s_k) / H)), pred_j = s_j + Σ_i prediction_coefs(m)[j·n + i] · s_i.
 */
export class AltUpPredictLayer extends AltUpHalf {
  readonly type = 'altup-predict';

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AltUpOptions) {
    const n = options.streams;
    super(gpu, weights, limits, options, { type: 'altup-predict', kernel: altupPredictKernel, coefs: 'prediction_coefs.weight', coefRows: n * n, inStreams: n });
  }

  protected run(step: LayerStep<LayerState>): void {
    step.gpu.launch(altupPredictKernel, rowLaunch(step.rows, this.options.hidden, step.stream), { streams: step.input, pred: step.output, ...this.routerArgs(step) });
  }
}

/**
 * AltUp's correct (`Gemma3nTextAltUp.correct`): input rows [pred_0 … pred_{n−1} | o] ((n + 1)·H, o
 * the layer's activated active stream), output the n corrected streams:
 * m' = tanh(modality_router(router_norm(o) / H)), corr_j = pred_j + (correction_coefs(m')_j + 1) · (o − pred_k).
 */
export class AltUpCorrectLayer extends AltUpHalf {
  readonly type = 'altup-correct';

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AltUpOptions) {
    const n = options.streams;
    super(gpu, weights, limits, options, { type: 'altup-correct', kernel: altupCorrectKernel, coefs: 'correction_coefs.weight', coefRows: n, inStreams: n + 1 });
  }

  protected run(step: LayerStep<LayerState>): void {
    step.gpu.launch(altupCorrectKernel, rowLaunch(step.rows, this.options.hidden, step.stream), { input: step.input, corr: step.output, ...this.routerArgs(step) });
  }
}
