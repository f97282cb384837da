// Runs the same launches on the CPU backend (the twins) and on the lane's CUDA device over
// identical host buffers, and reads named outputs back from both: the kernel tests of the GPU lane
// share it.
import { CpuBackend } from '@metrale/cpu-backend';
import type { DevicePtr, GpuBackend } from '@metrale/core';

export type Bufs = Record<string, ArrayBufferView>;
export type Ptrs = Record<string, DevicePtr>;
export type Outputs = Record<string, Uint8Array>;

/** Uploads `bufs` to a backend, runs `launch` on its default stream, returns the named outputs. */
function runOn(gpu: GpuBackend, bufs: Bufs, launch: (gpu: GpuBackend, p: Ptrs) => void, outputs: readonly string[]): Outputs {
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

/** `launch` on a fresh CPU backend and on `cuda`, over the same buffers: each side's named outputs. */
export function onBoth(cuda: GpuBackend, bufs: Bufs, launch: (gpu: GpuBackend, p: Ptrs) => void, outputs: readonly string[]): { cpu: Outputs; cuda: Outputs } {
  const cpu = new CpuBackend();
  try {
    return { cpu: runOn(cpu, bufs, launch, outputs), cuda: runOn(cuda, bufs, launch, outputs) };
  } finally {
    cpu.dispose();
  }
}
