import { defineKernel, InvalidArgumentError, SeededRandom } from '@metrale/core';
import { afterEach, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/index.js';
import { asF32, axpb, expectDeviceError } from './helpers.js';

describe('kernel launch', () => {
  let gpu: CpuBackend;
  afterEach(() => gpu.dispose());

  function setup(n: number): { x: bigint; y: bigint; xs: Float32Array } {
    const xs = new SeededRandom(20).normals(n);
    const x = gpu.alloc(4 * n);
    const y = gpu.alloc(4 * n);
    gpu.upload(x, xs);
    return { x, y, xs };
  }

  it('runs the CPU implementation with typed arguments and the launch shape', () => {
    gpu = new CpuBackend();
    const n = 37;
    const { x, y, xs } = setup(n);
    gpu.launch(axpb, { grid: [2, 1], block: 32 }, { y, x, n, a: 1.5, b: -0.25 });
    const ys = asF32(gpu.download(y, 4 * n));
    for (let i = 0; i < n; i++) expect(ys[i]).toBe(Math.fround(1.5 * xs[i]! - 0.25));

    let seen: unknown;
    const shape = defineKernel({ name: 'test.shape', params: {}, cpu: (_a, ctx) => (seen = { grid: ctx.grid, block: ctx.block, shared: ctx.sharedBytes }) });
    gpu.launch(shape, { grid: [3, 2], block: [8, 4, 2], sharedBytes: 1024 }, {});
    expect(seen).toEqual({ grid: [3, 2, 1], block: [8, 4, 2], shared: 1024 });
    expect(gpu.stats().kernelsLaunched).toBe(2);
  });

  it('runs an earlyStart launch in stream order, with the results of a plain one; refuses a non-boolean earlyStart, and one for a kernel that does not declare it', () => {
    gpu = new CpuBackend();
    const n = 16;
    const { x, y, xs } = setup(n);
    const axpbAfter = defineKernel({ name: 'test.axpb_after', params: axpb.params, cpu: axpb.cpu, earlyStart: 'wait-first' });
    gpu.launch(axpb, { grid: 1, block: 32 }, { y, x, n, a: 2, b: 1 });
    // reads y, which the launch before it wrote
    gpu.launch(axpbAfter, { grid: 1, block: 32, earlyStart: true }, { y: x, x: y, n, a: 1, b: 0 });
    const got = asF32(gpu.download(x, 4 * n));
    for (let i = 0; i < n; i++) expect(got[i]).toBe(Math.fround(Math.fround(2 * xs[i]!) + 1));
    expect(() => gpu.launch(axpbAfter, { grid: 1, block: 32, earlyStart: 'yes' as unknown as boolean }, { y, x, n, a: 1, b: 0 })).toThrow(
      /launch test\.axpb_after: earlyStart must be a boolean, got yes/,
    );
    expect(() => gpu.launch(axpb, { grid: 1, block: 32, earlyStart: true }, { y, x, n, a: 1, b: 0 })).toThrow(/launch test\.axpb: test\.axpb is launched with earlyStart but does not declare earlyStart/);
  });

  it('rejects bad arguments, naming the kernel and the parameter', () => {
    gpu = new CpuBackend();
    const { x, y } = setup(4);
    const bad = (args: Record<string, unknown>, pattern: RegExp): void => {
      expect(() => gpu.launch(axpb, { grid: 1, block: 1 }, args as never)).toThrow(pattern);
    };
    bad({ y, x, n: 4, a: 1 }, /test\.axpb.*'b'/);
    bad({ y: 5, x, n: 4, a: 1, b: 2 }, /'y' \(ptr\) must be a bigint/);
    bad({ y, x, n: -1, a: 1, b: 2 }, /'n' \(u32\)/);
    bad({ y, x, n: 4, a: 1, b: 2, extra: 1 }, /unknown argument\(s\) extra/);
    expect(() => gpu.launch(axpb, { grid: 0, block: 1 }, { y, x, n: 4, a: 1, b: 2 })).toThrow(InvalidArgumentError);
    expect(gpu.stats().kernelsLaunched).toBe(0);
  });

  it('enforces CUDA launch limits', () => {
    gpu = new CpuBackend();
    const { x, y } = setup(4);
    const args = { y, x, n: 4, a: 1, b: 2 };
    expectDeviceError(() => gpu.launch(axpb, { grid: 1, block: [64, 32] }, args), [/more than 1024 threads/], 'CUDA_ERROR_INVALID_VALUE');
    expectDeviceError(() => gpu.launch(axpb, { grid: [1, 65536], block: 1 }, args), [/grid dimension/]);
    expectDeviceError(() => gpu.launch(axpb, { grid: 1, block: 1, sharedBytes: 300_000 }, args), [/shared memory/]);
  });

  it('refuses a kernel without a CPU implementation', () => {
    gpu = new CpuBackend();
    const cudaOnly = defineKernel({ name: 'test.cudaOnly', params: { n: 'i32' }, cuda: { module: { name: 'm', fatbin: '/nonexistent.fatbin' }, symbol: 'k' } });
    expectDeviceError(() => gpu.launch(cudaOnly, { grid: 1, block: 1 }, { n: 1 }), [/test\.cudaOnly has no CPU implementation/]);
  });

  it('reports a kernel that reads past its buffer, naming the kernel', () => {
    gpu = new CpuBackend();
    const { x, y } = setup(8);
    const e = expectDeviceError(() => gpu.launch(axpb, { grid: 1, block: 1 }, { y, x, n: 9, a: 1, b: 0 }), [/past the end/]);
    expect(e.call).toBe('launch test.axpb: mem.f32');
  });

  it('hands the kernel a frozen copy of its arguments', () => {
    gpu = new CpuBackend();
    let frozen = false;
    const k = defineKernel({ name: 'test.frozen', params: { v: 'f64' }, cpu: (args) => (frozen = Object.isFrozen(args)) });
    gpu.launch(k, { grid: 1, block: 1 }, { v: 0.5 });
    expect(frozen).toBe(true);
  });
});
