import type { GpuBackend } from '@metrale/core';

/**
 * Whether the device still works after a step failed: a fault that poisons it (a CUDA illegal
 * address or launch failure, a lost device) makes every later call fail, a synchronize included,
 * while a failure of one step's work leaves it usable and the engine serves on. Returns the error
 * that says the device is gone, or undefined.
 */
export function deviceFault(gpu: GpuBackend): Error | undefined {
  try {
    gpu.synchronize();
    return undefined;
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}
