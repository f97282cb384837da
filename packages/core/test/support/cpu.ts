import { CpuBackend } from '@metrale/cpu-backend';
import type { GpuBackend } from '../../src/index.js';

/** A fresh reference backend. One place to change if the backend's import ever moves. */
export function cpuBackend(): GpuBackend {
  return new CpuBackend();
}

export { CpuBackend };
