// How the GPU kernel tests (test/gpu/*-kernels.gpu.test.ts) check a layer-std kernel against its
// CPU twin (src/*.cpu.ts): the same defineKernel declaration launched on both backends over
// identical random buffers (never zeros; outputs poisoned with NaN first), compared by relative L2
// error of the decoded values; integers (expert ids, tokens) exactly. Bounds (STEP): a bf16 / f16
// output that rounds the other way from the twin's f64 value (the GPU computes in f32) differs by
// one step of its type; a few such flips stay under STEP. Each test file is its own module instance
// (vitest isolates files): its own device, random stream and list of comparisons.
import { CpuBackend } from '@metrale/cpu-backend';
import { SeededRandom, type FloatDtype, type GpuBackend, relativeL2Error } from '@metrale/core';
import { runKernelOnBoth, type KernelBuffers, type KernelLaunch, type KernelOutputs } from '@metrale/core/testing';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { decodeRows, encodeRows } from '../setup.js';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

const cuda = await cudaAvailable();

/** Bound of a CUDA output against its CPU twin, by the output's type (see the header). */
export const STEP: Readonly<Record<FloatDtype, number>> = { f32: 1e-5, bf16: 2e-3, f16: 5e-4 };
export const ROW_TYPES: readonly FloatDtype[] = ['f32', 'bf16', 'f16'];

let cudaGpu: GpuBackend | undefined;
const results: string[] = [];

export const random = new SeededRandom(Number(process.env.METRALE_STD_SEED ?? 2026));
export const poisonF32 = (n: number): Float32Array => new Float32Array(n).fill(Number.NaN);
export const poisonI32 = (n: number): Int32Array => new Int32Array(n).fill(-7);
export const poison = (n: number, dtype: FloatDtype): ArrayBufferView => encodeRows(poisonF32(n), dtype);
/** Random values stored as `dtype`. */
export const typed = (n: number, dtype: FloatDtype, scale = 1): ArrayBufferView => encodeRows(random.normals(n, scale), dtype);
export const f32 = (b: Uint8Array): Float32Array => new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
export const i32 = (b: Uint8Array): Int32Array => new Int32Array(b.buffer, b.byteOffset, b.byteLength / 4);
export const sameBits = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((v, i) => v === b[i]);

/** The CUDA backend of the file's suite (made in its beforeAll). */
export function cudaBackend(): GpuBackend {
  if (!cudaGpu) throw new Error('[layer-std gpu] no CUDA backend yet: call cudaBackend() inside a test of a describeKernels suite');
  return cudaGpu;
}

/** Runs `launch` on a fresh CPU backend and on the suite's CUDA one over the same buffers. */
export function onBoth(bufs: KernelBuffers, launch: KernelLaunch, outputs: string[]): { cpu: KernelOutputs; cuda: KernelOutputs } {
  return runKernelOnBoth(() => new CpuBackend(), cudaBackend(), bufs, launch, outputs);
}

/** Adds a line to the comparisons the suite prints at its end. */
export function record(line: string): void {
  results.push(line);
}

/** CUDA's output against the twin's, both decoded from `dtype`. */
export function compare(label: string, dtype: FloatDtype, cpuOut: Uint8Array, cudaOut: Uint8Array, bound = STEP[dtype]): void {
  const want = decodeRows(cpuOut, dtype);
  const got = decodeRows(cudaOut, dtype);
  expect(want.some((v) => Number.isNaN(v)), `${label}: the CPU twin left NaN`).toBe(false);
  expect(got.some((v) => Number.isNaN(v)), `${label}: CUDA left NaN (poison) in the output`).toBe(false);
  const rel = relativeL2Error(got, want);
  let differing = 0;
  for (let i = 0; i < want.length; i++) if (got[i] !== want[i]) differing++;
  results.push(`${label.padEnd(84)} rel ${rel.toExponential(2)} (${differing}/${want.length} differ)`);
  expect(rel, label).toBeLessThanOrEqual(bound);
}

export function compareI32(label: string, cpuOut: Uint8Array, cudaOut: Uint8Array): void {
  const want = Array.from(i32(cpuOut));
  const got = Array.from(i32(cudaOut));
  results.push(`${label.padEnd(84)} ${want.length} ids, exact`);
  expect(got, label).toEqual(want);
}

/**
 * A suite of kernel tests on CUDA: skipped, saying why, where there is no device; else the device
 * made before its tests and disposed after, and the comparisons it made printed.
 */
export function describeKernels(family: string, tests: () => void): void {
  if (!cuda.available) console.warn(`[layer-std gpu] ${family} kernel tests skipped: ${cuda.reason}`);
  describe.skipIf(!cuda.available)(`layer-std ${family} kernels on CUDA match their CPU twins`, () => {
    beforeAll(() => {
      ensureFatbins();
      cudaGpu = cuda.create!();
    });
    afterAll(() => {
      cudaGpu?.dispose();
      cudaGpu = undefined;
      console.log(`[layer-std gpu] ${family} kernels vs CPU twins (${results.length} comparisons):\n  ${results.join('\n  ')}`);
    });
    tests();
  });
}
