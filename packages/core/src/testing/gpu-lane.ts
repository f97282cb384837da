// What a plugin's GPU test lane needs, in one place: a device (the CUDA backend, or a stand-in
// module a developer names to check the lane's logic without a GPU), and the package's fatbins.
// Core never imports a backend: the package passes the loader of @metrale/cuda-backend.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { BackendProbe, GpuBackend } from '../device/gpu-backend.js';

export interface GpuLaneDevice {
  readonly available: boolean;
  readonly reason: string;
  /** A stand-in module replaces the CUDA backend (the lane may skip what only a GPU runs in time). */
  readonly standIn: boolean;
  /** Makes a backend (CudaBackend.create(), or the stand-in's createDevice()). */
  readonly create?: () => GpuBackend;
}

export interface GpuLaneDeviceOptions {
  /** `() => import('@metrale/cuda-backend')`, from the package's own dependencies. */
  readonly loadCuda: () => Promise<{ probe(): BackendProbe; CudaBackend: { create(): GpuBackend } }>;
  /**
   * An environment variable naming a module with `createDevice()` that replaces the CUDA backend
   * (development only: e.g. the CPU backend, to run the lane's own logic without a GPU).
   */
  readonly standInEnv?: string;
}

/** The device a GPU lane runs on, or why there is none (never throws). */
export async function gpuLaneDevice(options: GpuLaneDeviceOptions): Promise<GpuLaneDevice> {
  const hook = options.standInEnv ? process.env[options.standInEnv] : undefined;
  if (hook) {
    const m = (await import(pathToFileURL(hook).href)) as { createDevice: () => GpuBackend };
    return { available: true, standIn: true, reason: `stand-in device from ${hook}`, create: () => m.createDevice() };
  }
  let cuda: Awaited<ReturnType<GpuLaneDeviceOptions['loadCuda']>>;
  try {
    cuda = await options.loadCuda();
  } catch (error) {
    return { available: false, standIn: false, reason: `@metrale/cuda-backend could not be loaded (${(error as Error).message}); build the workspace first` };
  }
  const p = cuda.probe();
  return { available: p.available, standIn: false, reason: p.reason, create: () => cuda.CudaBackend.create() };
}

export interface EnsureFatbinsOptions {
  /** The plugin package's directory (its node_modules/.bin/metrale-build-kernels; by default its kernels/ and dist/kernels/). */
  readonly packageDir: string;
  /**
   * The directory whose kernels/*.cu are built into its dist/kernels/ (default packageDir): e.g.
   * a test tree's own kernels, which the package does not ship.
   */
  readonly buildDir?: string;
  /** The fatbins the lane's kernel declarations point at. */
  readonly fatbins: readonly string[];
  /** Prefix of the line printed when the fatbins had to be built (`[layer-std gpu]`). */
  readonly label: string;
}

/**
 * Makes sure `fatbins` exist: when one is missing, runs the package's metrale-build-kernels (nvcc
 * on the PATH) on `buildDir` once, and throws with what to do when they still do not.
 */
export function ensureFatbins(options: EnsureFatbinsOptions): void {
  if (options.fatbins.every((f) => existsSync(f))) return;
  const buildDir = options.buildDir ?? options.packageDir;
  const tool = join(options.packageDir, 'node_modules', '.bin', 'metrale-build-kernels');
  const r = spawnSync(tool, ['--package-dir', buildDir], { encoding: 'utf8' });
  console.log(`${options.label} fatbins missing; ran metrale-build-kernels on ${buildDir}: ${(r.stdout ?? '').trim()} ${(r.stderr ?? '').trim()}`);
  const missing = options.fatbins.filter((f) => !existsSync(f));
  if (missing.length) {
    throw new Error(
      `kernel fatbins missing: ${missing.join(', ')}; build them with nvcc on the PATH (npx metrale-build-kernels --package-dir ${buildDir}, in ${options.packageDir})`,
    );
  }
}
