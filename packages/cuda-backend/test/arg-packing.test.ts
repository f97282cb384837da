import { readFileSync } from 'node:fs';
import { defineKernel, InvalidArgumentError, type KernelParam } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { LAUNCH_HEADER_BYTES, LAUNCH_PARAM_BYTES, layoutArgs, packArgsToBytes } from '../src/arg-packing.js';
import { testKernels } from '../src/test-kernels.js';

describe('kernel argument layout', () => {
  it('aligns each parameter to its size, as the C ABI lays out a kernel signature', () => {
    // params_probe(u64* out, int a, long long c, float e, double f, unsigned b, u64 d, int g)
    const layout = layoutArgs(testKernels.paramsProbe);
    expect([...layout.offsets]).toEqual([0, 8, 16, 24, 32, 40, 48, 56]);
    expect(layout.bytes).toBe(60);
    expect([...layoutArgs(testKernels.fillU32).offsets]).toEqual([0, 8, 12]);
    expect([...layoutArgs(testKernels.noop).offsets]).toEqual([]);
    const packed = defineKernel({ name: 't', params: { a: 'i32', b: 'u32', c: 'f32', p: 'ptr' }, cpu: () => {} });
    expect([...layoutArgs(packed).offsets]).toEqual([0, 4, 8, 16]);
  });

  it('writes every type little-endian, two’s complement and IEEE', () => {
    const bytes = packArgsToBytes(testKernels.paramsProbe, {
      out: 0x1122334455667788n, a: -1, c: -2n, e: 0.1, f: -0.5, b: 0xfffffffe, d: 2n ** 64n - 1n, g: 7,
    });
    const v = new DataView(bytes.buffer);
    expect(v.getBigUint64(0, true)).toBe(0x1122334455667788n);
    expect(bytes[0]).toBe(0x88);
    expect(v.getUint32(8, true)).toBe(0xffffffff);
    expect(v.getUint32(12, true)).toBe(0); // padding stays zero
    expect(v.getBigInt64(16, true)).toBe(-2n);
    expect(v.getFloat32(24, true)).toBe(Math.fround(0.1));
    expect(v.getFloat64(32, true)).toBe(-0.5);
    expect(v.getUint32(40, true)).toBe(0xfffffffe);
    expect(v.getBigUint64(48, true)).toBe(2n ** 64n - 1n);
    expect(v.getInt32(56, true)).toBe(7);
  });

  it('refuses parameters past CUDA’s 4 KiB', () => {
    const paramList: KernelParam[] = Array.from({ length: 513 }, (_, i) => ({ name: `p${i}`, type: 'ptr' }));
    expect(() => layoutArgs({ name: 'huge', paramList })).toThrow(InvalidArgumentError);
    expect(layoutArgs({ name: 'max', paramList: paramList.slice(0, 512) }).bytes).toBe(4096);
  });

  it('matches the launch record the C++ side reads (native/device.h)', () => {
    const header = readFileSync(new URL('../native/device.h', import.meta.url), 'utf8');
    expect(header).toContain(`kLaunchHeaderBytes = ${LAUNCH_HEADER_BYTES};`);
    expect(header).toContain(`kLaunchParamBytes = ${LAUNCH_PARAM_BYTES};`);
  });
});
