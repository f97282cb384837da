import { SeededRandom } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/index.js';
import { addScalar, expectDeviceError, randomBytes } from './helpers.js';

describe('memoryDigest, stats, dispose', () => {
  it('changes the digest when one byte changes, and only then', () => {
    const gpu = new CpuBackend();
    const rng = new SeededRandom(50);
    const a = gpu.alloc(128);
    const b = gpu.alloc(64);
    gpu.upload(a, randomBytes(rng, 128));
    gpu.upload(b, randomBytes(rng, 64));
    const d0 = gpu.memoryDigest();
    expect(d0).toMatch(/^[0-9a-f]{64}$/);
    // Reads, events, a copy of identical bytes: nothing written, same digest.
    gpu.download(a, 128);
    gpu.copyDeviceAsync(a + 10n, a + 10n, 20);
    gpu.recordEvent(gpu.createEvent());
    expect(gpu.memoryDigest()).toBe(d0);

    const byte = gpu.download(b + 63n, 1)[0]!;
    gpu.memsetAsync(b + 63n, byte ^ 1, 1);
    const d1 = gpu.memoryDigest();
    expect(d1).not.toBe(d0);
    gpu.memsetAsync(b + 63n, byte, 1);
    expect(gpu.memoryDigest()).toBe(d0);

    // A new allocation, even an empty one, changes it; freeing it restores it.
    const z = gpu.alloc(0);
    expect(gpu.memoryDigest()).not.toBe(d0);
    gpu.free(z);
    expect(gpu.memoryDigest()).toBe(d0);
    gpu.dispose();
  });

  it('counts copies, launches, captures and replays', () => {
    const gpu = new CpuBackend();
    const s = gpu.createStream();
    const p = gpu.alloc(64);
    const host = gpu.allocHost(64);
    host.bytes.set(randomBytes(new SeededRandom(51), 64));
    gpu.upload(p, new Uint8Array(16));
    gpu.copyToDeviceAsync(p, host, 0, 32, s);
    gpu.copyToHostAsync(host, 0, p, 8, s);
    gpu.copyDeviceAsync(p + 32n, p, 24, s);
    gpu.download(p, 4);
    gpu.launch(addScalar, { grid: 1, block: 1 }, { out: p, n: 4, step: 1 });
    gpu.beginCapture(s);
    gpu.copyToDeviceAsync(p, host, 0, 16, s);
    gpu.launch(addScalar, { grid: 1, block: 1, stream: s }, { out: p, n: 4, step: 1 });
    const exec = gpu.instantiate(gpu.endCapture(s));
    gpu.beginCapture(s);
    expect(() => gpu.synchronize(s)).toThrow();
    expect(() => gpu.endCapture(s)).toThrow();
    for (let i = 0; i < 3; i++) gpu.launchGraph(exec, s);
    expect(gpu.stats()).toEqual({
      liveBytes: 64, peakBytes: 64, liveAllocations: 1, liveHostBytes: 64,
      kernelsLaunched: 1, gemmsLaunched: 0, graphLaunches: 3, nodesReplayed: 6,
      hostToDeviceCopies: 5, bytesHostToDevice: 16 + 32 + 3 * 16,
      bytesDeviceToHost: 12, bytesDeviceToDevice: 24, collectivesRun: 0,
      capturesBegun: 2, capturesFailed: 1,
    });
    gpu.dispose();
  });

  it('frees everything on dispose and refuses any use afterwards', () => {
    const gpu = new CpuBackend();
    const p = gpu.alloc(32);
    const host = gpu.allocHost(16);
    const kept = host.bytes;
    gpu.beginCapture(gpu.createStream());
    gpu.dispose();
    gpu.dispose();
    expect(gpu.stats()).toMatchObject({ liveBytes: 0, liveAllocations: 0, liveHostBytes: 0, peakBytes: 32 });
    expect(kept).toHaveLength(0);
    expectDeviceError(() => gpu.alloc(4), [/disposed/], 'CUDA_ERROR_DEINITIALIZED');
    expectDeviceError(() => gpu.download(p, 4), [/disposed/]);
    expectDeviceError(() => gpu.createStream(), [/disposed/]);
    expectDeviceError(() => gpu.launch(addScalar, { grid: 1, block: 1 }, { out: p, n: 1, step: 1 }), [/disposed/]);
  });
});
