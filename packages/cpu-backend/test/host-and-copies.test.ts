import { InvalidArgumentError, SeededRandom } from '@metrale/core';
import { afterEach, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/index.js';
import { expectDeviceError, randomBytes } from './helpers.js';

describe('host buffers and copies', () => {
  let gpu: CpuBackend;
  afterEach(() => gpu.dispose());

  it('round-trips data through every copy path', () => {
    gpu = new CpuBackend();
    const rng = new SeededRandom(10);
    const data = randomBytes(rng, 300);
    const a = gpu.alloc(300);
    const b = gpu.alloc(300);
    gpu.upload(a, data);
    expect(gpu.download(a, 300)).toEqual(data);

    const pinned = gpu.allocHost(400);
    pinned.bytes.set(randomBytes(rng, 400));
    const stream = gpu.createStream();
    gpu.copyToDeviceAsync(b, pinned, 50, 300, stream);
    expect(gpu.download(b, 300)).toEqual(pinned.bytes.slice(50, 350));

    gpu.copyDeviceAsync(b + 10n, a + 20n, 100);
    const expected = pinned.bytes.slice(50, 350);
    expected.set(data.subarray(20, 120), 10);
    expect(gpu.download(b, 300)).toEqual(expected);

    const back = gpu.allocHost(300);
    gpu.copyToHostAsync(back, 7, b, 200, stream);
    gpu.synchronize(stream);
    expect(back.bytes.subarray(7, 207)).toEqual(expected.subarray(0, 200));
    expect(back.bytes[0]).toBe(0);
  });

  it('copies overlapping device ranges like memmove', () => {
    gpu = new CpuBackend();
    const data = randomBytes(new SeededRandom(11), 64);
    const p = gpu.alloc(64);
    gpu.upload(p, data);
    gpu.copyDeviceAsync(p + 8n, p, 32);
    const expected = data.slice();
    expected.set(data.subarray(0, 32), 8);
    expect(gpu.download(p, 64)).toEqual(expected);
  });

  it('uploads from any typed array view, honouring its offset', () => {
    gpu = new CpuBackend();
    const f = new Float32Array([1.25, -2.5, 3.75, 9]);
    const p = gpu.alloc(8);
    gpu.upload(p, f.subarray(1, 3));
    expect(Array.from(new Float32Array(gpu.download(p, 8).buffer))).toEqual([-2.5, 3.75]);
  });

  it('memsets exactly the range asked for', () => {
    gpu = new CpuBackend();
    const data = randomBytes(new SeededRandom(12), 40);
    const p = gpu.alloc(40);
    gpu.upload(p, data);
    gpu.memsetAsync(p + 5n, 0, 10);
    const expected = data.slice();
    expected.fill(0, 5, 15);
    expect(gpu.download(p, 40)).toEqual(expected);
    gpu.memsetAsync(p, 0xab, 40);
    expect(gpu.download(p, 40).every((x) => x === 0xab)).toBe(true);
    expect(() => gpu.memsetAsync(p, 256, 1)).toThrow(InvalidArgumentError);
    expectDeviceError(() => gpu.memsetAsync(p, 1, 41), [/memsetAsync/, /past the end/]);
  });

  it('checks pinned buffers: bounds, foreign buffers, double free, stale views', () => {
    gpu = new CpuBackend();
    const p = gpu.alloc(64);
    const pinned = gpu.allocHost(32);
    expect(pinned.bytes).toHaveLength(32);
    expectDeviceError(() => gpu.copyToDeviceAsync(p, pinned, 16, 17), [/copyToDeviceAsync/, /runs past the end of the 32-byte pinned buffer/]);
    expectDeviceError(() => gpu.copyToDeviceAsync(p, { bytes: new Uint8Array(8) }, 0, 8), [/allocHost/]);
    const other = new CpuBackend();
    const foreign = other.allocHost(8);
    expectDeviceError(() => gpu.copyToHostAsync(foreign, 0, p, 8), [/not a pinned host buffer of this backend/]);
    other.dispose();
    const kept = pinned.bytes;
    gpu.freeHost(pinned);
    expect(kept).toHaveLength(0);
    expectDeviceError(() => gpu.freeHost(pinned), [/freeHost/, /already freed/]);
    expectDeviceError(() => gpu.copyToDeviceAsync(p, pinned, 0, 4), [/already freed/]);
    expect(gpu.stats().liveHostBytes).toBe(0);
  });
});
