import { DeviceMemory, floatBytes, type DevicePtr, type FloatDtype, type GpuBackend } from '@metrale/core';

/**
 * The transient rows of a Gemma 3n decoder layer between its parts (docs/models/gemma3n-text.md,
 * step 5). Layers run one after another on one stream, so one set serves every decoder layer of a
 * model; allocated before any capture and never moved.
 */
export class Gemma3nScratch {
  /** [maxRows][n][H]: the predictions. */
  readonly pred: DevicePtr;
  /** [maxRows][n + 1][H]: the correction's input, [pred_0 … pred_{n−1} | o2]. */
  readonly correctIn: DevicePtr;
  /** [maxRows][H] each, in the row type. */
  readonly active: DevicePtr;
  readonly normed: DevicePtr;
  readonly laurel: DevicePtr;
  readonly a: DevicePtr;
  readonly b: DevicePtr;
  readonly residual: DevicePtr;
  /** [maxRows][H] each, in the row type: the per-layer input path's input and output. */
  readonly pleIn: DevicePtr;
  readonly pleOut: DevicePtr;
  readonly #memory: DeviceMemory;

  constructor(readonly gpu: GpuBackend, readonly hidden: number, readonly streams: number, readonly maxRows: number, readonly rows: FloatDtype) {
    const row = floatBytes(rows) * hidden * maxRows;
    this.#memory = new DeviceMemory(gpu);
    const alloc = (bytes: number) => this.#memory.alloc(bytes);
    this.pred = alloc(row * streams);
    this.correctIn = alloc(row * (streams + 1));
    this.active = alloc(row);
    this.normed = alloc(row);
    this.laurel = alloc(row);
    this.a = alloc(row);
    this.b = alloc(row);
    this.residual = alloc(row);
    this.pleIn = alloc(row);
    this.pleOut = alloc(row);
  }

  dispose(): void {
    this.#memory.free();
  }
}
