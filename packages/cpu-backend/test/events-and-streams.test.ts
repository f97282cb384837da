import { afterEach, describe, expect, it } from 'vitest';
import { CpuBackend, probe } from '../src/index.js';
import { expectDeviceError } from './helpers.js';

describe('events, streams, device info', () => {
  let gpu: CpuBackend;
  afterEach(() => gpu.dispose());

  it('measures elapsed time between recorded events', () => {
    gpu = new CpuBackend();
    const s = gpu.createStream();
    const a = gpu.createEvent();
    const b = gpu.createEvent();
    expectDeviceError(() => gpu.elapsedMs(a, b), [/event \d+ has not been recorded/]);
    gpu.recordEvent(a, s);
    const until = performance.now() + 5;
    while (performance.now() < until) { /* spin */ }
    gpu.recordEvent(b, s);
    gpu.synchronizeEvent(b);
    const ms = gpu.elapsedMs(a, b);
    expect(ms).toBeGreaterThanOrEqual(5);
    expect(ms).toBeLessThan(5000);
    expect(gpu.elapsedMs(b, a)).toBe(-ms);
    gpu.destroyEvent(a);
    expectDeviceError(() => gpu.recordEvent(a), [/event \d+ is not a live event/], 'CUDA_ERROR_INVALID_HANDLE');
  });

  it('rejects foreign and destroyed streams and keeps the default stream', () => {
    gpu = new CpuBackend();
    const other = new CpuBackend();
    const foreign = other.createStream();
    const p = gpu.alloc(4);
    expectDeviceError(() => gpu.memsetAsync(p, 0, 4, foreign), [/made by another backend/]);
    expectDeviceError(() => gpu.memsetAsync(p, 0, 4, { backend: 'cpu', id: gpu.defaultStream.id }), [/not a live stream/]);
    expectDeviceError(() => gpu.destroyStream(gpu.defaultStream), [/default stream cannot be destroyed/]);
    other.dispose();
    const s = gpu.createStream();
    expect(s.id).not.toBe(gpu.defaultStream.id);
    gpu.destroyStream(s);
    expectDeviceError(() => gpu.synchronize(s), [/not a live stream/]);
  });

  it('describes itself', () => {
    gpu = new CpuBackend();
    expect(gpu.kind).toBe('cpu');
    expect(gpu.device).toMatchObject({ index: 0, name: 'metrale CPU reference device', computeCapability: [0, 0], l2CacheBytes: 0 });
    expect(gpu.device.multiprocessors).toBeGreaterThan(0);
    const p = probe();
    expect(p.available).toBe(true);
    expect(p.reason).toBe('CPU reference device (always available)');
    expect(p.devices).toHaveLength(1);
    expect(p.devices[0]!.name).toBe(gpu.device.name);
  });
});
