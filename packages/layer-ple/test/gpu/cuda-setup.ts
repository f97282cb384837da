// What this package's GPU lane needs (the shared mechanism is in @metrale/core/testing): the CUDA
// backend when a device is there (else the reason; METRALE_PLE_DEVICE_MODULE=/path/module.mjs names a
// stand-in device for development: test/gpu/emu/device.mjs runs the kernels' CUDA sources in the
// CPU emulator), and the fatbins in dist/kernels/ (built when missing).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureFatbins as ensurePackageFatbins, gpuLaneDevice, type GpuLaneDevice } from '@metrale/core/testing';
import { altupPredictKernel, combineKernel, copyKernel, gateMulKernel } from '@metrale/layer-ple';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export type CudaChoice = GpuLaneDevice;

export function cudaAvailable(): Promise<CudaChoice> {
  return gpuLaneDevice({ loadCuda: () => import('@metrale/cuda-backend'), standInEnv: 'METRALE_PLE_DEVICE_MODULE' });
}

/** Makes sure the fatbins the kernel declarations point at exist; throws with what to do when they cannot. */
export function ensureFatbins(): void {
  if (process.env.METRALE_PLE_DEVICE_MODULE) return;
  ensurePackageFatbins({ packageDir: pkgDir, fatbins: [combineKernel, gateMulKernel, altupPredictKernel, copyKernel].map((k) => k.cuda!.module.fatbin), label: '[layer-ple gpu]' });
}
