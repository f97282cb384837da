import { defineKernel, InvalidArgumentError, SeededRandom, type DeviceMemoryView } from '@metrale/core';
import { afterEach, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/index.js';
import { expectDeviceError, hex, randomBytes } from './helpers.js';

const ILLEGAL = 'CUDA_ERROR_ILLEGAL_ADDRESS';

/** Runs `fn` inside a kernel, with the `mem` view CPU kernels get. */
function withMem(gpu: CpuBackend, fn: (mem: DeviceMemoryView) => void): void {
  const k = defineKernel({ name: 'test.peek', params: {}, cpu: (_args, { mem }) => fn(mem) });
  gpu.launch(k, { grid: 1, block: 1 }, {});
}

describe('memory arena', () => {
  let gpu: CpuBackend;
  afterEach(() => gpu.dispose());

  it('hands out distinct 256-byte aligned pointers with a gap between allocations, never reused', () => {
    gpu = new CpuBackend();
    const a = gpu.alloc(100);
    const z = gpu.alloc(0);
    const b = gpu.alloc(64);
    for (const p of [a, z, b]) expect(p % 256n).toBe(0n);
    expect(z).toBeGreaterThan(a + 100n);
    expect(b).toBeGreaterThan(z);
    gpu.free(a);
    const c = gpu.alloc(100);
    expect(c).toBeGreaterThan(b);
    // alloc(0) is a real allocation: freeing it works once.
    gpu.free(z);
    expectDeviceError(() => gpu.free(z), [/double free/, new RegExp(hex(z))]);
  });

  it('reports one byte past the end, naming the call, the address, the size and the allocation', () => {
    gpu = new CpuBackend();
    const p = gpu.alloc(16);
    gpu.upload(p, randomBytes(new SeededRandom(1), 16));
    const e = expectDeviceError(() => gpu.download(p, 17), [/out of range/, /1 byte past the end/, new RegExp(`${hex(p)} \\+ 17 bytes`), /16 bytes/], ILLEGAL);
    expect(e.call).toBe('download');
    expectDeviceError(() => gpu.download(p + 16n, 1), [/starts 0 bytes past the end/], ILLEGAL);
    expect(gpu.download(p + 16n, 0)).toHaveLength(0);
    expect(gpu.download(p + 15n, 1)).toHaveLength(1);
  });

  it('rejects a range straddling two allocations and one in the gap between them', () => {
    gpu = new CpuBackend();
    const a = gpu.alloc(256);
    const b = gpu.alloc(256);
    expectDeviceError(() => gpu.download(a + 128n, Number(b - a)), [/past the end/, new RegExp(`allocation ${hex(a)}`)], ILLEGAL);
    expectDeviceError(() => gpu.memsetAsync(a + 300n, 1, 4), [/memsetAsync/, /past the end/, /unallocated/], ILLEGAL);
    expectDeviceError(() => gpu.download(0n, 4), [/null pointer/], ILLEGAL);
    expectDeviceError(() => gpu.download(a - 8n, 4), [/below the first allocation/], ILLEGAL);
  });

  it('reports copies and views after free as use after free; stale views become empty', () => {
    gpu = new CpuBackend();
    const rng = new SeededRandom(2);
    const p = gpu.alloc(64);
    const q = gpu.alloc(64);
    gpu.upload(p, randomBytes(rng, 64));
    let stale: Float32Array | undefined;
    withMem(gpu, (mem) => (stale = mem.f32(p, 16)));
    expect(stale).toHaveLength(16);
    gpu.free(p);
    expect(stale).toHaveLength(0);
    expectDeviceError(() => gpu.download(p, 4), [/use after free/, new RegExp(hex(p))], ILLEGAL);
    expectDeviceError(() => gpu.copyDeviceAsync(q, p + 8n, 8), [/copyDeviceAsync/, /use after free/], ILLEGAL);
    expectDeviceError(() => gpu.upload(p, new Uint8Array(4)), [/upload/, /use after free/], ILLEGAL);
    const e = expectDeviceError(() => withMem(gpu, (mem) => mem.u32(p, 1)), [/use after free/], ILLEGAL);
    expect(e.call).toBe('launch test.peek: mem.u32');
  });

  it('throws on double free and on pointers that are not an allocation start', () => {
    gpu = new CpuBackend();
    const p = gpu.alloc(32);
    expectDeviceError(() => gpu.free(p + 4n), [/points inside allocation/], 'CUDA_ERROR_INVALID_VALUE');
    expectDeviceError(() => gpu.free(0x1234n), [/not an allocation/], 'CUDA_ERROR_INVALID_VALUE');
    gpu.free(p);
    expectDeviceError(() => gpu.free(p), [/double free/], 'CUDA_ERROR_INVALID_VALUE');
  });

  it('gives exact-length views of every type and refuses misaligned ones', () => {
    gpu = new CpuBackend();
    const p = gpu.alloc(64);
    const data = randomBytes(new SeededRandom(3), 64);
    gpu.upload(p, data);
    withMem(gpu, (mem) => {
      expect(mem.f64(p + 8n, 7)).toHaveLength(7);
      expect(mem.i64(p, 8)[1]).toBe(new DataView(data.buffer).getBigInt64(8, true));
      expect(mem.u64(p + 56n, 1)).toHaveLength(1);
      expect(mem.i32(p + 4n, 15)).toHaveLength(15);
      expect(mem.u16(p + 2n, 31)[0]).toBe(data[2]! | (data[3]! << 8));
      expect(Array.from(mem.u8(p + 3n, 5))).toEqual(Array.from(data.subarray(3, 8)));
      // Writes through a view land in device memory.
      mem.f32(p, 1)[0] = 1.5;
    });
    expect(new Float32Array(gpu.download(p, 4).buffer)[0]).toBe(1.5);
    expectDeviceError(() => withMem(gpu, (mem) => mem.f32(p + 2n, 1)), [/not aligned to 4 bytes/], 'CUDA_ERROR_MISALIGNED_ADDRESS');
    expectDeviceError(() => withMem(gpu, (mem) => mem.f64(p + 4n, 1)), [/not aligned to 8 bytes/]);
    expectDeviceError(() => withMem(gpu, (mem) => mem.f32(p, 17)), [/mem\.f32/, /past the end/], ILLEGAL);
    expect(() => withMem(gpu, (mem) => mem.f32(p, -1))).toThrow(InvalidArgumentError);
  });

  it('poisons new allocations (0xff by default, configurable)', () => {
    gpu = new CpuBackend();
    expect(Array.from(gpu.download(gpu.alloc(4), 4))).toEqual([255, 255, 255, 255]);
    gpu.dispose();
    gpu = new CpuBackend({ allocFill: 0 });
    expect(Array.from(gpu.download(gpu.alloc(4), 4))).toEqual([0, 0, 0, 0]);
  });

  it('tracks live and peak bytes and enforces the memory limit', () => {
    gpu = new CpuBackend({ memoryLimit: 1000 });
    expect(gpu.device.totalMemory).toBe(1000);
    const a = gpu.alloc(600);
    const b = gpu.alloc(300);
    expect(gpu.stats()).toMatchObject({ liveBytes: 900, peakBytes: 900, liveAllocations: 2 });
    expectDeviceError(() => gpu.alloc(200), [/200 bytes requested/], 'CUDA_ERROR_OUT_OF_MEMORY');
    gpu.free(a);
    gpu.alloc(200);
    expect(gpu.stats()).toMatchObject({ liveBytes: 500, peakBytes: 900, liveAllocations: 2 });
    gpu.free(b);
    expect(() => gpu.alloc(-1)).toThrow(InvalidArgumentError);
    expect(() => gpu.alloc(1.5)).toThrow(InvalidArgumentError);
  });
});
