import type { DevicePtr } from './device-ptr.js';
import type { FloatDtype } from './dtype.js';
import type { Kernel, KernelArgs, KernelParams } from './kernel.js';
import type { Communicator, CommunicatorId } from '../parallel/communicator.js';

/** An ordered queue of device work. Opaque: only the backend that made it may use it. */
export interface Stream {
  readonly backend: string;
  readonly id: number;
}

/** A point in a stream's work, for timing and waiting. */
export interface GpuEvent {
  readonly backend: string;
  readonly id: number;
}

/** A captured, not yet instantiated, sequence of device work. */
export interface Graph {
  readonly backend: string;
  readonly id: number;
  /** Number of nodes (kernel launches, copies, memsets) the capture recorded. */
  readonly nodes: number;
}

/** An instantiated graph, launchable any number of times. */
export interface GraphExec {
  readonly backend: string;
  readonly id: number;
}

/** Page-locked host memory: the staging area of asynchronous copies. */
export interface HostBuffer {
  readonly bytes: Uint8Array;
}

export interface DeviceInfo {
  readonly index: number;
  readonly name: string;
  readonly computeCapability: readonly [number, number];
  readonly totalMemory: number;
  readonly multiprocessors: number;
  readonly l2CacheBytes: number;
}

export interface LaunchConfig {
  readonly grid: number | readonly number[];
  readonly block: number | readonly number[];
  readonly sharedBytes?: number;
  readonly stream?: Stream;
  /**
   * The kernel may start before the previous kernel on its stream has finished (CUDA's
   * programmatic dependent launch: its blocks may run once the previous kernel's have all
   * started). The kernel must say in its definition that it may (`defineKernel`'s `earlyStart`;
   * backends refuse the flag otherwise); what it does before its wait overlaps that kernel's tail.
   * Backends without it launch in stream order, which keeps the same contract. Default: the
   * kernel's declaration (a 'wait-first' kernel starts early, others do not).
   */
  readonly earlyStart?: boolean;
}

/**
 * C = alpha · op(A) · op(B) + beta · C, all row-major. op(A) is m×k, op(B) is k×n, C is m×n.
 * `transB: true` with B stored n×k is the `x · Wᵀ` of a Hugging Face Linear.
 */
export interface GemmArgs {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  readonly a: DevicePtr;
  readonly b: DevicePtr;
  readonly c: DevicePtr;
  readonly transA?: boolean;
  readonly transB?: boolean;
  /** Leading dimensions in elements; default: the packed row length. */
  readonly lda?: number;
  readonly ldb?: number;
  readonly ldc?: number;
  /** Element type of A, and of B unless `bDtype` says otherwise. */
  readonly dtype: FloatDtype;
  /**
   * B stored as FP8 E4M3 codes with f32 block scales (`bScales`, [⌈n/128⌉][⌈k/128⌉], one per
   * 128 × 128 block): B[j][q] = code × bScales[j / 128][q / 128]. Needs `transB` and a packed B
   * (ldb = k); A is bf16 or f16. The product is the one with the dequantized B, accumulated in f32.
   */
  readonly bDtype?: 'f8e4m3';
  readonly bScales?: DevicePtr;
  /** Element type of C; default: `dtype`. Accumulation is always f32. */
  readonly outDtype?: FloatDtype;
  readonly alpha?: number;
  readonly beta?: number;
  readonly stream?: Stream;
}

/** `dst[i] = src[i]` for `count` elements, converted between float types (rounded to nearest even). */
export interface ConvertArgs {
  readonly src: DevicePtr;
  readonly srcDtype: FloatDtype;
  readonly dst: DevicePtr;
  readonly dstDtype: FloatDtype;
  readonly count: number;
  readonly stream?: Stream;
}

/**
 * The device surface layers and the driver use. Both backends implement it with the semantics of
 * the CUDA driver API: work on a stream is ordered; while a stream is capturing, launches and
 * asynchronous copies on it are recorded, not run, with their argument values of that moment;
 * calls CUDA forbids during capture (synchronous copies, allocation, synchronisation) invalidate
 * the capture, which then fails at `endCapture` with a `CaptureError`.
 */
