import type { LaunchConfig, Stream } from './gpu-backend.js';

// Launch shapes the row and elementwise kernels of layer-std and layer-ple are written for (a plugin
// whose kernels take other shapes keeps its own, as layer-dsa does).

/** One CTA per row, up to 1024 threads over its elements (the launch shape the .cu kernels use). */
export function rowLaunch(rows: number, width: number, stream: Stream): LaunchConfig {
  return { grid: Math.max(1, rows), block: Math.min(1024, 32 * Math.ceil(Math.max(1, width) / 32)), stream };
}

/** Elementwise kernels: 256 threads per CTA. */
export function flatLaunch(count: number, stream: Stream): LaunchConfig {
  return { grid: Math.max(1, Math.ceil(count / 256)), block: 256, stream };
}
