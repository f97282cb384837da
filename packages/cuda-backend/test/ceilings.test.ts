// The ceiling measurements on a fake device with a virtual clock: every copy and GEMM advances
// the clock by what a device of known bandwidth and rate would take, so the figures are exact.
import { DeviceError, InvalidArgumentError, type GemmArgs, type GpuBackend, type Stream } from '@metrale/core';
import { describe, expect, it } from 'vitest';
import { measureCeilings, measureCopyBandwidth, measureGemmRate, timeOnDevice } from '../src/index.js';

const BYTES_PER_S = 4e12; // read + write
const FLOP_PER_S = 800e12;

interface Fake {
  gpu: GpuBackend;
  live: Map<bigint, number>;
  events: Set<number>;
  calls: string[];
  gemms: GemmArgs[];
  /** Advances the clock by `ms`, as work of that length would. */
  tick(ms: number): void;
}

function fakeDevice(options: { gemm?: boolean } = {}): Fake {
  let clock = 0; // ms
  let next = 0x1000n;
  const live = new Map<bigint, number>();
  const events = new Set<number>();
  const recorded = new Map<number, number>();
  const calls: string[] = [];
  const gemms: GemmArgs[] = [];
  let eventId = 0;
  const defaultStream = { id: 0 } as unknown as Stream;
  const check = (ptr: bigint, bytes: number) => {
    for (const [base, size] of live) if (ptr >= base && ptr + BigInt(bytes) <= base + BigInt(size)) return;
    throw new Error(`out of bounds: ${ptr} + ${bytes}`);
  };
  const gpu = {
    kind: 'fake',
    defaultStream,
    alloc(bytes: number) {
      const p = next;
      next += BigInt(bytes + 256);
      live.set(p, bytes);
      return p;
    },
    free(p: bigint) {
      if (!live.delete(p)) throw new Error(`double free ${p}`);
    },
    upload(p: bigint, data: ArrayBufferView) {
      check(p, data.byteLength);
      calls.push('upload');
    },
    copyDeviceAsync(dst: bigint, src: bigint, bytes: number) {
      check(dst, bytes);
      check(src, bytes);
      clock += ((2 * bytes) / BYTES_PER_S) * 1e3;
    },
    gemm(args: GemmArgs) {
      if (!options.gemm) throw new DeviceError('gemm', 'no GEMM library here');
      gemms.push(args);
      clock += ((2 * args.m * args.n * args.k) / FLOP_PER_S) * 1e3;
    },
    synchronize() {
      calls.push('synchronize');
    },
    createEvent() {
      const e = { id: ++eventId };
      events.add(e.id);
      return e;
    },
    recordEvent(e: { id: number }, stream?: Stream) {
      if (stream !== defaultStream) throw new Error('recorded on another stream');
      recorded.set(e.id, clock);
    },
    synchronizeEvent() {},
    elapsedMs(a: { id: number }, b: { id: number }) {
      return recorded.get(b.id)! - recorded.get(a.id)!;
    },
    destroyEvent(e: { id: number }) {
      events.delete(e.id);
    },
  };
  return { gpu: gpu as unknown as GpuBackend, live, events, calls, gemms, tick: (ms) => (clock += ms) };
}

describe('timeOnDevice', () => {
  it('warms up untimed, then returns the median, fastest and slowest of the timed calls, per unit', () => {
    const fake = fakeDevice();
    const seen: number[] = [];
    const durations = [5, 1, 4, 2]; // median of an even count: the mean of the middle two
    const t = timeOnDevice(fake.gpu, (i) => {
      seen.push(i);
      fake.tick(seen.length <= 2 ? 1000 : durations[i]! * 2);
    }, { reps: 4, warmup: 2, inner: 2 });
    expect(seen).toEqual([0, 1, 0, 1, 2, 3]);
    expect(t).toEqual({ ms: 3, min: 1, max: 5, reps: 4 });
    expect(fake.events.size).toBe(0);
    expect(timeOnDevice(fake.gpu, (i) => fake.tick([3, 9, 1][i]!), { reps: 3, warmup: 0 }).ms).toBe(3);
  });

  it('refuses repetitions it cannot take a median of', () => {
    const fake = fakeDevice();
    expect(() => timeOnDevice(fake.gpu, () => {}, { reps: 0 })).toThrow(InvalidArgumentError);
    expect(() => timeOnDevice(fake.gpu, () => {}, { warmup: -1 })).toThrow(InvalidArgumentError);
    expect(() => timeOnDevice(fake.gpu, () => {}, { inner: 0 })).toThrow(InvalidArgumentError);
    expect(fake.events.size).toBe(0);
  });
});

