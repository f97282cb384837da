// The two ceilings every GPU figure is compared with, measured the same way by every bench
// (packages/*/bench): device-to-device copy bandwidth (bytes read + written) and the bf16 GEMM
// rate. Device times come from events around each repetition, after untimed warm-up runs; the
// figure is the median. Inputs are random (GEMM operands in [−1, 1), never NaN or infinity). Written
// against core's GpuBackend, so any backend can be measured (the CPU one, a stand-in, CUDA).
import { randomFillSync } from 'node:crypto';
import { InvalidArgumentError, toBf16, type DevicePtr, type GpuBackend, type Stream } from '@metrale/core';

const MiB = 2 ** 20;

/** Device time of one unit of work over the timed repetitions, in milliseconds. */
export interface DeviceTiming {
  /** The median. */
  readonly ms: number;
  readonly min: number;
  readonly max: number;
  /** Timed repetitions. */
  readonly reps: number;
}

export interface TimeOnDeviceOptions {
  /** The stream `fn` enqueues on, where the events are recorded (default: the backend's default stream). */
  readonly stream?: Stream;
  /** Timed repetitions (default 20). */
  readonly reps?: number;
  /** Untimed runs first (default 3). */
  readonly warmup?: number;
  /** Units of work one call of `fn` enqueues; the times are per unit (default 1). */
  readonly inner?: number;
}

/**
 * Times `fn` on the device: `warmup` untimed calls and a wait for the stream, then `reps` calls,
 * each between two events recorded on the stream and waited for. `fn` gets the call's index
 * (from 0 in the warm-up, and again from 0 in the timed calls), so it can rotate its inputs.
 */
export function timeOnDevice(gpu: GpuBackend, fn: (i: number) => void, options: TimeOnDeviceOptions = {}): DeviceTiming {
  const stream = options.stream ?? gpu.defaultStream;
  const reps = options.reps ?? 20;
  const warmup = options.warmup ?? 3;
  const inner = options.inner ?? 1;
  if (!Number.isInteger(reps) || reps < 1) throw new InvalidArgumentError(`timeOnDevice: reps must be a whole number ≥ 1, got ${reps}`);
  if (!Number.isInteger(warmup) || warmup < 0) throw new InvalidArgumentError(`timeOnDevice: warmup must be a whole number ≥ 0, got ${warmup}`);
  if (!(inner > 0)) throw new InvalidArgumentError(`timeOnDevice: inner must be positive, got ${inner}`);
  const start = gpu.createEvent();
  const end = gpu.createEvent();
  try {
    for (let i = 0; i < warmup; i++) fn(i);
    gpu.synchronize(stream);
    const ms: number[] = [];
    for (let i = 0; i < reps; i++) {
      gpu.recordEvent(start, stream);
      fn(i);
      gpu.recordEvent(end, stream);
      gpu.synchronizeEvent(end);
      ms.push(gpu.elapsedMs(start, end) / inner);
    }
    ms.sort((a, b) => a - b);
    const mid = ms.length >> 1;
    const median = ms.length % 2 ? ms[mid]! : (ms[mid - 1]! + ms[mid]!) / 2;
    return { ms: median, min: ms[0]!, max: ms[ms.length - 1]!, reps };
  } finally {
    gpu.destroyEvent(start);
    gpu.destroyEvent(end);
  }
}

export interface CopyBandwidthOptions {
  readonly stream?: Stream;
  /** Size of the source, and of the destination (default 1 GiB: far beyond any L2). */
  readonly bytes?: number;
  /** Timed copies (default 20). */
  readonly reps?: number;
  /** Untimed copies first (default 3). */
  readonly warmup?: number;
}

export interface CopyCeiling extends DeviceTiming {
  /** Bytes one copy moves: read + written, twice the buffer size. */
  readonly bytes: number;
  /** `bytes` over the median time. */
  readonly bytesPerS: number;
}

/** The device-to-device copy bandwidth (read + write) of one `copyDeviceAsync` of random data. */
export function measureCopyBandwidth(gpu: GpuBackend, options: CopyBandwidthOptions = {}): CopyCeiling {
  const bytes = options.bytes ?? 1024 * MiB;
  const stream = options.stream ?? gpu.defaultStream;
  return withBuffers(gpu, [bytes, bytes], ([src, dst]) => {
    fillRandom(gpu, src, bytes, stream, (n) => randomFillSync(new Uint8Array(n)));
    const t = timeOnDevice(gpu, () => gpu.copyDeviceAsync(dst, src, bytes, stream), {
      stream, reps: options.reps ?? 20, warmup: options.warmup ?? 3,
    });
    return { ...t, bytes: 2 * bytes, bytesPerS: (2 * bytes) / (t.ms * 1e-3) };
  });
}

export interface GemmRateOptions {
  readonly stream?: Stream;
  /** n of the n × n × n GEMM (default 8192). */
  readonly size?: number;
  /** Element type of A, B and C (default bf16); accumulation is f32 either way. */
  readonly dtype?: 'bf16' | 'f32';
  /** Timed GEMMs (default 10). */
  readonly reps?: number;
  /** Untimed GEMMs first (default 3). */
  readonly warmup?: number;
}

export interface GemmCeiling extends DeviceTiming {
  readonly dtype: 'bf16' | 'f32';
  readonly size: number;
  /** 2·n³. */
  readonly flop: number;
  /** `flop` over the median time. */
  readonly flopPerS: number;
}

