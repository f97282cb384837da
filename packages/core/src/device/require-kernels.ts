import { existsSync } from 'node:fs';
import { PluginError } from '../errors.js';
import type { GpuBackend } from './gpu-backend.js';
import type { Kernel } from './kernel.js';

/**
 * Checks, before a layer allocates anything, that the backend can run every kernel it launches:
 * the CPU backend runs the CPU twins; any other needs each kernel's fatbin to exist (a package
 * built without nvcc has none). Throws `PluginError` naming `packageName`'s missing fatbins.
 */
export function requireKernels(gpu: GpuBackend, packageName: string, layer: string, kernels: readonly Kernel<any>[]): void {
  if (gpu.kind === 'cpu') return;
  const missing = kernels.filter((k) => !k.cuda || !existsSync(k.cuda.module.fatbin));
  if (missing.length === 0) return;
  const modules = [...new Set(missing.map((k) => (k.cuda ? k.cuda.module.fatbin : `${k.name} (no CUDA entry)`)))];
  throw new PluginError(
    packageName,
    `the ${layer} layer has no ${gpu.kind} kernels in this build (${modules.join(', ')} missing: ${missing.map((k) => k.name).join(', ')}); ` +
      `run it on the CPU backend (--backend cpu) or build the package's kernels with nvcc`,
  );
}
