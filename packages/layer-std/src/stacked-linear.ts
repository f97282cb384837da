import {
  FP8_BLOCK, floatBytes, runLinear, stackLinears, uploadLinear, type DevicePtr, type FloatDtype, type GpuBackend, type HostLinear, type LinearWeight, type Stream,
} from '@metrale/core';

/**
 * Linear weights that multiply the same rows into adjacent column ranges of one output (gate and
 * up; q, k and v): stacked into one weight and one GEMM where their types allow it, else one GEMM
 * per part, each writing its columns of the output rows (ldy). FP8 parts stack only when every part
 * but the last is a whole number of 128-row blocks (their scale grids then stack too).
 */
export class StackedLinear {
  /** Output columns: the parts' rows together. */
  readonly cols: number;
  readonly #parts: readonly LinearWeight[];

  constructor(gpu: GpuBackend, alloc: (bytes: number) => DevicePtr, parts: readonly HostLinear[], name: string) {
    const first = parts[0]!;
    const stackable = parts.every((p, i) => p.dtype === first.dtype && (p.dtype !== 'f8e4m3' || i === parts.length - 1 || p.rows % FP8_BLOCK === 0));
    const host = stackable ? [stackLinears(parts, name)] : parts;
    this.#parts = host.map((w) => uploadLinear(gpu, alloc, w));
    this.cols = parts.reduce((n, p) => n + p.rows, 0);
  }

  /** y[m][cols] = x[m] · [part₀; part₁; …]ᵀ, y packed (ldy = cols), in `yDtype`. */
  run(gpu: GpuBackend, c: { readonly m: number; readonly x: DevicePtr; readonly y: DevicePtr; readonly xDtype: FloatDtype; readonly yDtype: FloatDtype; readonly stream: Stream }): void {
    if (this.#parts.length === 1) {
      runLinear(gpu, { ...c, w: this.#parts[0]! });
      return;
    }
    let col = 0;
    for (const w of this.#parts) {
      runLinear(gpu, { ...c, w, y: c.y + BigInt(col * floatBytes(c.yDtype)), ldy: this.cols });
      col += w.rows;
    }
  }
}
