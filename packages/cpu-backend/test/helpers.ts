import { DeviceError, defineKernel, SeededRandom } from '@metrale/core';
import { expect } from 'vitest';

/** Bytes in 1..255: random, and never zero, so a copy that moved nothing cannot pass. */
export function randomBytes(rng: SeededRandom, n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = rng.int(1, 255);
  return out;
}

/** Asserts `fn` throws a DeviceError whose message matches every pattern (and, if given, has `code`). */
export function expectDeviceError(fn: () => unknown, patterns: readonly RegExp[], code?: string): DeviceError {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(DeviceError);
  const e = caught as DeviceError;
  for (const p of patterns) expect(e.message).toMatch(p);
  if (code !== undefined) expect(e.code).toBe(code);
  return e;
}

export const hex = (p: bigint): string => `0x${p.toString(16)}`;

/** y[i] = a · x[i] + b, over n f32 elements: a small kernel with every kind of scalar argument. */
export const axpb = defineKernel({
  name: 'test.axpb',
  params: { y: 'ptr', x: 'ptr', n: 'u32', a: 'f32', b: 'f32' },
  cpu: ({ y, x, n, a, b }, { mem }) => {
    const xs = mem.f32(x, n);
    const ys = mem.f32(y, n);
    for (let i = 0; i < n; i++) ys[i] = a * xs[i]! + b;
  },
});

/** out[i] += step, over n i32 elements: replays visibly accumulate. */
export const addScalar = defineKernel({
  name: 'test.addScalar',
  params: { out: 'ptr', n: 'i32', step: 'i32' },
  cpu: ({ out, n, step }, { mem }) => {
    const v = mem.i32(out, n);
    for (let i = 0; i < n; i++) v[i]! += step;
  },
});

export function f32Bytes(values: Float32Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

export function asF32(bytes: Uint8Array): Float32Array {
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
}

export function asI32(bytes: Uint8Array): Int32Array {
  return new Int32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
}