/** The rate of the backend's `gemm` on random n × n operands, as `x · Wᵀ` (row-major A, B stored n × k). */
export function measureGemmRate(gpu: GpuBackend, options: GemmRateOptions = {}): GemmCeiling {
  const n = options.size ?? 8192;
  const dtype = options.dtype ?? 'bf16';
  const stream = options.stream ?? gpu.defaultStream;
  const bytes = n * n * (dtype === 'bf16' ? 2 : 4);
  return withBuffers(gpu, [bytes, bytes, bytes], ([a, b, c]) => {
    const block = (size: number) => (dtype === 'bf16' ? toBf16(randomF32(size / 2)) : randomF32(size / 4));
    fillRandom(gpu, a, bytes, stream, block);
    fillRandom(gpu, b, bytes, stream, block);
    const t = timeOnDevice(gpu, () => gpu.gemm({ m: n, n, k: n, a, b, c, dtype, transB: true, stream }), {
      stream, reps: options.reps ?? 10, warmup: options.warmup ?? 3,
    });
    const flop = 2 * n ** 3;
    return { ...t, dtype, size: n, flop, flopPerS: flop / (t.ms * 1e-3) };
  });
}

export interface CeilingsOptions {
  readonly stream?: Stream;
  /** Size of each copy buffer (default 1 GiB). */
  readonly copyBytes?: number;
  /** n of the bf16 GEMM (default 8192). */
  readonly gemmSize?: number;
  /** Timed copies (default 20). */
  readonly copyReps?: number;
  /** Timed GEMMs (default 10). */
  readonly gemmReps?: number;
  /** Untimed runs before each (default 3). */
  readonly warmup?: number;
  /** Called with one line per ceiling as it is measured (or why it could not be). */
  readonly log?: (line: string) => void;
}

export interface Ceilings {
  /** Undefined when the copy could not be measured (then `errors` says why). */
  readonly copy: CopyCeiling | undefined;
  /** The bf16 GEMM; undefined when it could not be measured (no GEMM library, …). */
  readonly gemm: GemmCeiling | undefined;
  /** One line per ceiling that failed: `copy bandwidth: …`, `bf16 GEMM: …`. */
  readonly errors: readonly string[];
}

/**
 * Measures both ceilings: the copy bandwidth, then the bf16 GEMM rate. A ceiling that fails is
 * left undefined and listed in `errors` (after a wait for the device, which a sticky error may
 * fail too), and the other is still measured; every buffer and event is freed either way.
 */
export function measureCeilings(gpu: GpuBackend, options: CeilingsOptions = {}): Ceilings {
  const log = options.log ?? (() => {});
  const errors: string[] = [];
  const attempt = <T>(name: string, measure: () => T): T | undefined => {
    try {
      return measure();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      errors.push(`${name}: ${message}`);
      log(`${name} not measured: ${message}`);
      try {
        gpu.synchronize();
      } catch {
        // a sticky device error: whatever runs next reports it too
      }
      return undefined;
    }
  };
  const { stream, warmup } = options;
  const copy = attempt('copy bandwidth', () => measureCopyBandwidth(gpu, { stream, bytes: options.copyBytes, reps: options.copyReps, warmup }));
  if (copy) {
    log(`copy: ${(copy.bytes / 2 / MiB).toFixed(0)} MiB d2d, ${copy.ms.toFixed(3)} ms → ${(copy.bytesPerS / 1e12).toFixed(3)} TB/s (read + write)`);
  }
  const gemm = attempt('bf16 GEMM', () => measureGemmRate(gpu, { stream, size: options.gemmSize, dtype: 'bf16', reps: options.gemmReps, warmup }));
  if (gemm) log(`gemm: bf16 ${gemm.size}³, ${gemm.ms.toFixed(3)} ms → ${(gemm.flopPerS / 1e12).toFixed(1)} TFLOP/s`);
  return { copy, gemm, errors };
}

/** Runs `body` with fresh device buffers of the given sizes, freeing them after it, also when it throws. */
function withBuffers<const S extends readonly number[], T>(gpu: GpuBackend, sizes: S, body: (ptrs: { [K in keyof S]: DevicePtr }) => T): T {
  const ptrs: DevicePtr[] = [];
  try {
    for (const bytes of sizes) ptrs.push(gpu.alloc(bytes));
    return body(ptrs as { [K in keyof S]: DevicePtr });
  } finally {
    for (const p of ptrs) gpu.free(p);
  }
}

/** Fills `bytes` at `ptr`: one random block of up to 64 MiB uploaded, then repeated on the device. */
function fillRandom(gpu: GpuBackend, ptr: DevicePtr, bytes: number, stream: Stream, makeBlock: (bytes: number) => ArrayBufferView): void {
  const blockBytes = Math.min(bytes, 64 * MiB);
  gpu.upload(ptr, makeBlock(blockBytes));
  for (let off = blockBytes; off < bytes; off += blockBytes) {
    gpu.copyDeviceAsync(ptr + BigInt(off), ptr, Math.min(blockBytes, bytes - off), stream);
  }
  gpu.synchronize(stream);
}

/** `count` random values in [−1, 1), none of them zero. */
function randomF32(count: number): Float32Array {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = Math.random() * 2 - 1 || 0.5;
  return out;
}
