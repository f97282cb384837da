// Launches one kernel declaration on a backend over given host buffers and reads named outputs back:
// the CPU twin tests and the GPU lane (CUDA against the twin) share it.
import type { DevicePtr, GpuBackend } from '@metrale/core';

export type Bufs = Record<string, ArrayBufferView>;
export type Ptrs = Record<string, DevicePtr>;

/** Uploads `bufs` to a backend, runs `launch` on its default stream, returns the named outputs. */
export function runOn(gpu: GpuBackend, bufs: Bufs, launch: (gpu: GpuBackend, p: Ptrs) => void, outputs: string[]): Record<string, Uint8Array> {
  const p: Ptrs = {};
  for (const [name, data] of Object.entries(bufs)) {
    p[name] = gpu.alloc(Math.max(4, data.byteLength));
    gpu.upload(p[name]!, data);
  }
  try {
    launch(gpu, p);
    gpu.synchronize();
    return Object.fromEntries(outputs.map((name) => [name, gpu.download(p[name]!, bufs[name]!.byteLength)]));
  } finally {
    for (const ptr of Object.values(p)) gpu.free(ptr);
  }
}