describe('the ceilings', () => {
  it('copy bandwidth: bytes read + written over the median copy time, random data, buffers freed', () => {
    const fake = fakeDevice();
    const c = measureCopyBandwidth(fake.gpu, { bytes: 200 * 2 ** 20, reps: 5 });
    expect(c.bytes).toBe(400 * 2 ** 20);
    expect(c.bytesPerS).toBeCloseTo(BYTES_PER_S, -6);
    expect(c.reps).toBe(5);
    // One 64 MiB random block uploaded, the rest copied from it on the device.
    expect(fake.calls.filter((x) => x === 'upload')).toHaveLength(1);
    expect(fake.live.size).toBe(0);
    expect(fake.events.size).toBe(0);
  });

  it('GEMM rate: 2n³ over the median time of x·Wᵀ, bf16 by default', () => {
    const fake = fakeDevice({ gemm: true });
    const g = measureGemmRate(fake.gpu, { size: 512, reps: 4, warmup: 1 });
    expect(g).toMatchObject({ dtype: 'bf16', size: 512, flop: 2 * 512 ** 3, reps: 4 });
    expect(g.flopPerS).toBeCloseTo(FLOP_PER_S, -9);
    expect(fake.gemms).toHaveLength(5);
    expect(fake.gemms[0]).toMatchObject({ m: 512, n: 512, k: 512, dtype: 'bf16', transB: true });
    expect(measureGemmRate(fake.gpu, { size: 64, dtype: 'f32', reps: 1 }).dtype).toBe('f32');
    expect(fake.live.size).toBe(0);
  });

  it('measureCeilings measures both and logs a line for each', () => {
    const fake = fakeDevice({ gemm: true });
    const lines: string[] = [];
    const c = measureCeilings(fake.gpu, { copyBytes: 64 * 2 ** 20, gemmSize: 256, log: (l) => lines.push(l) });
    expect(c.errors).toEqual([]);
    expect(c.copy!.bytesPerS).toBeCloseTo(BYTES_PER_S, -6);
    expect(c.copy!.reps).toBe(20);
    expect(c.gemm!.flopPerS).toBeCloseTo(FLOP_PER_S, -9);
    expect(c.gemm!.reps).toBe(10);
    expect(lines).toEqual([
      `copy: 64 MiB d2d, ${c.copy!.ms.toFixed(3)} ms → 4.000 TB/s (read + write)`,
      `gemm: bf16 256³, ${c.gemm!.ms.toFixed(3)} ms → 800.0 TFLOP/s`,
    ]);
  });

  it('a ceiling that fails is listed in errors, the other still measured, and nothing leaks', () => {
    const fake = fakeDevice({ gemm: false });
    const lines: string[] = [];
    const c = measureCeilings(fake.gpu, { copyBytes: 2 ** 20, gemmSize: 64, log: (l) => lines.push(l) });
    expect(c.copy).toBeDefined();
    expect(c.gemm).toBeUndefined();
    expect(c.errors).toEqual(['bf16 GEMM: gemm: no GEMM library here']);
    expect(lines[1]).toBe('bf16 GEMM not measured: gemm: no GEMM library here');
    expect(fake.live.size).toBe(0);
    expect(fake.events.size).toBe(0);
  });
});
