// What the GPU lane needs: the CUDA backend when a device is there (else the reason), and this
// package's fatbins in dist/kernels/ (built by `npm run build`; compiled here with the package's
// metrale-build-kernels when missing and nvcc is on the PATH).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { GpuBackend } from '@metrale/core';
import { addKernel, argmaxKernel, coreKernel, routeKernel } from '@metrale/layer-std';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface CudaChoice {
  readonly available: boolean;
  readonly reason: string;
  /** Makes a backend (CudaBackend.create(), or the stand-in below). */
  readonly create?: () => GpuBackend;
}

/**
 * The CUDA backend when a device is there. METRALE_STD_DEVICE_MODULE=/path/module.mjs (development
 * only) replaces it by the module's createDevice(), e.g. the CPU backend, to check the lane's own
 * logic on a machine without a GPU.
 */
export async function cudaAvailable(): Promise<CudaChoice> {
  const hook = process.env.METRALE_STD_DEVICE_MODULE;
  if (hook) {
    const m = (await import(pathToFileURL(hook).href)) as { createDevice: () => GpuBackend };
    return { available: true, reason: `stand-in device from ${hook}`, create: () => m.createDevice() };
  }
  let cb: typeof import('@metrale/cuda-backend');
  try {
    cb = await import('@metrale/cuda-backend');
  } catch (error) {
    return { available: false, reason: `@metrale/cuda-backend could not be loaded (${(error as Error).message}); build the workspace first` };
  }
  const p = cb.probe();
  return { available: p.available, reason: p.reason, create: () => cb.CudaBackend.create() };
}

/** Makes sure the fatbins the kernel declarations point at exist; throws with what to do when they cannot. */
export function ensureFatbins(): void {
  if (process.env.METRALE_STD_DEVICE_MODULE) return;
  const files = [addKernel, routeKernel, coreKernel, argmaxKernel].map((k) => k.cuda!.module.fatbin);
  if (files.every((f) => existsSync(f))) return;
  const tool = join(pkgDir, 'node_modules', '.bin', 'metrale-build-kernels');
  const r = spawnSync(tool, ['--package-dir', pkgDir], { encoding: 'utf8' });
  console.log(`[layer-std gpu] fatbins missing; ran metrale-build-kernels: ${(r.stdout ?? '').trim()} ${(r.stderr ?? '').trim()}`);
  const missing = files.filter((f) => !existsSync(f));
  if (missing.length) {
    throw new Error(`kernel fatbins missing: ${missing.join(', ')}; build the package with nvcc on the PATH (npm run build in packages/layer-std)`);
  }
}
