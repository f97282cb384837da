// The device the GPU lane's tests run on: CUDA (@metrale/cuda-backend), or — development only,
// METRALE_DSA_DEVICE_MODULE=test/gpu/emu/device.mjs — the CPU emulator (tools/cuda-emu), which
// runs kernels/*.cu on the CPU. Without either the suites skip and say why.
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { GpuBackend } from '@metrale/core';

export interface DeviceChoice {
  readonly available: boolean;
  /** Why there is no device, or which one this is. */
  readonly reason: string;
  /** false for the emulator. */
  readonly real: boolean;
  readonly create: () => GpuBackend;
}

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export async function chooseDevice(): Promise<DeviceChoice> {
  const none = () => {
    throw new Error('no device');
  };
  const hook = process.env.METRALE_DSA_DEVICE_MODULE;
  if (hook) {
    const m = (await import(pathToFileURL(resolve(pkgDir, hook)).href)) as { createDevice: () => GpuBackend; reason?: string };
    return { available: true, reason: m.reason ?? hook, real: false, create: () => m.createDevice() };
  }
  let cb: typeof import('@metrale/cuda-backend');
  try {
    cb = await import('@metrale/cuda-backend');
  } catch (error) {
    return { available: false, real: true, create: none, reason: `@metrale/cuda-backend could not be loaded (${(error as Error).message}); build the workspace first` };
  }
  const p = cb.probe();
  if (!p.available) return { available: false, real: true, create: none, reason: p.reason };
  return { available: true, real: true, reason: p.reason, create: () => cb.CudaBackend.create() };
}
