import type { DevicePtr, GpuBackend, ResidualAdd, Stream } from '@metrale/core';
import { addKernel, flatLaunch } from './rows-kernels.js';
import { requireKernels } from './require-kernels.js';

/** The residual add of core's `DecoderBlock`, as the `std.add` kernel. */
export const residualAdd: ResidualAdd = {
  add(gpu: GpuBackend, stream: Stream, a: DevicePtr, b: DevicePtr, out: DevicePtr, count: number): void {
    gpu.launch(addKernel, flatLaunch(count, stream), { a, b, out, count });
  },
};

/** Throws before a model is built when the backend cannot run the residual add. */
export function requireResidualAdd(gpu: GpuBackend): void {
  requireKernels(gpu, 'residual add', [addKernel]);
}
