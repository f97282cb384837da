import os from 'node:os';
import { InvalidArgumentError } from '@metrale/core';

export interface CpuBackendOptions {
  /** Bytes of device memory the arena hands out before `alloc` fails with CUDA_ERROR_OUT_OF_MEMORY. Default: `os.totalmem()`. */
  readonly memoryLimit?: number;
  /**
   * The byte every new device allocation is filled with. Default 0xff (NaN as f32/bf16, −1 as a
   * signed integer): GPU memory is uninitialised, so a read-before-write must show here too.
   */
  readonly allocFill?: number;
}

/** The options with defaults applied, checked. */
export function resolveOptions(options: CpuBackendOptions): { memoryLimit: number; allocFill: number } {
  const memoryLimit = options.memoryLimit ?? os.totalmem();
  const allocFill = options.allocFill ?? 0xff;
  if (!Number.isSafeInteger(memoryLimit) || memoryLimit < 0) {
    throw new InvalidArgumentError(`CpuBackend: memoryLimit must be a non-negative integer, got ${memoryLimit}`);
  }
  if (!Number.isInteger(allocFill) || allocFill < 0 || allocFill > 255) {
    throw new InvalidArgumentError(`CpuBackend: allocFill must be a byte (0..255), got ${allocFill}`);
  }
  return { memoryLimit, allocFill };
}
