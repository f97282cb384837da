// Shared by the GPU suites: whether there is a GPU (printed once per file when there is none),
// a backend per suite, and small helpers.
import { randomFillSync } from 'node:crypto';
import { afterAll, beforeAll, describe } from 'vitest';
import { CudaBackend, probe } from '../../src/index.js';

export const cuda = probe();
if (!cuda.available) console.warn(`[cuda-backend gpu] skipped: ${cuda.reason}`);

/** describe() that runs only where probe() finds a CUDA device. */
export function describeGpu(name: string, body: () => void): void {
  describe.skipIf(!cuda.available)(name, body);
}

/** A backend created before the suite's tests and disposed after them. */
export function useBackend(): () => CudaBackend {
  let backend: CudaBackend | undefined;
  beforeAll(() => {
    backend = CudaBackend.create();
  });
  afterAll(() => backend?.dispose());
  return () => backend!;
}

export function randomBytes(n: number): Uint8Array {
  return randomFillSync(new Uint8Array(n));
}

export function randomU32(n: number): Uint32Array {
  return new Uint32Array(randomBytes(n * 4).buffer);
}

/** Random floats in [-1, 1) (random bit patterns would include NaNs). */
export function randomF32(n: number): Float32Array {
  const out = new Float32Array(n);
  const u = randomU32(n);
  for (let i = 0; i < n; i++) out[i] = u[i]! / 2 ** 31 - 1;
  return out;
}

export const asF32 = (bytes: Uint8Array): Float32Array => new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
export const asU32 = (bytes: Uint8Array): Uint32Array => new Uint32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
