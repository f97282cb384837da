import { FLOAT_DTYPE_CODE, flatLaunch, type DevicePtr, type FloatDtype, type GpuBackend, type ResidualAdd, type Stream } from '@metrale/core';
import { addKernel } from './rows-kernels.js';
import { requireKernels } from './require-kernels.js';

/** The residual add of core's `DecoderBlock`, as the `std.add` kernel: the f32 sum of the two stored values, rounded once to `dtype`. */
export const residualAdd: ResidualAdd = {
  add(gpu: GpuBackend, stream: Stream, a: DevicePtr, b: DevicePtr, out: DevicePtr, count: number, dtype: FloatDtype = 'f32'): void {
    gpu.launch(addKernel, flatLaunch(count, stream), { a, b, out, count, dtype: FLOAT_DTYPE_CODE[dtype] });
  },
};

/** Throws before a model is built when the backend cannot run the residual add. */
export function requireResidualAdd(gpu: GpuBackend): void {
  requireKernels(gpu, 'residual add', [addKernel]);
}
