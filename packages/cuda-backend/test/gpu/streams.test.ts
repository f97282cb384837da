import { expect, it } from 'vitest';
import { testKernels } from '../../src/index.js';
import { asU32, describeGpu, useBackend } from './gpu-setup.js';

describeGpu('streams and events', () => {
  const gpu = useBackend();

  it('orders work within a stream and times it with events', () => {
    const b = gpu();
    const n = 1 << 22;
    const p = b.alloc(n * 4);
    const s = b.createStream();
    const start = b.createEvent(), end = b.createEvent();
    b.recordEvent(start, s);
    for (let i = 0; i < 20; i++) b.launch(testKernels.fillU32, { grid: 1024, block: 256, stream: s }, { dst: p, value: i, n });
    b.recordEvent(end, s);
    b.synchronizeEvent(end);
    const ms = b.elapsedMs(start, end);
    console.log(`[cuda-backend gpu] 20 fills of ${(n * 4) / 2 ** 20} MiB: ${ms.toFixed(3)} ms`);
    expect(ms).toBeGreaterThan(0);
    expect(ms).toBeLessThan(10_000);
    const out = asU32(b.download(p, n * 4));
    expect(out[0]).toBe(19);
    expect(out[n - 1]).toBe(19);
    for (const e of [start, end]) b.destroyEvent(e);
    b.destroyStream(s);
    b.free(p);
  });

  it('keeps two streams independent and synchronizes each', () => {
    const b = gpu();
    const n = 1 << 16;
    const p = b.alloc(n * 4), q = b.alloc(n * 4);
    const s1 = b.createStream(), s2 = b.createStream();
    b.launch(testKernels.fillU32, { grid: 64, block: 256, stream: s1 }, { dst: p, value: 1, n });
    b.launch(testKernels.fillU32, { grid: 64, block: 256, stream: s2 }, { dst: q, value: 2, n });
    b.synchronize(s1);
    b.synchronize(s2);
    expect(asU32(b.download(p, 4))[0]).toBe(1);
    expect(asU32(b.download(q, 4))[0]).toBe(2);
    b.destroyStream(s1);
    b.destroyStream(s2);
    expect(() => b.synchronize(s1)).toThrow(expect.objectContaining({ code: 'CUDA_ERROR_INVALID_HANDLE' }));
    expect(() => b.destroyStream(b.defaultStream)).toThrow(/default stream/);
    b.free(p);
    b.free(q);
  });
});