export interface GpuBackend {
  /** 'cpu' or 'cuda'. */
  readonly kind: string;
  readonly device: DeviceInfo;
  /** A stream of the backend's own (never CUDA's legacy NULL stream), so it can be captured. */
  readonly defaultStream: Stream;

  alloc(bytes: number): DevicePtr;
  free(ptr: DevicePtr): void;
  /**
   * Device memory free for new allocations and in total, in bytes (free counts what the backend
   * keeps cached for reuse). Optional: a backend that cannot tell leaves it out, and memory-sized
   * pools then need an explicit size.
   */
  memoryInfo?(): { readonly free: number; readonly total: number };
  allocHost(bytes: number): HostBuffer;
  freeHost(buffer: HostBuffer): void;

  /** Fills `bytes` bytes at `ptr` with `value` (0..255), in stream order. */
  memsetAsync(ptr: DevicePtr, value: number, bytes: number, stream?: Stream): void;
  /** Host (pinned) → device, in stream order; the host bytes are read when the copy runs. */
  copyToDeviceAsync(dst: DevicePtr, src: HostBuffer, srcOffset: number, bytes: number, stream?: Stream): void;
  /** Device → host (pinned), in stream order. */
  copyToHostAsync(dst: HostBuffer, dstOffset: number, src: DevicePtr, bytes: number, stream?: Stream): void;
  copyDeviceAsync(dst: DevicePtr, src: DevicePtr, bytes: number, stream?: Stream): void;
  /** Synchronous copy from pageable host memory; waits for the device. Forbidden during capture. */
  upload(dst: DevicePtr, data: ArrayBufferView): void;
  /** Synchronous copy to a new host array; waits for the device. Forbidden during capture. */
  download(src: DevicePtr, bytes: number): Uint8Array;

  createStream(): Stream;
  destroyStream(stream: Stream): void;
  /** Waits for a stream, or for the whole device when no stream is given. */
  synchronize(stream?: Stream): void;

  createEvent(): GpuEvent;
  recordEvent(event: GpuEvent, stream?: Stream): void;
  synchronizeEvent(event: GpuEvent): void;
  /** Milliseconds between two recorded, completed events. */
  elapsedMs(start: GpuEvent, end: GpuEvent): number;
  destroyEvent(event: GpuEvent): void;

  beginCapture(stream: Stream): void;
  /** Ends the capture; throws `CaptureError` when it was invalidated. */
  endCapture(stream: Stream): Graph;
  isCapturing(stream: Stream): boolean;
  instantiate(graph: Graph): GraphExec;
  launchGraph(exec: GraphExec, stream?: Stream): void;
  destroyGraph(graph: Graph): void;
  destroyGraphExec(exec: GraphExec): void;

  launch<P extends KernelParams>(kernel: Kernel<P>, config: LaunchConfig, args: KernelArgs<P>): void;
  gemm(args: GemmArgs): void;
  /** An element-wise type conversion, in stream order (capturable, like a launch). */
  convert(args: ConvertArgs): void;

  /**
   * Collectives across devices (tensor and expert parallelism), where the backend has them:
   * `createCommunicatorId(size)` on one rank makes the id every rank of a group of `size` joins
   * with `joinCommunicator(id, rank)`, each on its own backend (one device, one thread). Joining
   * may wait until every rank has joined. Absent: the backend runs one device only.
   */
  createCommunicatorId?(size: number): CommunicatorId;
  joinCommunicator?(id: CommunicatorId, rank: number): Communicator;

  /**
   * A digest of every live allocation's contents (for tests: "nothing was written").
   * Synchronous; forbidden during capture.
   */
  memoryDigest(): string;

  /** Frees everything this backend allocated. The backend is unusable afterwards. */
  dispose(): void;
}

/** What `probe()` of a backend package reports, without throwing. */
export interface BackendProbe {
  readonly available: boolean;
  /** Why the backend is not available, or a one-line description when it is. */
  readonly reason: string;
  readonly devices: readonly DeviceInfo[];
}
