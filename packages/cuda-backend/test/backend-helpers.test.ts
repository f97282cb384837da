// The pure-TypeScript parts of the backend: allocation ranges, capture rules, GEMM arguments.
import { DeviceError, InvalidArgumentError } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { AllocationMap } from '../src/allocation-map.js';
import { GEMM_FP8_ROWS_MAX, GEMM_FP8_ROWS_WIDE_MAX, fp8GemmKernel } from '../src/backend-kernels.js';
import { CaptureTracker } from '../src/capture-tracker.js';
import { GEMM_TYPE, resolveGemm } from '../src/gemm-args.js';

describe('AllocationMap', () => {
  it('finds the allocation holding a range and keeps address order', () => {
    const m = new AllocationMap();
    m.add(0x3000n, 256);
    m.add(0x1000n, 1024);
    m.add(0x2000n, 0);
    expect([...m.entries()].map(([p]) => p)).toEqual([0x1000n, 0x2000n, 0x3000n]);
    expect(m.contains(0x1000n, 1024)).toBe(true);
    expect(m.contains(0x1100n, 768)).toBe(true);
    expect(m.contains(0x1100n, 769)).toBe(false);
    expect(m.contains(0x0fffn, 1)).toBe(false);
    expect(m.contains(0x2000n, 0)).toBe(true);
    expect(m.contains(0x2000n, 1)).toBe(false);
    expect(m.delete(0x1000n)).toBe(true);
    expect(m.delete(0x1000n)).toBe(false);
    expect(m.contains(0x1100n, 1)).toBe(false);
    expect(m.size).toBe(2);
  });
});

describe('CaptureTracker', () => {
  it('lets calls through with no capture, and fails the first forbidden one during a capture', () => {
    const t = new CaptureTracker();
    expect(() => t.forbid('alloc', 'allocating')).not.toThrow();
    t.begin(3);
    t.begin(4);
    expect(() => t.forbid('alloc', 'allocating device memory')).toThrow(DeviceError);
    t.invalidate('later reason');
    expect(t.invalidatedBy(3)).toMatch(/^alloc during capture/);
    expect(t.end(3)).toMatch(/^alloc during capture/);
    expect(t.end(4)).toMatch(/^alloc during capture/);
    expect(t.active).toBe(false);
    t.begin(3);
    expect(t.end(3)).toBe('');
  });
});

describe('resolveGemm', () => {
  const p = 0x1000n;
  it('fills defaults: packed leading dimensions, alpha 1, beta 0, outDtype = dtype', () => {
    const g = resolveGemm({ m: 4, n: 3, k: 2, a: p, b: p, c: p, dtype: 'bf16', transB: true });
    expect(g).toMatchObject({ lda: 2, ldb: 2, ldc: 3, alpha: 1, beta: 0, abType: 1, cType: 1, transA: false, transB: true });
    expect(g.aBytes).toBe(4 * 2 * 2);
    expect(g.bBytes).toBe(3 * 2 * 2);
    expect(g.cBytes).toBe(4 * 3 * 2);
  });

  it('spans padded rows only up to the last element', () => {
    const g = resolveGemm({ m: 2, n: 3, k: 4, a: p, b: p, c: p, dtype: 'f32', lda: 10, ldb: 5, ldc: 7 });
    expect(g.aBytes).toBe((10 + 4) * 4);
    expect(g.bBytes).toBe((3 * 5 + 3) * 4);
    expect(g.cBytes).toBe((7 + 3) * 4);
  });

  it('rejects short leading dimensions, unknown types and f32 -> bf16', () => {
    expect(() => resolveGemm({ m: 2, n: 3, k: 4, a: p, b: p, c: p, dtype: 'f32', lda: 3 })).toThrow(InvalidArgumentError);
    expect(() => resolveGemm({ m: 2, n: 3, k: 4, a: p, b: p, c: p, dtype: 'f8' as 'f32' })).toThrow(InvalidArgumentError);
    expect(() => resolveGemm({ m: 2, n: 3, k: 4, a: p, b: p, c: p, dtype: 'f32', outDtype: 'bf16' })).toThrow(/no f32 x f32 -> bf16/);
    expect(() => resolveGemm({ m: -1, n: 3, k: 4, a: p, b: p, c: p, dtype: 'f32' })).toThrow(InvalidArgumentError);
  });
});

describe('fp8GemmKernel', () => {
  it('takes the rows kernel to 8 rows, its wide form to 64 where 16-byte loads apply, else the tiled kernel', () => {
    const { bf16, f16, f32 } = GEMM_TYPE;
    expect([GEMM_FP8_ROWS_MAX, GEMM_FP8_ROWS_WIDE_MAX]).toEqual([8, 64]);
    for (const m of [1, 8]) expect(fp8GemmKernel(m, 300, 300, f32, 0x1002n, 0x1001n)).toBe('rows');
    for (const m of [9, 16, 64]) expect(fp8GemmKernel(m, 2048, 2048, bf16, 0x1000n, 0x2000n)).toBe('rows-wide');
    expect(fp8GemmKernel(40, 144, 152, f16, 0x1000n, 0x2000n)).toBe('rows-wide');
    expect(fp8GemmKernel(65, 2048, 2048, bf16, 0x1000n, 0x2000n)).toBe('tiled');
    // Each condition of the 16-byte loads: a 16-bit A, k a multiple of 16, lda of 8, both pointers 16-byte aligned.
    expect(fp8GemmKernel(16, 2048, 2048, f32, 0x1000n, 0x2000n)).toBe('tiled');
    expect(fp8GemmKernel(16, 2040, 2048, bf16, 0x1000n, 0x2000n)).toBe('tiled');
    expect(fp8GemmKernel(16, 2048, 2052, bf16, 0x1000n, 0x2000n)).toBe('tiled');
    expect(fp8GemmKernel(16, 2048, 2048, bf16, 0x1008n, 0x2000n)).toBe('tiled');
    expect(fp8GemmKernel(16, 2048, 2048, bf16, 0x1000n, 0x2004n)).toBe('tiled');
  });
});
