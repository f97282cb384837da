import { requireKernels as requirePackageKernels, type GpuBackend, type Kernel } from '@metrale/core';

/**
 * Checks, before a layer allocates anything, that the backend can run every kernel it launches
 * (core's `requireKernels`, naming this package's fatbins when some are missing).
 */
export function requireKernels(gpu: GpuBackend, layer: string, kernels: readonly Kernel<any>[]): void {
  requirePackageKernels(gpu, '@metrale/layer-std', layer, kernels);
}
