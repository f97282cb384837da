import { DeviceError, defineKernel, defineKernelModule } from '@metrale/core';
import { expect, it } from 'vitest';
import { READ_AHEAD_MODES, testKernels } from '../../src/index.js';
import { asF32, asU32, describeGpu, randomF32, useBackend } from './gpu-setup.js';

describeGpu('kernel launches', () => {
  const gpu = useBackend();

  it('passes every parameter type intact, with 4/8-byte alignment padding', () => {
    const b = gpu();
    const out = b.alloc(7 * 8);
    const args = { out, a: -123456789, c: -(2n ** 62n) + 5n, e: 3.25, f: -Math.PI * 1e100, b: 0xfffffffe, d: 2n ** 64n - 2n, g: -7 };
    b.launch(testKernels.paramsProbe, { grid: 1, block: 32 }, args);
    const words = new BigUint64Array(b.download(out, 56).buffer);
    const f64 = new DataView(new ArrayBuffer(8));
    f64.setFloat64(0, args.f, true);
    expect([...words]).toEqual([
      BigInt.asUintN(64, BigInt(args.a)),
      BigInt.asUintN(64, args.c),
      0x40500000n, // 3.25f
      f64.getBigUint64(0, true),
      BigInt(args.b),
      args.d,
      BigInt.asUintN(64, BigInt(args.g)),
    ]);
    b.free(out);
  });

  it('adds vectors, fills and scales (f32 scalar argument), matching the CPU implementations', () => {
    const b = gpu();
    const n = 100_003;
    const x = randomF32(n), y = randomF32(n);
    const a = b.alloc(n * 4), c = b.alloc(n * 4), o = b.alloc(n * 4);
    b.upload(a, x);
    b.upload(c, y);
    b.launch(testKernels.vectorAddF32, { grid: 256, block: 256 }, { a, b: c, out: o, n });
    b.launch(testKernels.scaleInplaceF32, { grid: [64, 1, 1], block: [128] }, { x: o, scale: 0.1, n });
    const got = asF32(b.download(o, n * 4));
    const s = Math.fround(0.1);
    for (let i = 0; i < n; i += 997) expect(got[i]).toBe(Math.fround(Math.fround(x[i]! + y[i]!) * s));
    expect(got[n - 1]).toBe(Math.fround(Math.fround(x[n - 1]! + y[n - 1]!) * s));
    for (const p of [a, c, o]) b.free(p);
  });

  it('launches with dynamic shared memory above the default 48 KiB (opt-in)', () => {
    const b = gpu();
    const n = 16384; // 64 KiB of shared memory
    const x = randomF32(n);
    const src = b.alloc(n * 4), dst = b.alloc(n * 4);
    b.upload(src, x);
    b.launch(testKernels.sharedReverseF32, { grid: 1, block: 1024, sharedBytes: n * 4 }, { src, dst, n });
    const got = asF32(b.download(dst, n * 4));
    expect(got[0]).toBe(x[n - 1]);
    expect(got[n - 1]).toBe(x[0]);
    expect(got[1234]).toBe(x[n - 1 - 1234]);
    b.free(src);
    b.free(dst);
  });

  it('rejects bad launches before the driver sees them', () => {
    const b = gpu();
    const p = b.alloc(16);
    expect(() => b.launch(testKernels.fillU32, { grid: 1, block: 2048 }, { dst: p, value: 1, n: 4 })).toThrow(
      expect.objectContaining({ code: 'CUDA_ERROR_INVALID_VALUE' }),
    );
    expect(() => b.launch(testKernels.fillU32, { grid: 1, block: 32 }, { dst: p, value: -1, n: 4 })).toThrow(/32-bit unsigned/);
    b.free(p);
  });

  it('names the missing symbol, the missing fatbin and the missing CUDA entry', () => {
    const b = gpu();
    const missingSymbol = defineKernel({ name: 'test.missing', params: {}, cuda: { module: testKernels.module, symbol: 'no_such_kernel' } });
    let error: DeviceError | undefined;
    try {
      b.launch(missingSymbol, { grid: 1, block: 1 }, {});
    } catch (e) {
      error = e as DeviceError;
    }
    expect(error).toBeInstanceOf(DeviceError);
    expect(error!.call).toBe('cuModuleGetFunction');
    expect(error!.code).toBe('CUDA_ERROR_NOT_FOUND');
    expect(error!.message).toMatch(/no_such_kernel/);

    const noFatbin = defineKernel({
      name: 'test.nofatbin', params: {},
      cuda: { module: defineKernelModule('gone', '/nonexistent/gone.fatbin'), symbol: 'noop' },
    });
    expect(() => b.launch(noFatbin, { grid: 1, block: 1 }, {})).toThrow(/built without nvcc/);
    const cpuOnly = defineKernel({ name: 'test.cpuonly', params: {}, cpu: () => {} });
    expect(() => b.launch(cpuOnly, { grid: 1, block: 1 }, {})).toThrow(/no CUDA entry/);
  });

  it("read_xor_u32 (the kernel-chain bench's reader): each CTA's xor of the words its threads read, grid-stride", () => {
    const b = gpu();
    const n4 = 300_001; // not a multiple of the grid's threads
    const [ctas, threads] = [37, 256];
    const words = new Uint32Array(4 * n4);
    for (let i = 0; i < words.length; i++) words[i] = Math.floor(Math.random() * 2 ** 32) >>> 0;
    const want = new Uint32Array(ctas);
    for (let i = 0; i < n4; i++) {
      const cta = Math.floor((i % (ctas * threads)) / threads);
      want[cta] = (want[cta]! ^ words[4 * i]! ^ words[4 * i + 1]! ^ words[4 * i + 2]! ^ words[4 * i + 3]!) >>> 0;
    }
    const src = b.alloc(words.byteLength), sink = b.alloc(4 * ctas);
    try {
      b.upload(src, words);
      b.launch(testKernels.readXorU32, { grid: ctas, block: threads }, { src, sink, n4 });
      expect(Array.from(asU32(b.download(sink, 4 * ctas)))).toEqual(Array.from(want));
    } finally {
      b.free(src);
      b.free(sink);
    }
  });

  it("read_xor_ahead_u32 (the kernel-chain bench's reader that starts early): each CTA's xor of its contiguous share, each way of reading ahead, launched early after a writer", () => {
    const b = gpu();
    const n4 = 300_001;
    const [ctas, threads] = [37, 256];
    const per = Math.ceil(n4 / ctas);
    const words = new Uint32Array(4 * n4);
    for (let i = 0; i < words.length; i++) words[i] = Math.floor(Math.random() * 2 ** 32) >>> 0;
    const want = new Uint32Array(ctas);
    for (let i = 0; i < n4; i++) {
      const cta = Math.floor(i / per);
      want[cta] = (want[cta]! ^ words[4 * i]! ^ words[4 * i + 1]! ^ words[4 * i + 2]! ^ words[4 * i + 3]!) >>> 0;
    }
    const src = b.alloc(words.byteLength), sink = b.alloc(4 * ctas), spun = b.alloc(4);
    try {
      b.upload(src, words);
      for (const ahead of Object.values(READ_AHEAD_MODES)) {
        b.launch(testKernels.fillU32, { grid: 1, block: 32 }, { dst: sink, value: 0xffffffff, n: ctas });
        // Early after a kernel that writes nothing it reads: its result must not depend on when it starts.
        b.launch(testKernels.spinCycles, { grid: 1, block: 32 }, { sink: spun, cycles: 20_000 });
        b.launch(testKernels.readXorAheadU32, { grid: ctas, block: threads, earlyStart: true }, { src, sink, n4, ahead });
        expect(Array.from(asU32(b.download(sink, 4 * ctas))), `ahead ${ahead}`).toEqual(Array.from(want));
      }
      expect(asU32(b.download(spun, 4))[0]).toBeGreaterThanOrEqual(20_000);
    } finally {
      b.free(src);
      b.free(sink);
      b.free(spun);
    }
  });

  it('early start: a kernel that waits for the previous one sees all its writes, eager and replayed from a graph', () => {
    const b = gpu();
    const n = 1 << 22; // a producer long enough for the early kernel to start while it runs
    const src = b.alloc(n * 4), dst = b.alloc(n * 4);
    const config = { grid: 1024, block: 256 };
    const expectAll = (v: number) => {
      const got = asU32(b.download(dst, n * 4));
      let bad = 0;
      for (let i = 0; i < n; i++) if (got[i] !== v) bad++;
      expect(bad).toBe(0);
    };
    try {
      for (const v of [7, 0xdeadbeef]) {
        b.launch(testKernels.fillU32, config, { dst: src, value: v, n });
        b.launch(testKernels.copyAfterU32, { ...config, earlyStart: true }, { dst, src, n });
        expectAll(v);
      }
      const s = b.createStream();
      b.beginCapture(s);
      b.launch(testKernels.fillU32, { ...config, stream: s }, { dst: src, value: 3, n });
      b.launch(testKernels.copyAfterU32, { ...config, stream: s, earlyStart: true }, { dst, src, n });
      const graph = b.endCapture(s);
      const exec = b.instantiate(graph);
      b.destroyGraph(graph);
      b.launchGraph(exec, s);
      b.synchronize();
      expectAll(3);
      b.destroyGraphExec(exec);
      b.destroyStream(s);
      expect(() => b.launch(testKernels.copyAfterU32, { ...config, earlyStart: 1 as unknown as boolean }, { dst, src, n })).toThrow(/earlyStart must be a boolean, got 1/);
    } finally {
      b.free(src);
      b.free(dst);
    }
  });
});
