import type { GpuBackend } from '../../src/index.js';

// @metrale/cpu-backend depends on @metrale/core, so core cannot list it even as a devDependency:
// the workspace graph would have a cycle, which turbo refuses to build. The tests load the
// backend's source from the workspace by path instead (vitest compiles it). Core's runtime code
// never imports it.
const CPU_BACKEND_SOURCE = new URL('../../../cpu-backend/src/index.ts', import.meta.url).href;

export async function createCpuBackend(): Promise<GpuBackend> {
  const mod = (await import(/* @vite-ignore */ CPU_BACKEND_SOURCE)) as { CpuBackend: new () => GpuBackend };
  return new mod.CpuBackend();
}
