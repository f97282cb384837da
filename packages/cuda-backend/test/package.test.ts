import { DeviceError } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import * as pkg from '../src/index.js';
import { loadAddon, loadAddonFrom, toDeviceError, withContext } from '../src/addon.js';

const found = pkg.probe();
const addon = loadAddon();
const driverMissing = addon.ok && !addon.addon.loadDriver().ok;

describe('@metrale/cuda-backend without a GPU', () => {
  it('imports, exporting its API, without loading the addon or libcuda', () => {
    expect(typeof pkg.probe).toBe('function');
    expect(typeof pkg.CudaBackend.create).toBe('function');
    expect(typeof pkg.selfCheck).toBe('function');
    expect(pkg.testKernels.noop.cuda?.symbol).toBe('noop');
  });

  it('probe() never throws and returns a reason', () => {
    expect(typeof found.available).toBe('boolean');
    expect(found.reason.length).toBeGreaterThan(0);
    if (!found.available) expect(found.devices).toEqual([]);
  });

  it.skipIf(!driverMissing)('says libcuda.so.1 is missing where there is no NVIDIA driver', () => {
    expect(found.available).toBe(false);
    expect(found.reason).toMatch(/^libcuda\.so\.1 not found \(no NVIDIA driver\): /);
  });

  it.skipIf(found.available)('CudaBackend.create() throws a DeviceError carrying the probe reason', () => {
    let error: unknown;
    try {
      pkg.CudaBackend.create();
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(DeviceError);
    expect((error as DeviceError).call).toBe('CudaBackend.create');
    expect((error as DeviceError).message).toContain(found.reason);
  });

  it('reports "addon not built" when no addon file exists, without throwing', () => {
    const load = loadAddonFrom(['/nonexistent/metrale_cuda.node']);
    expect(load.ok).toBe(false);
    expect(!load.ok && load.reason).toMatch(/^addon not built: .*scripts\/build\.mjs/);
  });

  it.skipIf(!addon.ok)('the self-check runs with or without a driver', () => {
    const check = pkg.selfCheck();
    expect(check.problems).toEqual([]);
  });
});

describe('native errors become DeviceErrors', () => {
  it('keeps call, code and detail', () => {
    const native = Object.assign(new Error('cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory'), {
      call: 'cuMemAlloc_v2', code: 'CUDA_ERROR_OUT_OF_MEMORY', detail: 'out of memory (1024 bytes)',
    });
    const e = toDeviceError(native, 'alloc');
    expect(e).toBeInstanceOf(DeviceError);
    expect(e.call).toBe('cuMemAlloc_v2');
    expect(e.code).toBe('CUDA_ERROR_OUT_OF_MEMORY');
    expect(e.message).toBe('cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory (1024 bytes)');
    expect(e.cause).toBe(native);
    const more = withContext(e, 'in /x.fatbin');
    expect(more.message).toBe('cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory (1024 bytes) in /x.fatbin');
    expect(more.code).toBe('CUDA_ERROR_OUT_OF_MEMORY');
  });

  it('names the fallback call for anything else', () => {
    const e = toDeviceError(new TypeError('A number was expected'), 'memsetAsync');
    expect(e.call).toBe('memsetAsync');
    expect(e.code).toBeUndefined();
  });
});
