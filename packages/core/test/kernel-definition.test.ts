import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { defineKernel, defineKernelModule, InvalidArgumentError, toDims, toEarlyStart, validateKernelArgs, type KernelParams } from '../src/index.js';
import { expectThrow } from './support/driver-rig.js';

const cpu = () => {};

const kernel = defineKernel({
  name: 'test.all-types',
  params: { out: 'ptr', n: 'i32', count: 'u32', offset: 'i64', mask: 'u64', scale: 'f32', eps: 'f64' },
  cpu,
});

const good = { out: 0x7f00_0000_0000n, n: -3, count: 7, offset: -(2n ** 40n), mask: 2n ** 63n, scale: 0.5, eps: 1e-6 };

describe('defineKernel', () => {
  it('keeps the parameters in declaration order and freezes the kernel', () => {
    expect(kernel.paramList).toEqual([
      { name: 'out', type: 'ptr' }, { name: 'n', type: 'i32' }, { name: 'count', type: 'u32' }, { name: 'offset', type: 'i64' },
      { name: 'mask', type: 'u64' }, { name: 'scale', type: 'f32' }, { name: 'eps', type: 'f64' },
    ]);
    expect(kernel.name).toBe('test.all-types');
    expect(kernel.cpu).toBe(cpu);
    expect(Object.isFrozen(kernel)).toBe(true);
    expect(Object.isFrozen(kernel.paramList)).toBe(true);
  });

  it('refuses numeric parameter names, which lose their order', () => {
    expectThrow(() => defineKernel({ name: 'k', params: { x: 'ptr', 0: 'i32' } as KernelParams, cpu }), InvalidArgumentError, /defineKernel\(k\): parameter name '0' is numeric/);
    expectThrow(() => defineKernel({ name: 'k', params: { 12: 'ptr' } as KernelParams, cpu }), InvalidArgumentError, /'12' is numeric/);
    // A name with digits that is not an array index is fine.
    expect(defineKernel({ name: 'k', params: { x0: 'ptr', '1x': 'i32' }, cpu }).paramList.map((p) => p.name)).toEqual(['x0', '1x']);
  });

  it('refuses unknown parameter types, listing the known ones', () => {
    expectThrow(
      () => defineKernel({ name: 'k', params: { x: 'f16' } as unknown as KernelParams, cpu }),
      InvalidArgumentError,
      /defineKernel\(k\): parameter 'x' has unknown type 'f16' \(use ptr, i32, u32, i64, u64, f32, f64\)/,
    );
    expectThrow(() => defineKernel({ name: 'k', params: { x: 'pointer' } as unknown as KernelParams, cpu }), InvalidArgumentError, /'pointer'/);
  });

  it('needs a name and at least one implementation', () => {
    expectThrow(() => defineKernel({ name: '', params: {}, cpu }), InvalidArgumentError, /name is required/);
    expectThrow(() => defineKernel({ name: 'nothing', params: { x: 'ptr' } }), InvalidArgumentError, /defineKernel\(nothing\): give a cuda entry, a cpu implementation, or both/);
    const module = defineKernelModule('gdn', new URL('./kernels/gdn.fatbin', import.meta.url));
    expect(module).toEqual({ name: 'gdn', fatbin: fileURLToPath(new URL('./kernels/gdn.fatbin', import.meta.url)) });
    expect(defineKernelModule('dsa', '/opt/dsa.fatbin').fatbin).toBe('/opt/dsa.fatbin');
    const cudaOnly = defineKernel({ name: 'gdn.decode', params: { x: 'ptr' }, cuda: { module, symbol: 'gdn_decode' } });
    expect(cudaOnly.cuda?.symbol).toBe('gdn_decode');
    expect(cudaOnly.cpu).toBeUndefined();
  });
});

