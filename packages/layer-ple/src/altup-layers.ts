import { FLOAT_DTYPE_CODE, WeightsError, readF32, type GpuBackend, type LayerLimits, type LayerState, type LayerStep, type Precision, type WeightSource } from '@metrale/core';
import { altupCorrectKernel, altupPredictKernel, rowLaunch } from './gemma3n-kernels.js';
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

/** The router both halves read (`altup.` removed): router_norm [H], modality_router [n, H]. */
function uploadRouter(upload: (v: Float32Array) => bigint, w: WeightSource, o: AltUpOptions, rows: Precision['rows']) {
  return {
    routerNorm: upload(asRowValues(readF32(w, 'router_norm.weight', [o.hidden]), rows)),
    router: upload(asRowValues(readF32(w, 'modality_router.weight', [o.streams, o.hidden]), rows)),
  };
}

function checkAltUp(o: AltUpOptions): void {
  if (!Number.isSafeInteger(o.streams) || o.streams < 2) throw new WeightsError(`config: altup_num_inputs must be an integer ≥ 2, got ${o.streams}`);
  if (!Number.isSafeInteger(o.active) || o.active < 0 || o.active >= o.streams) throw new WeightsError(`config: altup_active_idx must be in 0..${o.streams - 1}, got ${o.active}`);
}

/**
 * AltUp's predict (`Gemma3nTextAltUp.predict`): rows of n streams in, their predictions out (n·H
 * each); the coefficients come from the active stream through the router:
 * m = tanh(modality_router(router_norm(s_k) / H)), pred_j = s_j + Σ_i prediction_coefs(m)[j·n + i] · s_i.
 */
export class AltUpPredictLayer extends Gemma3nRowLayer {
  readonly type = 'altup-predict';
  readonly options: AltUpOptions;
  readonly #w: { readonly routerNorm: bigint; readonly router: bigint; readonly coefs: bigint };

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AltUpOptions) {
    checkAltUp(options);
    const rows = rowTypeOf(options.precision, 'altup-predict');
    requireGemma3nKernels(gpu, 'altup-predict', [altupPredictKernel]);
    super(gpu, limits, rows, options.streams * options.hidden, options.streams * options.hidden);
    this.options = options;
    try {
      const n = options.streams;
      this.#w = {
        ...uploadRouter((v) => this.memory.upload(v), weights, options, rows),
        coefs: this.memory.upload(asRowValues(readF32(weights, 'prediction_coefs.weight', [n * n, n]), rows)),
      };
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const o = this.options;
    step.gpu.launch(altupPredictKernel, rowLaunch(step.rows, o.hidden, step.stream), {
      streams: step.input, pred: step.output, ...this.#w, rows: step.rows, hidden: o.hidden, n: o.streams, active: o.active, eps: o.eps,
      dtype: FLOAT_DTYPE_CODE[this.rows],
    });
  }
}

/**
 * AltUp's correct (`Gemma3nTextAltUp.correct`): input rows [pred_0 … pred_{n−1} | o] ((n + 1)·H, o
 * the layer's activated active stream), output the n corrected streams:
 * m' = tanh(modality_router(router_norm(o) / H)), corr_j = pred_j + (correction_coefs(m')_j + 1) · (o − pred_k).
 */
export class AltUpCorrectLayer extends Gemma3nRowLayer {
  readonly type = 'altup-correct';
  readonly options: AltUpOptions;
  readonly #w: { readonly routerNorm: bigint; readonly router: bigint; readonly coefs: bigint };

  constructor(gpu: GpuBackend, weights: WeightSource, limits: LayerLimits, options: AltUpOptions) {
    checkAltUp(options);
    const rows = rowTypeOf(options.precision, 'altup-correct');
    requireGemma3nKernels(gpu, 'altup-correct', [altupCorrectKernel]);
    super(gpu, limits, rows, (options.streams + 1) * options.hidden, options.streams * options.hidden);
    this.options = options;
    try {
      const n = options.streams;
      this.#w = {
        ...uploadRouter((v) => this.memory.upload(v), weights, options, rows),
        coefs: this.memory.upload(asRowValues(readF32(weights, 'correction_coefs.weight', [n, n]), rows)),
      };
    } catch (error) {
      this.memory.free();
      throw error;
    }
  }

  protected run(step: LayerStep<LayerState>): void {
    const o = this.options;
    step.gpu.launch(altupCorrectKernel, rowLaunch(step.rows, o.hidden, step.stream), {
      input: step.input, corr: step.output, ...this.#w, rows: step.rows, hidden: o.hidden, n: o.streams, active: o.active, eps: o.eps,
      dtype: FLOAT_DTYPE_CODE[this.rows],
    });
  }
}
