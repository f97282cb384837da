import type { BackendProbe, GpuBackend } from '@metrale/core';
import { BackendUnavailableError } from '../errors/cli-errors.js';

export const BACKEND_CHOICES = ['auto', 'cpu', 'cuda'] as const;
export type BackendChoice = (typeof BACKEND_CHOICES)[number];
export type BackendName = Exclude<BackendChoice, 'auto'>;
export const BACKEND_NAMES: readonly BackendName[] = ['cpu', 'cuda'];

export interface BackendReport {
  readonly name: BackendName;
  readonly probe: BackendProbe;
}

// Backend packages are imported on first use: the CUDA one loads a native addon, and a machine
// where that addon cannot even load must still report why and run everything on the CPU.
async function loadCpu() {
  return import('@metrale/cpu-backend');
}

async function loadCuda() {
  return import('@metrale/cuda-backend');
}

/** What a backend's `probe()` says; a package that fails to import reports that as the reason. */
export async function probeBackend(name: BackendName): Promise<BackendProbe> {
  try {
    return name === 'cpu' ? (await loadCpu()).probe() : (await loadCuda()).probe();
  } catch (error) {
    return { available: false, reason: `cannot load @metrale/${name}-backend: ${(error as Error).message}`, devices: [] };
  }
}

export async function probeBackends(): Promise<BackendReport[]> {
  return Promise.all(BACKEND_NAMES.map(async (name) => ({ name, probe: await probeBackend(name) })));
}

/**
 * The backend for `--backend`: `auto` takes CUDA when its probe says it is available and the CPU
 * otherwise; an explicit `cuda` on a machine without it fails with the probe's reason. `device`
 * picks the GPU (rank r of a tensor-parallel group runs on device r).
 */
export async function selectBackend(choice: BackendChoice, device = 0): Promise<GpuBackend> {
  if (choice === 'cpu') return new (await loadCpu()).CpuBackend();
  const cuda = await probeBackend('cuda');
  if (cuda.available) return (await loadCuda()).CudaBackend.create({ device });
  if (choice === 'cuda') throw new BackendUnavailableError('cuda', cuda.reason);
  return new (await loadCpu()).CpuBackend();
}
