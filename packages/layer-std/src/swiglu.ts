import { readF32, type DevicePtr, type GpuBackend, type Stream, type WeightSource } from '@metrale/core';
import type { DeviceMemory } from './device-memory.js';
import { rowLaunch, siluMulKernel } from './rows-kernels.js';

/**
 * The SwiGLU feed-forward `down(silu(gate(x)) · up(x))` on the device: gate and up stacked into
 * one [2I, D] matrix (one GEMM), the gate on `std.silu_mul`, then `down`. Used by the MLP layer
 * and by the MoE's shared expert.
 */
export class SwiGlu {
  readonly hidden: number;
  readonly inter: number;
  readonly #gateUp: DevicePtr;
  readonly #down: DevicePtr;
  /** [maxRows][2I] and [maxRows][I] scratch. */
  readonly #gu: DevicePtr;
  readonly #h: DevicePtr;

  constructor(memory: DeviceMemory, weights: WeightSource, prefix: string, hidden: number, inter: number, maxRows: number) {
    this.hidden = hidden;
    this.inter = inter;
    const gate = readF32(weights, `${prefix}gate_proj.weight`, [inter, hidden]);
    const up = readF32(weights, `${prefix}up_proj.weight`, [inter, hidden]);
    const gateUp = new Float32Array(2 * inter * hidden);
    gateUp.set(gate);
    gateUp.set(up, inter * hidden);
    this.#gateUp = memory.upload(gateUp);
    this.#down = memory.upload(readF32(weights, `${prefix}down_proj.weight`, [hidden, inter]));
    this.#gu = memory.alloc(4 * maxRows * 2 * inter);
    this.#h = memory.alloc(4 * maxRows * inter);
  }

  /** output[rows][D] = SwiGLU(input[rows][D]); `beta` 1 adds to what output holds. */
  run(gpu: GpuBackend, stream: Stream, input: DevicePtr, output: DevicePtr, rows: number, beta = 0): void {
    const { hidden: D, inter: I } = this;
    gpu.gemm({ m: rows, n: 2 * I, k: D, a: input, b: this.#gateUp, c: this.#gu, transB: true, dtype: 'f32', stream });
    gpu.launch(siluMulKernel, rowLaunch(rows, I, stream), { gateUp: this.#gu, out: this.#h, rows, inter: I });
    gpu.gemm({ m: rows, n: D, k: I, a: this.#h, b: this.#down, c: output, transB: true, dtype: 'f32', beta, stream });
  }
}
