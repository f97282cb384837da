import {
  FLOAT_DTYPE_CODE, floatBytes, readLinear, runLinear, uploadLinear, rowLaunch, type DevicePtr, type FloatDtype, type GpuBackend, type LinearWeight, type Precision,
  type Stream, type WeightSource,
} from '@metrale/core';
import type { DeviceMemory } from './device-memory.js';
import { geluMulKernel, siluMulKernel } from './rows-kernels.js';
import { StackedLinear } from './stacked-linear.js';

/**
 * How the gate is activated: SiLU (SwiGLU, the default), or GELU with the tanh approximation
 * (`gelu_pytorch_tanh`, Gemma), optionally after activation sparsity: `cutoff` Φ⁻¹(s)
 * (`sparsityCutoff`), the gate becoming relu(g − (mean + std · cutoff)) per row.
 */
export type GateActivation = { readonly kind: 'silu' } | { readonly kind: 'gelu_tanh'; readonly cutoff?: number };

/**
 * The gated feed-forward `down(act(gate(x)) · up(x))` on the device, in the row type (SwiGLU, or
 * GELU-tanh with `activation`): gate and
 * up into one [rows][2I] buffer (one GEMM of the stacked [2I, D] weight; for FP8 weights whose I is
 * not a whole number of 128-row blocks, whose scales cannot be stacked, two GEMMs writing the two
 * halves of each row), the gate on `std.silu_mul` or `std.gelu_mul` (f32 inside), then `down`. Used by the MLP layer
 * and by the MoE's shared expert.
 */
export class SwiGlu {
  readonly hidden: number;
  readonly inter: number;
  readonly rows: FloatDtype;
  readonly activation: GateActivation;
  /** Gate then up: [2I, D] stacked, or apart (StackedLinear). */
  readonly #gateUp: StackedLinear;
  readonly #down: LinearWeight;
  /** [maxRows][2I] and [maxRows][I] scratch in the row type. */
  readonly #gu: DevicePtr;
  readonly #h: DevicePtr;

  constructor(
    memory: DeviceMemory, weights: WeightSource, prefix: string, hidden: number, inter: number, maxRows: number, precision: Precision,
    activation: GateActivation = { kind: 'silu' },
  ) {
    this.activation = activation;
    this.hidden = hidden;
    this.inter = inter;
    this.rows = precision.rows;
    const alloc = (bytes: number) => memory.alloc(bytes);
    const gate = readLinear(weights, `${prefix}gate_proj.weight`, [inter, hidden], precision);
    const up = readLinear(weights, `${prefix}up_proj.weight`, [inter, hidden], precision);
    this.#gateUp = new StackedLinear(memory.gpu, alloc, [gate, up], `${prefix}gate_up`);
    this.#down = uploadLinear(memory.gpu, alloc, readLinear(weights, `${prefix}down_proj.weight`, [hidden, inter], precision));
    const bytes = floatBytes(this.rows);
    this.#gu = memory.alloc(bytes * maxRows * 2 * inter);
    this.#h = memory.alloc(bytes * maxRows * inter);
  }

  /** output[rows][D] = SwiGLU(input[rows][D]), all in the row type. */
  run(gpu: GpuBackend, stream: Stream, input: DevicePtr, output: DevicePtr, rows: number): void {
    const { inter: I, rows: dtype } = this;
    this.#gateUp.run(gpu, { m: rows, x: input, y: this.#gu, xDtype: dtype, yDtype: dtype, stream });
    const act = this.activation;
    const rowArgs = { gateUp: this.#gu, out: this.#h, rows, inter: I, dtype: FLOAT_DTYPE_CODE[dtype] };
    if (act.kind === 'silu') gpu.launch(siluMulKernel, rowLaunch(rows, I, stream), rowArgs);
    else gpu.launch(geluMulKernel, rowLaunch(rows, I, stream), { ...rowArgs, cutoff: act.cutoff ?? 0, sparse: act.cutoff === undefined ? 0 : 1 });
    runLinear(gpu, { m: rows, x: this.#h, w: this.#down, y: output, xDtype: dtype, yDtype: dtype, stream });
  }
}
