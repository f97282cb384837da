import {
  FLOAT_DTYPE_CODE, floatBytes, readLinear, runLinear, uploadLinear, type DevicePtr, type FloatDtype, type GpuBackend, type LinearWeight, type Precision,
  type Stream, type WeightSource,
} from '@metrale/core';
import type { DeviceMemory } from './device-memory.js';
import { rowLaunch, siluMulKernel } from './rows-kernels.js';
import { StackedLinear } from './stacked-linear.js';

/**
 * The SwiGLU feed-forward `down(silu(gate(x)) · up(x))` on the device, in the row type: gate and
 * up into one [rows][2I] buffer (one GEMM of the stacked [2I, D] weight; for FP8 weights whose I is
 * not a whole number of 128-row blocks, whose scales cannot be stacked, two GEMMs writing the two
 * halves of each row), the gate on `std.silu_mul` (f32 inside), then `down`. Used by the MLP layer
 * and by the MoE's shared expert.
 */
export class SwiGlu {
  readonly hidden: number;
  readonly inter: number;
  readonly rows: FloatDtype;
  /** Gate then up: [2I, D] stacked, or apart (StackedLinear). */
  readonly #gateUp: StackedLinear;
  readonly #down: LinearWeight;
  /** [maxRows][2I] and [maxRows][I] scratch in the row type. */
  readonly #gu: DevicePtr;
  readonly #h: DevicePtr;

  constructor(memory: DeviceMemory, weights: WeightSource, prefix: string, hidden: number, inter: number, maxRows: number, precision: Precision) {
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
    gpu.launch(siluMulKernel, rowLaunch(rows, I, stream), { gateUp: this.#gu, out: this.#h, rows, inter: I, dtype: FLOAT_DTYPE_CODE[dtype] });
    runLinear(gpu, { m: rows, x: this.#h, w: this.#down, y: output, xDtype: dtype, yDtype: dtype, stream });
  }
}
