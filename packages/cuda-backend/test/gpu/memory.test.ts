import { DeviceError } from '@metrale/core';
import { expect, it } from 'vitest';
import { asU32, describeGpu, randomBytes, useBackend } from './gpu-setup.js';

describeGpu('memory: pool, copies, memset, pinned buffers', () => {
  const gpu = useBackend();

  it('allocates, frees into the pool and reuses the block for the same size class', () => {
    const b = gpu();
    const before = b.poolStats();
    const p = b.alloc(1000);
    expect(p % 256n).toBe(0n);
    b.free(p);
    const cached = b.poolStats();
    expect(cached.cachedBlocks).toBe(before.cachedBlocks + 1);
    const q = b.alloc(1024);  // same 1024-byte class as 1000
    expect(q).toBe(p);
    const after = b.poolStats();
    expect(after.hits).toBe(before.hits + 1);
    b.free(q);
    const r = b.alloc(3 << 20); // another class: a miss
    expect(b.poolStats().misses).toBe(after.misses + 1);
    b.free(r);
    expect(b.trim()).toBeGreaterThanOrEqual(1024 + (3 << 20));
    expect(b.poolStats().cachedBlocks).toBe(0);
  });

  it('rejects a double free and a pointer inside an allocation', () => {
    const b = gpu();
    const p = b.alloc(512);
    expect(() => b.free(p + 256n)).toThrow(DeviceError);
    b.free(p);
    expect(() => b.free(p)).toThrow(expect.objectContaining({ code: 'CUDA_ERROR_INVALID_VALUE' }));
  });

  it('round-trips random data: upload, device-to-device, download (odd sizes and offsets too)', () => {
    const b = gpu();
    for (const bytes of [1, 3, 4096, 1_000_003, 16 << 20]) {
      const data = randomBytes(bytes);
      const src = b.alloc(bytes);
      const dst = b.alloc(bytes + 8);
      b.upload(src, data);
      b.copyDeviceAsync(dst + 8n, src, bytes);
      b.synchronize();
      expect(Buffer.from(b.download(dst + 8n, bytes)).equals(Buffer.from(data))).toBe(true);
      b.free(src);
      b.free(dst);
    }
  });

  it('uploads from any typed-array view (the view, not its whole buffer)', () => {
    const b = gpu();
    const whole = new Uint32Array([1, 2, 3, 4, 5, 6]);
    const p = b.alloc(8);
    b.upload(p, whole.subarray(2, 4));
    expect([...asU32(b.download(p, 8))]).toEqual([3, 4]);
    b.free(p);
  });

  it('memsets a range in stream order', () => {
    const b = gpu();
    const p = b.alloc(4096);
    b.upload(p, randomBytes(4096));
    b.memsetAsync(p + 100n, 0xab, 1000);
    b.synchronize();
    const out = b.download(p, 4096);
    expect(out.subarray(100, 1100).every((v) => v === 0xab)).toBe(true);
    b.free(p);
  });

  it('copies through pinned host buffers asynchronously, and detaches a freed buffer', () => {
    const b = gpu();
    const bytes = 8 << 20;
    const host = b.allocHost(bytes);
    expect(host.bytes.byteLength).toBe(bytes);
    const data = randomBytes(bytes);
    host.bytes.set(data);
    const dev = b.alloc(bytes);
    const stream = b.createStream();
    b.copyToDeviceAsync(dev, host, 0, bytes, stream);
    const back = b.allocHost(bytes + 16);
    b.copyToHostAsync(back, 16, dev, bytes, stream);
    b.synchronize(stream);
    expect(Buffer.from(back.bytes.subarray(16)).equals(Buffer.from(data))).toBe(true);
    expect(() => b.copyToHostAsync(back, 17, dev, bytes, stream)).toThrow(/runs past the end/);
    b.freeHost(host);
    expect(host.bytes.byteLength).toBe(0); // detached: never a view of freed memory
    expect(() => b.copyToDeviceAsync(dev, host, 0, 1)).toThrow(DeviceError);
    b.freeHost(back);
    b.destroyStream(stream);
    b.free(dev);
  });

  it('digests live allocations: unchanged by reads, changed by a one-byte write', () => {
    const b = gpu();
    const p = b.alloc(1 << 20);
    b.upload(p, randomBytes(1 << 20));
    const first = b.memoryDigest();
    const old = b.download(p, 1 << 20)[12345]!;
    expect(b.memoryDigest()).toBe(first);
    b.memsetAsync(p + 12345n, (old + 1) & 0xff, 1);
    expect(b.memoryDigest()).not.toBe(first);
    b.free(p);
  });
});
