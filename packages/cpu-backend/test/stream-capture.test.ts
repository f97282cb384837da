import { CaptureError, DeviceError, SeededRandom, type GpuBackend } from '@metrale/core';
import { afterEach, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/index.js';
import { addScalar, asF32, asI32, axpb, expectDeviceError, randomBytes } from './helpers.js';

describe('stream capture and graphs', () => {
  let gpu: CpuBackend;
  afterEach(() => gpu.dispose());

  it('records instead of running, and freezes kernel arguments at capture', () => {
    gpu = new CpuBackend();
    const n = 8;
    const out = gpu.alloc(4 * n);
    gpu.memsetAsync(out, 0, 4 * n);
    const stream = gpu.createStream();
    let step = 3;
    const args = { out, n, step };
    gpu.beginCapture(stream);
    expect(gpu.isCapturing(stream)).toBe(true);
    gpu.launch(addScalar, { grid: 1, block: n, stream }, args);
    // Mutating the host variables after the launch must not reach the graph.
    step = 1000;
    (args as { step: number }).step = step;
    const graph = gpu.endCapture(stream);
    expect(gpu.isCapturing(stream)).toBe(false);
    expect(graph.nodes).toBe(1);
    expect(asI32(gpu.download(out, 4 * n))).toEqual(new Int32Array(n));

    const exec = gpu.instantiate(graph);
    gpu.destroyGraph(graph);
    gpu.launchGraph(exec, stream);
    gpu.launchGraph(exec, stream);
    expect(asI32(gpu.download(out, 4 * n))).toEqual(new Int32Array(n).fill(6));
    expect(gpu.stats()).toMatchObject({ kernelsLaunched: 0, graphLaunches: 2, nodesReplayed: 2, capturesBegun: 1, capturesFailed: 0 });
  });

  it('re-reads device memory and the pinned host buffer at replay time', () => {
    gpu = new CpuBackend();
    const rng = new SeededRandom(30);
    const n = 16;
    const pinned = gpu.allocHost(4 * n);
    const x = gpu.alloc(4 * n);
    const y = gpu.alloc(4 * n);
    const z = gpu.alloc(4 * n);
    const back = gpu.allocHost(4 * n);
    const stream = gpu.createStream();

    gpu.beginCapture(stream);
    gpu.copyToDeviceAsync(x, pinned, 0, 4 * n, stream);
    gpu.launch(axpb, { grid: 1, block: n, stream }, { y, x, n, a: 2, b: 0 });
    gpu.copyDeviceAsync(z, y, 4 * n, stream);
    gpu.copyToHostAsync(back, 0, z, 4 * n, stream);
    const exec = gpu.instantiate(gpu.endCapture(stream));

    for (let round = 0; round < 3; round++) {
      const xs = rng.normals(n);
      new Float32Array(pinned.bytes.buffer).set(xs);
      gpu.launchGraph(exec, stream);
      const got = new Float32Array(back.bytes.buffer);
      for (let i = 0; i < n; i++) expect(got[i]).toBe(Math.fround(2 * xs[i]!));
    }
    expect(gpu.stats()).toMatchObject({ graphLaunches: 3, nodesReplayed: 12, bytesHostToDevice: 3 * 4 * n, hostToDeviceCopies: 3 });

    // A kernel node reads device memory as it is at replay: change x behind the graph's back.
    const direct = gpu.createStream();
    const graph2 = (() => {
      gpu.beginCapture(stream);
      gpu.launch(axpb, { grid: 1, block: n, stream }, { y, x, n, a: -1, b: 0 });
      return gpu.endCapture(stream);
    })();
    const exec2 = gpu.instantiate(graph2);
    const fresh = rng.normals(n);
    gpu.upload(x, fresh);
    gpu.launchGraph(exec2, direct);
    const ys = asF32(gpu.download(y, 4 * n));
    for (let i = 0; i < n; i++) expect(ys[i]).toBe(-fresh[i]!);
  });

  it('runs work on other streams immediately while a capture is active', () => {
    gpu = new CpuBackend();
    const data = randomBytes(new SeededRandom(31), 64);
    const a = gpu.alloc(64);
    const b = gpu.alloc(64);
    gpu.upload(a, data);
    const capturing = gpu.createStream();
    const other = gpu.createStream();
    gpu.beginCapture(capturing);
    gpu.memsetAsync(b, 7, 64, capturing);
    gpu.copyDeviceAsync(b, a, 64, other);
    gpu.launch(addScalar, { grid: 1, block: 1 }, { out: b, n: 1, step: 1 });
    const graph = gpu.endCapture(capturing);
    expect(graph.nodes).toBe(1);
    const expected = data.slice();
    new Int32Array(expected.buffer, 0, 1)[0]! += 1;
    expect(gpu.download(b, 64)).toEqual(expected);
    expect(gpu.stats().kernelsLaunched).toBe(1);
  });

  it('records events, memsets, gemms and launched graphs as nodes', () => {
    gpu = new CpuBackend();
    const stream = gpu.createStream();
    const p = gpu.alloc(16);
    const ev = gpu.createEvent();
    gpu.beginCapture(stream);
    gpu.memsetAsync(p, 1, 16, stream);
    gpu.recordEvent(ev, stream);
    const inner = gpu.instantiate(gpu.endCapture(stream));
    expectDeviceError(() => gpu.elapsedMs(ev, ev), [/has not been recorded/]);

    gpu.beginCapture(stream);
    gpu.launchGraph(inner, stream);
    gpu.gemm({ m: 1, n: 1, k: 1, a: p, b: p, c: p + 8n, dtype: 'f32', stream });
    const outer = gpu.instantiate(gpu.endCapture(stream));
    gpu.destroyGraphExec(inner);
    gpu.launchGraph(outer, stream);
    // The child graph ran (memset, event), then the gemm: 0x01010101 as f32, squared.
    const v = asF32(gpu.download(p, 12));
    expect(v[2]).toBe(Math.fround(v[0]! * v[0]!));
    expect(gpu.elapsedMs(ev, ev)).toBe(0);
    expect(gpu.stats()).toMatchObject({ graphLaunches: 1, nodesReplayed: 3, gemmsLaunched: 0 });
  });

  const forbidden: [string, (g: GpuBackend, s: { ptr: bigint; host: ReturnType<GpuBackend['allocHost']>; ev: ReturnType<GpuBackend['createEvent']> }) => unknown][] = [
    ['alloc', (g) => g.alloc(16)],
    ['free', (g, s) => g.free(s.ptr)],
    ['allocHost', (g) => g.allocHost(16)],
    ['freeHost', (g, s) => g.freeHost(s.host)],
    ['upload', (g, s) => g.upload(s.ptr, new Uint8Array(4))],
    ['download', (g, s) => g.download(s.ptr, 4)],
    ['synchronize', (g) => g.synchronize()],
    ['synchronize', (g) => g.synchronize(g.defaultStream)],
    ['synchronizeEvent', (g, s) => g.synchronizeEvent(s.ev)],
    ['memoryDigest', (g) => g.memoryDigest()],
  ];

  it.each(forbidden)('%s (case %#) during capture throws, does nothing, and fails endCapture naming it', (name, call) => {
    gpu = new CpuBackend();
    const stream = gpu.createStream();
    const setup = { ptr: gpu.alloc(64), host: gpu.allocHost(64), ev: gpu.createEvent() };
    const spare = gpu.alloc(4);
    gpu.upload(setup.ptr, randomBytes(new SeededRandom(32), 64));
    const before = gpu.stats();
    gpu.beginCapture(stream);
    gpu.memsetAsync(setup.ptr, 0, 64, stream);
    const e = expectDeviceError(() => call(gpu, setup), [new RegExp(`^${name}`), /capture/], 'CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED');
    expect(e.call).toBe(name);
    // Nothing happened: no allocation made or freed, and the recorded memset did not run.
    expect(gpu.stats()).toMatchObject({ liveAllocations: before.liveAllocations, liveHostBytes: before.liveHostBytes });
    // Further work on the invalidated capture is refused, as the driver refuses it.
    expectDeviceError(() => gpu.memsetAsync(setup.ptr, 0, 4, stream), [/invalidated/], 'CUDA_ERROR_STREAM_CAPTURE_INVALIDATED');
    let thrown: unknown;
    try {
      gpu.endCapture(stream);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(CaptureError);
    expect((thrown as CaptureError).reason).toBe(`CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: ${name} during capture`);
    expect(gpu.stats().capturesFailed).toBe(1);
    expect(gpu.isCapturing(stream)).toBe(false);

    // The memset never ran; the forbidden call now works; a new capture on the stream works.
    expect(gpu.download(setup.ptr, 64).some((b) => b !== 0)).toBe(true);
    call(gpu, setup);
    gpu.beginCapture(stream);
    gpu.memsetAsync(spare, 0, 4, stream);
    expect(gpu.endCapture(stream).nodes).toBe(1);
  });

  it('invalidates a capture from a forbidden call on another stream, and names the first call', () => {
    gpu = new CpuBackend();
    const s = gpu.createStream();
    const other = gpu.createStream();
    const p = gpu.alloc(8);
    gpu.beginCapture(s);
    expect(() => gpu.synchronize(other)).toThrow(DeviceError);
    expect(() => gpu.download(p, 8)).toThrow(DeviceError);
    expect(() => gpu.endCapture(s)).toThrow(/synchronize during capture/);
  });

  it('refuses nested begin, end without begin, and destroying a capturing stream', () => {
    gpu = new CpuBackend();
    const s = gpu.createStream();
    expectDeviceError(() => gpu.endCapture(s), [/not capturing/], 'CUDA_ERROR_ILLEGAL_STATE');
    gpu.beginCapture(s);
    expectDeviceError(() => gpu.beginCapture(s), [/already capturing/], 'CUDA_ERROR_ILLEGAL_STATE');
    expectDeviceError(() => gpu.destroyStream(s), [/end the capture first/]);
    expect(gpu.endCapture(s).nodes).toBe(0);
    gpu.destroyStream(s);
    expectDeviceError(() => gpu.beginCapture(s), [/stream \d+ is not a live stream/], 'CUDA_ERROR_INVALID_HANDLE');
  });

  it('refuses destroyed graphs and execs', () => {
    gpu = new CpuBackend();
    const s = gpu.createStream();
    gpu.beginCapture(s);
    const graph = gpu.endCapture(s);
    const exec = gpu.instantiate(graph);
    gpu.destroyGraph(graph);
    expectDeviceError(() => gpu.instantiate(graph), [/graph \d+ is not a live graph/]);
    gpu.launchGraph(exec);
    gpu.destroyGraphExec(exec);
    expectDeviceError(() => gpu.launchGraph(exec), [/launchGraph/, /not a live graph exec/], 'CUDA_ERROR_INVALID_HANDLE');
    expectDeviceError(() => gpu.destroyGraphExec(exec), [/not a live graph exec/]);
  });

  it('reports a replay that touches freed memory, naming the node', () => {
    gpu = new CpuBackend();
    const s = gpu.createStream();
    const p = gpu.alloc(64);
    gpu.beginCapture(s);
    gpu.memsetAsync(p, 0, 64, s);
    gpu.launch(addScalar, { grid: 1, block: 1, stream: s }, { out: p, n: 16, step: 1 });
    const exec = gpu.instantiate(gpu.endCapture(s));
    gpu.free(p);
    const e = expectDeviceError(() => gpu.launchGraph(exec, s), [/use after free/]);
    expect(e.call).toBe('launchGraph node 0 (memset)');
  });
});
