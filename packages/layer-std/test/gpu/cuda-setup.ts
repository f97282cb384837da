// What this package's GPU lane needs (the shared mechanism is in @metrale/core/testing): the CUDA
// backend when a device is there (else the reason; METRALE_STD_DEVICE_MODULE=/path/module.mjs names a
// stand-in device for development), and the fatbins in dist/kernels/ (built when missing).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureFatbins as ensurePackageFatbins, gpuLaneDevice, type GpuLaneDevice } from '@metrale/core/testing';
import { addKernel, argmaxKernel, coreKernel, expertsKernel, routeKernel } from '@metrale/layer-std';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export type CudaChoice = GpuLaneDevice;

export function cudaAvailable(): Promise<CudaChoice> {
  return gpuLaneDevice({ loadCuda: () => import('@metrale/cuda-backend'), standInEnv: 'METRALE_STD_DEVICE_MODULE' });
}

/** Makes sure the fatbins the kernel declarations point at exist; throws with what to do when they cannot. */
export function ensureFatbins(): void {
  if (process.env.METRALE_STD_DEVICE_MODULE) return;
  ensurePackageFatbins({ packageDir: pkgDir, fatbins: [addKernel, routeKernel, expertsKernel, coreKernel, argmaxKernel].map((k) => k.cuda!.module.fatbin), label: '[layer-std gpu]' });
}
