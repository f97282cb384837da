import { CaptureError, DeviceError } from '@metrale/core';
import { expect, it } from 'vitest';
import { CudaBackend, testKernels, xorshift32 } from '../../src/index.js';
import { asU32, describeGpu, randomU32, useBackend } from './gpu-setup.js';

const { accumulateU32, xorshiftU32, fillU32 } = testKernels;

describeGpu('graph capture and replay', () => {
  const gpu = useBackend();

  it('replays a captured kernel chain 10 000 times with the same result as eager launches', () => {
    const b = gpu();
    const n = 4096, steps = 10_000, mul = 5;
    const acc0 = randomU32(n), src0 = randomU32(n);
    const [accE, srcE, accG, srcG] = [b.alloc(n * 4), b.alloc(n * 4), b.alloc(n * 4), b.alloc(n * 4)];
    for (const [p, v] of [[accE, acc0], [srcE, src0], [accG, acc0], [srcG, src0]] as const) b.upload(p, v);
    const launchConfig = { grid: 16, block: 256 };
    const s = b.createStream();

    b.beginCapture(s);
    expect(b.isCapturing(s)).toBe(true);
    b.launch(accumulateU32, { ...launchConfig, stream: s }, { acc: accG, src: srcG, mul, n });
    b.launch(xorshiftU32, { ...launchConfig, stream: s }, { x: srcG, n });
    const graph = b.endCapture(s);
    expect(b.isCapturing(s)).toBe(false);
    expect(graph.nodes).toBe(2);
    const exec = b.instantiate(graph);
    b.destroyGraph(graph);

    for (let i = 0; i < steps; i++) {
      b.launch(accumulateU32, launchConfig, { acc: accE, src: srcE, mul, n });
      b.launch(xorshiftU32, launchConfig, { x: srcE, n });
    }
    for (let i = 0; i < steps; i++) b.launchGraph(exec, s);
    b.synchronize();

    const eager = asU32(b.download(accE, n * 4)), replayed = asU32(b.download(accG, n * 4));
    expect(Buffer.from(replayed.buffer).equals(Buffer.from(eager.buffer))).toBe(true);
    expect(Buffer.from(b.download(srcG, n * 4)).equals(Buffer.from(b.download(srcE, n * 4)))).toBe(true);
    // And both equal the host computation (so neither path silently did nothing).
    for (const i of [0, 1, n >> 1, n - 1]) {
      let acc = acc0[i]!, src = src0[i]!;
      for (let r = 0; r < steps; r++) {
        acc = (Math.imul(acc, mul) + src) >>> 0;
        src = xorshift32(src);
      }
      expect(eager[i]).toBe(acc);
    }
    b.destroyGraphExec(exec);
    b.destroyStream(s);
    for (const p of [accE, srcE, accG, srcG]) b.free(p);
  });

  it('reads pinned host bytes and device memory when a replay runs, not when it was captured', () => {
    const b = gpu();
    const n = 1024;
    const host = b.allocHost(n * 4);
    const staged = b.alloc(n * 4), acc = b.alloc(n * 4);
    b.memsetAsync(acc, 0, n * 4);
    b.synchronize(); // the memset ran on the default stream; the replays run on s
    const s = b.createStream();
    b.beginCapture(s);
    b.copyToDeviceAsync(staged, host, 0, n * 4, s);
    b.launch(accumulateU32, { grid: 4, block: 256, stream: s }, { acc, src: staged, mul: 1, n });
    const exec = b.instantiate(b.endCapture(s));
    const hostWords = new Uint32Array(host.bytes.buffer);
    for (let r = 1; r <= 5; r++) {
      hostWords.fill(r);
      b.launchGraph(exec, s);
      b.synchronize(s); // the copy reads the buffer when it runs: do not refill before it has
    }
    expect(asU32(b.download(acc, 8))[1]).toBe(1 + 2 + 3 + 4 + 5);
    b.destroyGraphExec(exec);
    b.destroyStream(s);
    b.freeHost(host);
    b.free(staged);
    b.free(acc);
  });

  it('fails a capture during which a synchronous upload was attempted, and then captures normally', () => {
    const b = gpu();
    const n = 256;
    const p = b.alloc(n * 4);
    const s = b.createStream();
    b.beginCapture(s);
    b.launch(fillU32, { grid: 1, block: 256, stream: s }, { dst: p, value: 1, n });
    let refused: DeviceError | undefined;
    try {
      b.upload(p, new Uint32Array(n));
    } catch (e) {
      refused = e as DeviceError;
    }
    console.log(`[cuda-backend gpu] upload during capture: ${refused?.message}`);
    expect(refused).toBeInstanceOf(DeviceError);
    expect(refused!.code).toBe('CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED');
    // Work on the invalidated capture is refused too.
    expect(() => b.launch(fillU32, { grid: 1, block: 256, stream: s }, { dst: p, value: 2, n })).toThrow(DeviceError);
    let failed: unknown;
    try {
      b.endCapture(s);
    } catch (e) {
      failed = e;
    }
    console.log(`[cuda-backend gpu] endCapture after it: ${(failed as Error)?.message}`);
    expect(failed).toBeInstanceOf(CaptureError);
    expect(b.isCapturing(s)).toBe(false);
    expectCaptureWorks(b, s, p, n);
    b.destroyStream(s);
    b.free(p);
  });

  it('fails a capture during which memory was allocated or the device synchronized, and recovers each time', () => {
    const b = gpu();
    const n = 256;
    const p = b.alloc(n * 4);
    const s = b.createStream();
    for (const forbidden of [() => b.alloc(1024), () => b.synchronize(), () => b.synchronize(s), () => b.download(p, 4), () => b.allocHost(64)]) {
      b.beginCapture(s);
      b.launch(fillU32, { grid: 1, block: 256, stream: s }, { dst: p, value: 1, n });
      expect(forbidden).toThrow(DeviceError);
      expect(() => b.endCapture(s)).toThrow(CaptureError);
      expectCaptureWorks(b, s, p, n);
    }
    b.destroyStream(s);
    b.free(p);
  });

  it("loads a kernel's module on its first launch even when that launch is inside a capture", () => {
    const fresh = CudaBackend.create(); // no module loaded yet
    try {
      const n = 512;
      const p = fresh.alloc(n * 4);
      const s = fresh.createStream();
      fresh.beginCapture(s);
      fresh.launch(fillU32, { grid: 2, block: 256, stream: s }, { dst: p, value: 77, n });
      const exec = fresh.instantiate(fresh.endCapture(s));
      fresh.launchGraph(exec, s);
      fresh.synchronize(s);
      expect(asU32(fresh.download(p, n * 4))[n - 1]).toBe(77);
    } finally {
      fresh.dispose();
    }
  });
});

/** A fresh capture on the stream records, instantiates and replays correctly. */
function expectCaptureWorks(b: CudaBackend, s: ReturnType<CudaBackend['createStream']>, p: bigint, n: number): void {
  const value = 1000 + Math.floor(Math.random() * 1000);
  b.beginCapture(s);
  b.launch(fillU32, { grid: 1, block: 256, stream: s }, { dst: p, value, n });
  const graph = b.endCapture(s);
  const exec = b.instantiate(graph);
  b.launchGraph(exec, s);
  b.synchronize(s);
  expect(asU32(b.download(p, n * 4))[n - 1]).toBe(value);
  b.destroyGraphExec(exec);
  b.destroyGraph(graph);
}
