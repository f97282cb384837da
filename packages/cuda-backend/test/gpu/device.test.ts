import { DeviceError } from '@metrale/core';
import { expect, it } from 'vitest';
import { CudaBackend, selfCheck } from '../../src/index.js';
import { cuda, describeGpu, useBackend } from './gpu-setup.js';

describeGpu('device and probe', () => {
  const gpu = useBackend();

  it('reports the device properties the driver gives', () => {
    const d = gpu().device;
    console.log(`[cuda-backend gpu] ${cuda.reason}`);
    expect(gpu().kind).toBe('cuda');
    expect(d).toEqual(cuda.devices[0]);
    expect(d.name.length).toBeGreaterThan(0);
    // Plausible values catch a wrong attribute number (they are all small integers).
    expect(d.computeCapability[0]).toBeGreaterThanOrEqual(7);
    expect(d.computeCapability[0]).toBeLessThanOrEqual(12);
    expect(d.computeCapability[1]).toBeGreaterThanOrEqual(0);
    expect(d.computeCapability[1]).toBeLessThanOrEqual(9);
    expect(d.multiprocessors).toBeGreaterThanOrEqual(1);
    expect(d.multiprocessors).toBeLessThanOrEqual(1024);
    expect(d.l2CacheBytes).toBeGreaterThanOrEqual(1 << 20);
    expect(d.totalMemory).toBeGreaterThan(2 ** 30);
    const mem = gpu().memoryInfo();
    expect(mem.total).toBeGreaterThan(0);
    expect(mem.free).toBeLessThanOrEqual(mem.total);
    // A freed block the pool keeps for reuse still counts as free (the KV cache is sized from this).
    const block = gpu().alloc(64 * 2 ** 20);
    expect(gpu().memoryInfo().free).toBeLessThanOrEqual(mem.free - 64 * 2 ** 20 + 2 ** 20);
    gpu().free(block);
    expect(Math.abs(gpu().memoryInfo().free - mem.free)).toBeLessThanOrEqual(2 ** 20);
  });

  it('passes the addon self-check: its CUresult and cuBLASLt status numbers have the names the libraries give them', () => {
    const check = selfCheck();
    console.log(`[cuda-backend gpu] self-check: ${check.checked} values checked${check.problems.length ? `; problems: ${check.problems.join('; ')}` : ''}`);
    expect(check.problems).toEqual([]);
    expect(check.checked).toBeGreaterThanOrEqual(11);
  });

  it('reports which cuBLASLt it loaded, or why none', () => {
    const lib = gpu().gemmLibrary;
    console.log(`[cuda-backend gpu] cuBLASLt: ${lib.loaded ? `${lib.path} (version ${lib.version})` : lib.reason}`);
    if (!lib.loaded) expect(lib.reason).toMatch(/METRALE_CUBLASLT_PATH/);
  });

  it('refuses a device that does not exist', () => {
    expect(() => CudaBackend.create({ device: cuda.devices.length })).toThrow(/does not exist/);
  });

  it('throws DeviceError naming the call and the CUresult', () => {
    const b = gpu();
    const other = CudaBackend.create();
    const foreign = other.createStream();
    try {
      expect(() => b.synchronize(foreign)).toThrow(DeviceError);
      const p = b.alloc(256);
      let error: DeviceError | undefined;
      try {
        b.copyDeviceAsync(p, p + 128n, 256);
      } catch (e) {
        error = e as DeviceError;
      }
      expect(error).toBeInstanceOf(DeviceError);
      expect(error!.call).toBe('copyDeviceAsync (source)');
      expect(error!.code).toBe('CUDA_ERROR_ILLEGAL_ADDRESS');
      b.free(p);
    } finally {
      other.dispose();
    }
    expect(() => other.alloc(16)).toThrow(expect.objectContaining({ code: 'CUDA_ERROR_DEINITIALIZED' }));
  });
});