describe('validateKernelArgs', () => {
  it('accepts well-typed arguments at the edges of every range', () => {
    expect(() => validateKernelArgs(kernel, good)).not.toThrow();
    const edges = [
      { n: -(2 ** 31), count: 0, offset: -(2n ** 63n), mask: 0n, out: 0n },
      { n: 2 ** 31 - 1, count: 2 ** 32 - 1, offset: 2n ** 63n - 1n, mask: 2n ** 64n - 1n, out: 2n ** 64n - 1n },
    ];
    for (const e of edges) expect(() => validateKernelArgs(kernel, { ...good, ...e })).not.toThrow();
  });

  it('names a missing argument', () => {
    const { count: _count, ...missing } = good;
    expectThrow(() => validateKernelArgs(kernel, missing), InvalidArgumentError, /launch test\.all-types: argument 'count' \(u32\) must be a 32-bit unsigned integer, got undefined/);
  });

  it('names extra arguments', () => {
    expectThrow(() => validateKernelArgs(kernel, { ...good, stride: 4, extra: 1n }), InvalidArgumentError, /launch test\.all-types: unknown argument\(s\) stride, extra/);
  });

  it.each([
    ['a ptr as a number', { out: 4096 }, /argument 'out' \(ptr\) must be a bigint, got 4096/],
    ['a negative ptr', { out: -1n }, /argument 'out' \(ptr\) is out of range, got -1n/],
    ['a ptr past 64 bits', { out: 2n ** 64n }, /'out' \(ptr\) is out of range, got 18446744073709551616n/],
    ['a u64 as a number', { mask: 1 }, /'mask' \(u64\) must be a bigint, got 1/],
    ['a negative u64', { mask: -2n }, /'mask' \(u64\) is out of range/],
    ['an i64 as a number', { offset: 5 }, /'offset' \(i64\) must be a bigint, got 5/],
    ['an i64 below range', { offset: -(2n ** 63n) - 1n }, /'offset' \(i64\) is out of range/],
    ['an i64 above range', { offset: 2n ** 63n }, /'offset' \(i64\) is out of range/],
    ['an i32 above range', { n: 2 ** 31 }, /'n' \(i32\) must be a 32-bit signed integer, got 2147483648/],
    ['an i32 below range', { n: -(2 ** 31) - 1 }, /'n' \(i32\) must be a 32-bit signed integer, got -2147483649/],
    ['a fractional i32', { n: 1.5 }, /'n' \(i32\).*got 1\.5/],
    ['an i32 as a string', { n: '3' }, /'n' \(i32\).*got 3/],
    ['an i32 as a bigint', { n: 3n }, /'n' \(i32\).*got 3n/],
    ['a negative u32', { count: -1 }, /'count' \(u32\) must be a 32-bit unsigned integer, got -1/],
    ['a u32 above range', { count: 2 ** 32 }, /'count' \(u32\).*got 4294967296/],
    ['an f32 as a bigint', { scale: 1n }, /'scale' \(f32\) must be a number, got 1n/],
    ['an f64 as a string', { eps: '1e-6' }, /'eps' \(f64\) must be a number, got 1e-6/],
  ])('refuses %s', (_what, patch, pattern) => {
    expectThrow(() => validateKernelArgs(kernel, { ...good, ...patch }), InvalidArgumentError, pattern);
  });
});

describe('toDims', () => {
  it('normalises to three positive integers', () => {
    expect(toDims(4, 'grid')).toEqual([4, 1, 1]);
    expect(toDims([2, 3], 'grid')).toEqual([2, 3, 1]);
    expect(toDims([2, 3, 5], 'block')).toEqual([2, 3, 5]);
  });

  it('refuses zero, fractions and too many dimensions, naming them', () => {
    expectThrow(() => toDims(0, 'grid'), InvalidArgumentError, /grid must be positive integers, got \[0, 1, 1\]/);
    expectThrow(() => toDims([2, 1.5], 'block'), InvalidArgumentError, /block must be positive integers, got \[2, 1\.5, 1\]/);
    expectThrow(() => toDims([1, 1, 1, 1], 'grid'), InvalidArgumentError, /grid must have 1 to 3 dimensions/);
    expectThrow(() => toDims([], 'grid'), InvalidArgumentError, /grid must have 1 to 3 dimensions/);
  });
});

describe('toEarlyStart', () => {
  const waits = defineKernel({ name: 'k', params: {}, cpu: () => {}, earlyStart: 'wait-first' });
  const beside = defineKernel({ name: 'b', params: {}, cpu: () => {}, earlyStart: 'per-launch' });
  const plain = defineKernel({ name: 'p', params: {}, cpu: () => {} });

  it('reads LaunchConfig.earlyStart; where absent, the kernel\'s declaration (a wait-first kernel starts early)', () => {
    expect(toEarlyStart(waits, undefined, 'launch k')).toBe(true);
    expect(toEarlyStart(waits, true, 'launch k')).toBe(true);
    expect(toEarlyStart(waits, false, 'launch k')).toBe(false);
    expect(toEarlyStart(beside, undefined, 'launch b')).toBe(false);
    expect(toEarlyStart(beside, true, 'launch b')).toBe(true);
    expect(toEarlyStart(plain, undefined, 'launch p')).toBe(false);
    expect(toEarlyStart(plain, false, 'launch p')).toBe(false);
  });

  it('refuses anything but a boolean, naming the launch and the value', () => {
    expectThrow(() => toEarlyStart(waits, 1, 'launch k'), InvalidArgumentError, /launch k: earlyStart must be a boolean, got 1/);
    expectThrow(() => toEarlyStart(waits, 'yes', 'launch k'), InvalidArgumentError, /earlyStart must be a boolean, got yes/);
  });

  it('refuses an early start of a kernel that does not declare it (it would not wait for the kernel before it)', () => {
    expectThrow(() => toEarlyStart(plain, true, 'launch p'), InvalidArgumentError, /launch p: p is launched with earlyStart but does not declare earlyStart.*declare earlyStart: 'wait-first' in its defineKernel/);
    expectThrow(() => defineKernel({ name: 'q', params: {}, cpu: () => {}, earlyStart: true as unknown as 'wait-first' }), InvalidArgumentError, /defineKernel\(q\): earlyStart must be 'wait-first' or 'per-launch', got true/);
  });
});
