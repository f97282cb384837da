// Runs kernel launches over given host buffers and reads named outputs back: a plugin's CPU twin
// tests run them on the CPU backend, its GPU lane on the CPU backend and on the device, and compares.
// Core never imports a backend: the package passes the maker of its CPU backend.
import type { DevicePtr } from '../device/device-ptr.js';
import { f16BitsToF32, fromBf16, toBf16, toF16, type FloatDtype } from '../device/dtype.js';
import type { GpuBackend } from '../device/gpu-backend.js';

/** Host contents of the buffers a launch uses, by name. */
export type KernelBuffers = Record<string, ArrayBufferView>;
/** The device copies of those buffers, by the same names. */
export type KernelPointers = Record<string, DevicePtr>;
/** Named buffers read back after the launch. */
export type KernelOutputs = Record<string, Uint8Array>;
/** Launches kernels on `gpu` (its default stream) over the buffers at `p`. */
export type KernelLaunch = (gpu: GpuBackend, p: KernelPointers) => void;

/** Uploads `bufs` to a backend, runs `launch` on its default stream, returns the named outputs. */
export function runKernelOn(gpu: GpuBackend, bufs: KernelBuffers, launch: KernelLaunch, outputs: readonly string[]): KernelOutputs {
  const p: KernelPointers = {};
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

/**
 * `launch` on a fresh CPU backend (`makeCpu()`, disposed after) and on `device`, over the same
 * buffers: each side's named outputs.
 */
export function runKernelOnBoth(
  makeCpu: () => GpuBackend, device: GpuBackend, bufs: KernelBuffers, launch: KernelLaunch, outputs: readonly string[],
): { cpu: KernelOutputs; cuda: KernelOutputs } {
  const cpu = makeCpu();
  try {
    return { cpu: runKernelOn(cpu, bufs, launch, outputs), cuda: runKernelOn(device, bufs, launch, outputs) };
  } finally {
    cpu.dispose();
  }
}

/** f32 values stored as `dtype` (rounded to nearest even), as a kernel's input rows. */
export function encodeRows(values: Float32Array, dtype: FloatDtype): ArrayBufferView {
  return dtype === 'f32' ? values : dtype === 'bf16' ? toBf16(values) : toF16(values);
}

/** Rows of `dtype` read back as f32 values (a copy). */
export function decodeRows(bytes: Uint8Array, dtype: FloatDtype): Float32Array {
  const copy = bytes.slice();
  if (dtype === 'f32') return new Float32Array(copy.buffer);
  const bits = new Uint16Array(copy.buffer);
  return dtype === 'bf16' ? fromBf16(bits) : Float32Array.from(bits, f16BitsToF32);
}
