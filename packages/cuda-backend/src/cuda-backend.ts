// The CUDA device behind the GpuBackend contract. The native addon makes the driver calls; this
// layer validates arguments, owns the handle objects, keeps the contract's capture rules
// (CaptureTracker) and turns every failure into a DeviceError that names the driver call and its
// CUresult (or cuBLASLt status).
import { createHash } from 'node:crypto';
import {
  CaptureError,
  DeviceError,
  InvalidArgumentError,
  floatBytes,
  toDims,
  toEarlyStart,
  validateKernelArgs,
  type Communicator,
  type CommunicatorId,
  type ConvertArgs,
  type DeviceInfo,
  type DevicePtr,
  type GemmArgs,
  type GpuBackend,
  type GpuEvent,
  type Graph,
  type GraphExec,
  type HostBuffer,
  type Kernel,
  type KernelArgs,
  type KernelParams,
  type LaunchConfig,
  type Stream,
} from '@metrale/core';
import { requireAddon, toDeviceError, type NativeDevice, type NativePoolStats } from './addon.js';
import { AllocationMap } from './allocation-map.js';
import { LAUNCH_EARLY_START, LAUNCH_HEADER_BYTES, packArgs } from './arg-packing.js';
import { CaptureTracker } from './capture-tracker.js';
import { cublasLtCandidates, CUBLASLT_HINT } from './cublaslt-paths.js';
import {
  convertKernel, convertLaunch, fp8GemmKernel, gemmFp8RowsKernel, gemmFp8RowsLaunch, gemmFp8RowsWideKernel, gemmFp8TiledKernel, gemmFp8TiledLaunch,
} from './backend-kernels.js';
import { GEMM_TYPE, resolveGemm } from './gemm-args.js';
import { KernelRegistry } from './kernel-registry.js';
import { NcclCommunicator, ncclIdBytes } from './nccl-communicator.js';
import { probe, toDeviceInfo } from './probe.js';

const BACKEND = 'cuda';
const DIGEST_CHUNK = 64 << 20;
// The CUresult names the CPU reference backend uses for the same mistakes, so errors match.
const INVALID_HANDLE = 'CUDA_ERROR_INVALID_HANDLE';
const INVALID_VALUE = 'CUDA_ERROR_INVALID_VALUE';
const ILLEGAL_ADDRESS = 'CUDA_ERROR_ILLEGAL_ADDRESS';
const ILLEGAL_STATE = 'CUDA_ERROR_ILLEGAL_STATE';

export interface CudaBackendOptions {
  /** Device ordinal (default 0). */
  readonly device?: number;
}

export type PoolStats = NativePoolStats;

/** The cuBLASLt the backend loaded, or why none. */
export type GemmLibrary =
  | { readonly loaded: true; readonly path: string; readonly version: number }
  | { readonly loaded: false; readonly reason: string };

function hex(ptr: DevicePtr): string {
  return `0x${ptr.toString(16)}`;
}

function checkCount(value: number, what: string): void {
  if (!Number.isSafeInteger(value) || value < 0) throw new InvalidArgumentError(`${what} must be a non-negative integer, got ${value}`);
}

/** cuBLASLt is opened with the device, outside any capture: a GEMM recorded into a graph must not allocate. */
function openGemm(native: NativeDevice, loadCublasLt: ReturnType<typeof requireAddon>['loadCublasLt']): GemmLibrary {
  try {
    const lt = loadCublasLt(cublasLtCandidates());
    if (!lt.ok) {
      const tried = lt.tried.map((t) => `${t.path} (${t.error})`).join('; ');
      return { loaded: false, reason: `cuBLASLt not found; tried ${tried}. To use gemm(), ${CUBLASLT_HINT}` };
    }
    native.gemmInit();
    return { loaded: true, path: lt.path, version: lt.version };
  } catch (error) {
    return { loaded: false, reason: `cuBLASLt could not be initialised: ${toDeviceError(error, 'gemmInit').message}` };
  }
}

export class CudaBackend implements GpuBackend {
  readonly kind = 'cuda';
  readonly device: DeviceInfo;
  readonly defaultStream: Stream;
  readonly gemmLibrary: GemmLibrary;

  readonly #native: NativeDevice;
  readonly #maxSharedOptin: number;
  readonly #kernels: KernelRegistry;
  readonly #captures = new CaptureTracker();
  readonly #record: DataView;
  readonly #words: Uint32Array;
  readonly #live = new AllocationMap();
  readonly #hosts = new Map<HostBuffer, number>();
  readonly #streams = new Map<number, Stream>();
  readonly #events = new Map<GpuEvent, number>();
  readonly #graphs = new Set<Graph>();
  readonly #execs = new Set<GraphExec>();
  #disposed = false;

  /**
   * Opens a device: its primary context, a non-blocking default stream and, when cuBLASLt is
   * found, a GEMM workspace. Throws DeviceError with probe()'s reason where CUDA is unavailable.
   */
  static create(options: CudaBackendOptions = {}): CudaBackend {
    const found = probe();
    if (!found.available) throw new DeviceError('CudaBackend.create', found.reason);
    const index = options.device ?? 0;
    if (!Number.isInteger(index) || index < 0 || index >= found.devices.length) {
      throw new InvalidArgumentError(`CudaBackend.create: device ${index} does not exist (${found.devices.length} device(s))`);
    }
    const addon = requireAddon('CudaBackend.create');
    let native: NativeDevice;
    try {
      native = new addon.Device(index);
    } catch (error) {
      throw toDeviceError(error, 'CudaBackend.create');
    }
    try {
      const info = addon.deviceInfo(index);
      return new CudaBackend(native, toDeviceInfo(info), info.maxSharedPerBlockOptin, openGemm(native, addon.loadCublasLt));
    } catch (error) {
      native.dispose();
      throw toDeviceError(error, 'CudaBackend.create');
    }
  }

  private constructor(native: NativeDevice, device: DeviceInfo, maxSharedOptin: number, gemmLibrary: GemmLibrary) {
    this.#native = native;
    this.device = device;
    this.#maxSharedOptin = maxSharedOptin;
    this.gemmLibrary = gemmLibrary;
    this.#kernels = new KernelRegistry(native);
    const record = native.launchRecord();
    this.#record = new DataView(record);
    this.#words = new Uint32Array(record, 0, LAUNCH_HEADER_BYTES / 4);
    this.defaultStream = Object.freeze({ backend: BACKEND, id: 0 });
    this.#streams.set(0, this.defaultStream);
  }

  // ---- memory -------------------------------------------------------------------------------

  alloc(bytes: number): DevicePtr {
    this.#open('alloc');
    checkCount(bytes, 'alloc: bytes');
    this.#captures.forbid('alloc', 'allocating device memory');
    const ptr = this.#call('alloc', () => this.#native.alloc(bytes));
    this.#live.add(ptr, bytes);
    return ptr;
  }

  /**
   * Returns the block to the pool at once. Work on the same stream is
   * ordered before any reuse; work still reading the block on another stream must be finished.
   */
  free(ptr: DevicePtr): void {
    this.#open('free');
    if (!this.#live.has(ptr)) {
      throw new DeviceError('free', `${hex(ptr)} is not a live allocation of this backend (freed twice, or not the pointer alloc returned)`, INVALID_VALUE);
    }
    this.#captures.forbid('free', 'freeing device memory');
    this.#call('free', () => this.#native.free(ptr));
    this.#live.delete(ptr);
  }

  /** Gives the pool's cached blocks back to the driver; returns the bytes released. */
  trim(): number {
    this.#open('trim');
    this.#captures.forbid('trim', 'freeing device memory');
    return this.#call('trim', () => this.#native.trim());
  }

  poolStats(): PoolStats {
    this.#open('poolStats');
    return this.#native.poolStats();
  }

  /**
   * cuMemGetInfo's free and total device memory in bytes, with the blocks this backend's pool
   * keeps for reuse counted as free (an allocation takes them first).
   */
  memoryInfo(): { free: number; total: number } {
    this.#open('memoryInfo');
    const info = this.#call('memoryInfo', () => this.#native.memInfo());
    return { free: info.free + this.#native.poolStats().cachedBytes, total: info.total };
  }

  allocHost(bytes: number): HostBuffer {
    this.#open('allocHost');
    checkCount(bytes, 'allocHost: bytes');
    this.#captures.forbid('allocHost', 'allocating pinned host memory');
    const made = this.#call('allocHost', () => this.#native.allocHost(bytes));
    const buffer: HostBuffer = Object.freeze({ bytes: new Uint8Array(made.buffer) });
    this.#hosts.set(buffer, made.id);
    return buffer;
  }

  /** Frees the pinned memory; the buffer's `bytes` become empty (detached), never dangling. */
  freeHost(buffer: HostBuffer): void {
    this.#open('freeHost');
    const id = this.#hostId(buffer, 'freeHost');
    this.#captures.forbid('freeHost', 'freeing pinned host memory');
    this.#call('freeHost', () => this.#native.freeHost(id));
    this.#hosts.delete(buffer);
  }

  // ---- copies -------------------------------------------------------------------------------

  memsetAsync(ptr: DevicePtr, value: number, bytes: number, stream?: Stream): void {
    this.#open('memsetAsync');
    if (!Number.isInteger(value) || value < 0 || value > 255) throw new InvalidArgumentError(`memsetAsync: value must be 0..255, got ${value}`);
    checkCount(bytes, 'memsetAsync: bytes');
    this.#checkRange(ptr, bytes, 'memsetAsync');
    const sid = this.#workStream(stream, 'memsetAsync');
    if (bytes > 0) this.#call('memsetAsync', () => this.#native.memset(ptr, value, bytes, sid));
  }

  copyToDeviceAsync(dst: DevicePtr, src: HostBuffer, srcOffset: number, bytes: number, stream?: Stream): void {
    this.#open('copyToDeviceAsync');
    const id = this.#hostId(src, 'copyToDeviceAsync');
    this.#checkHostRange(src, srcOffset, bytes, 'copyToDeviceAsync');
    this.#checkRange(dst, bytes, 'copyToDeviceAsync');
    const sid = this.#workStream(stream, 'copyToDeviceAsync');
    if (bytes > 0) this.#call('copyToDeviceAsync', () => this.#native.copyHtoD(dst, id, srcOffset, bytes, sid));
  }

  copyToHostAsync(dst: HostBuffer, dstOffset: number, src: DevicePtr, bytes: number, stream?: Stream): void {
    this.#open('copyToHostAsync');
    const id = this.#hostId(dst, 'copyToHostAsync');
    this.#checkHostRange(dst, dstOffset, bytes, 'copyToHostAsync');
    this.#checkRange(src, bytes, 'copyToHostAsync');
    const sid = this.#workStream(stream, 'copyToHostAsync');
    if (bytes > 0) this.#call('copyToHostAsync', () => this.#native.copyDtoH(id, dstOffset, src, bytes, sid));
  }

  copyDeviceAsync(dst: DevicePtr, src: DevicePtr, bytes: number, stream?: Stream): void {
    this.#open('copyDeviceAsync');
    checkCount(bytes, 'copyDeviceAsync: bytes');
    this.#checkRange(dst, bytes, 'copyDeviceAsync (destination)');
    this.#checkRange(src, bytes, 'copyDeviceAsync (source)');
    const sid = this.#workStream(stream, 'copyDeviceAsync');
    if (bytes > 0) this.#call('copyDeviceAsync', () => this.#native.copyDtoD(dst, src, bytes, sid));
  }

  upload(dst: DevicePtr, data: ArrayBufferView): void {
    this.#open('upload');
    if (!ArrayBuffer.isView(data)) throw new InvalidArgumentError(`upload: data must be a typed array or DataView, got ${String(data)}`);
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    this.#checkRange(dst, bytes.byteLength, 'upload');
    this.#synchronous('upload', 'a synchronous copy', () => this.#native.uploadSync(dst, bytes));
  }

  download(src: DevicePtr, bytes: number): Uint8Array {
    this.#open('download');
    checkCount(bytes, 'download: bytes');
    this.#checkRange(src, bytes, 'download');
    const out = new Uint8Array(bytes);
    this.#synchronous('download', 'a synchronous copy', () => this.#native.downloadSync(out, src));
    return out;
  }

  // ---- streams and events -------------------------------------------------------------------

  createStream(): Stream {
    this.#open('createStream');
    const stream = Object.freeze({ backend: BACKEND, id: this.#call('createStream', () => this.#native.createStream()) });
    this.#streams.set(stream.id, stream);
    return stream;
  }

  destroyStream(stream: Stream): void {
    this.#open('destroyStream');
    const id = this.#streamId(stream, 'destroyStream');
    if (id === 0) throw new DeviceError('destroyStream', 'the default stream cannot be destroyed', INVALID_HANDLE);
    if (this.#captures.has(id)) throw new DeviceError('destroyStream', `stream ${id} is capturing; end the capture first`, ILLEGAL_STATE);
    this.#call('destroyStream', () => this.#native.destroyStream(id));
    this.#streams.delete(id);
  }

  synchronize(stream?: Stream): void {
    this.#open('synchronize');
    if (stream === undefined) {
      this.#synchronous('synchronize', 'synchronizing the device', () => this.#native.synchronize());
    } else {
      const id = this.#streamId(stream, 'synchronize');
      this.#synchronous('synchronize', 'synchronizing a stream', () => this.#native.streamSynchronize(id));
    }
  }

  createEvent(): GpuEvent {
    this.#open('createEvent');
    const id = this.#call('createEvent', () => this.#native.createEvent());
    const event = Object.freeze({ backend: BACKEND, id });
    this.#events.set(event, id);
    return event;
  }

  recordEvent(event: GpuEvent, stream?: Stream): void {
    this.#open('recordEvent');
    const id = this.#eventId(event, 'recordEvent');
    const sid = this.#workStream(stream, 'recordEvent');
    this.#call('recordEvent', () => this.#native.recordEvent(id, sid));
  }

  synchronizeEvent(event: GpuEvent): void {
    this.#open('synchronizeEvent');
    const id = this.#eventId(event, 'synchronizeEvent');
    this.#synchronous('synchronizeEvent', 'waiting for an event', () => this.#native.eventSynchronize(id));
  }

  elapsedMs(start: GpuEvent, end: GpuEvent): number {
    this.#open('elapsedMs');
    const a = this.#eventId(start, 'elapsedMs'), b = this.#eventId(end, 'elapsedMs');
    return this.#call('elapsedMs', () => this.#native.eventElapsed(a, b));
  }

  destroyEvent(event: GpuEvent): void {
    this.#open('destroyEvent');
    const id = this.#eventId(event, 'destroyEvent');
    this.#call('destroyEvent', () => this.#native.destroyEvent(id));
    this.#events.delete(event);
  }

  // ---- graphs -------------------------------------------------------------------------------

  beginCapture(stream: Stream): void {
    this.#open('beginCapture');
    const id = this.#streamId(stream, 'beginCapture');
    if (this.#captures.has(id)) throw new DeviceError('beginCapture', `stream ${id} is already capturing`, ILLEGAL_STATE);
    this.#call('beginCapture', () => this.#native.beginCapture(id));
    this.#captures.begin(id);
  }

  endCapture(stream: Stream): Graph {
    this.#open('endCapture');
    const id = this.#streamId(stream, 'endCapture');
    if (!this.#captures.has(id)) throw new DeviceError('endCapture', `stream ${id} is not capturing`, ILLEGAL_STATE);
    const invalidated = this.#captures.end(id);
    let made: { graph: number; nodes: number };
    try {
      made = this.#native.endCapture(id);
    } catch (error) {
      const cause = toDeviceError(error, 'endCapture');
      throw new CaptureError(invalidated || cause.message, { cause });
    }
    if (invalidated) {
      // The driver produced a graph, but a forbidden call happened meanwhile: the contract fails it.
      this.#native.destroyGraph(made.graph);
      throw new CaptureError(invalidated);
    }
    const graph = Object.freeze({ backend: BACKEND, id: made.graph, nodes: made.nodes });
    this.#graphs.add(graph);
    return graph;
  }

  isCapturing(stream: Stream): boolean {
    this.#open('isCapturing');
    const id = this.#streamId(stream, 'isCapturing');
    return this.#call('isCapturing', () => this.#native.captureStatus(id)) !== 0;
  }

  instantiate(graph: Graph): GraphExec {
    this.#open('instantiate');
    this.#checkHandle(this.#graphs.has(graph), 'instantiate', 'graph', graph);
    const exec = Object.freeze({ backend: BACKEND, id: this.#call('instantiate', () => this.#native.instantiate(graph.id)) });
    this.#execs.add(exec);
    return exec;
  }

  launchGraph(exec: GraphExec, stream?: Stream): void {
    this.#open('launchGraph');
    this.#checkHandle(this.#execs.has(exec), 'launchGraph', 'graph exec', exec);
    const sid = this.#workStream(stream, 'launchGraph');
    try {
      this.#native.launchGraph(exec.id, sid);
    } catch (error) {
      throw this.#fail(error, 'launchGraph');
    }
  }

  destroyGraph(graph: Graph): void {
    this.#open('destroyGraph');
    this.#checkHandle(this.#graphs.has(graph), 'destroyGraph', 'graph', graph);
    this.#call('destroyGraph', () => this.#native.destroyGraph(graph.id));
    this.#graphs.delete(graph);
  }

  destroyGraphExec(exec: GraphExec): void {
    this.#open('destroyGraphExec');
    this.#checkHandle(this.#execs.has(exec), 'destroyGraphExec', 'graph exec', exec);
    this.#call('destroyGraphExec', () => this.#native.destroyGraphExec(exec.id));
    this.#execs.delete(exec);
  }

  // ---- kernels and GEMM ---------------------------------------------------------------------

  launch<P extends KernelParams>(kernel: Kernel<P>, config: LaunchConfig, args: KernelArgs<P>): void {
    const k = kernel as unknown as Kernel;
    const call = `launch ${k?.name}`;
    this.#open(call);
    const plan = this.#kernels.plan(k);
    validateKernelArgs(k, args as Readonly<Record<string, unknown>>);
    const grid = toDims(config.grid, `${call}: grid`);
    const block = toDims(config.block, `${call}: block`);
    const shared = config.sharedBytes ?? 0;
    checkCount(shared, `${call}: sharedBytes`);
    const bad = (why: string): never => {
      throw new DeviceError(call, `${why} (grid [${grid.join(', ')}], block [${block.join(', ')}], ${shared} shared bytes)`, INVALID_VALUE);
    };
    if (block[0] > 1024 || block[1] > 1024 || block[2] > 64) bad('a block dimension exceeds 1024 × 1024 × 64');
    if (block[0] * block[1] * block[2] > plan.maxThreadsPerBlock) bad(`a block has more than the kernel's ${plan.maxThreadsPerBlock} threads`);
    if (grid[0] > 2 ** 31 - 1 || grid[1] > 65535 || grid[2] > 65535) bad('a grid dimension exceeds 2³¹−1 × 65535 × 65535');
    if (shared > this.#maxSharedOptin) bad(`dynamic shared memory exceeds this device's ${this.#maxSharedOptin} bytes`);
    const early = toEarlyStart(k, config.earlyStart, call);
    const sid = this.#workStream(config.stream, call);
    // The launch record's header (native/device.h), then the arguments; launch() reads both.
    const w = this.#words;
    w[0] = plan.id;
    w[1] = grid[0];
    w[2] = grid[1];
    w[3] = grid[2];
    w[4] = block[0];
    w[5] = block[1];
    w[6] = block[2];
    w[7] = shared;
    w[8] = sid;
    w[9] = early ? LAUNCH_EARLY_START : 0;
    packArgs(plan.layout, args as Readonly<Record<string, unknown>>, this.#record, LAUNCH_HEADER_BYTES);
    try {
      this.#native.launch();
    } catch (error) {
      throw this.#fail(error, call);
    }
  }

  gemm(args: GemmArgs): void {
    this.#open('gemm');
    const g = resolveGemm(args);
    if (args.m === 0 || args.n === 0) return;  // nothing to write, as on the CPU backend
    if (args.k === 0) throw new DeviceError('gemm', 'k = 0 (C = beta·C) is not supported by the CUDA backend', 'CUDA_ERROR_NOT_SUPPORTED');
    this.#checkRange(args.a, g.aBytes, 'gemm (A)');
    this.#checkRange(args.b, g.bBytes, 'gemm (B)');
    this.#checkRange(args.c, g.cBytes, 'gemm (C)');
    if (g.fp8) {
      this.#checkRange(args.bScales!, g.scaleBytes, 'gemm (B scales)');
      // Block-FP8 B: the backend's kernels (cuBLASLt's block-scaled FP8 needs an FP8 A as well).
      const fp8Args = {
        a: args.a, aCode: g.abType, b: args.b, scales: args.bScales!, c: args.c, cCode: g.cType,
        m: args.m, n: args.n, k: args.k, lda: g.lda, ldc: g.ldc, alpha: g.alpha, beta: g.beta,
      };
      const stream = args.stream ?? this.defaultStream;
      const kernel = fp8GemmKernel(args.m, args.k, g.lda, g.abType, args.a, args.b);
      if (kernel === 'tiled') this.launch(gemmFp8TiledKernel, gemmFp8TiledLaunch(args.m, args.n, stream), fp8Args);
      else this.launch(kernel === 'rows' ? gemmFp8RowsKernel : gemmFp8RowsWideKernel, gemmFp8RowsLaunch(args.n, this.device.multiprocessors, stream), fp8Args);
      return;
    }
    if (!this.gemmLibrary.loaded) throw new DeviceError('gemm', this.gemmLibrary.reason);
    const sid = this.#workStream(args.stream, 'gemm');
    this.#call('gemm', () =>
      this.#native.gemm(g.abType, g.cType, g.transA, g.transB, args.m, args.n, args.k, g.lda, g.ldb, g.ldc,
        args.a, args.b, args.c, g.alpha, g.beta, sid),
    );
  }

  convert(args: ConvertArgs): void {
    this.#open('convert');
    const { srcDtype, dstDtype, count } = args;
    for (const [name, dt] of [['srcDtype', srcDtype], ['dstDtype', dstDtype]] as const) {
      if (!(dt in GEMM_TYPE)) throw new InvalidArgumentError(`convert: ${name} must be 'f32', 'bf16' or 'f16', got ${String(dt)}`);
    }
    if (!Number.isSafeInteger(count) || count < 0) throw new InvalidArgumentError(`convert: count must be a non-negative integer, got ${count}`);
    if (count === 0) return;
    const srcBytes = count * floatBytes(srcDtype), dstBytes = count * floatBytes(dstDtype);
    this.#checkRange(args.src, srcBytes, 'convert (src)');
    this.#checkRange(args.dst, dstBytes, 'convert (dst)');
    if (args.src < args.dst + BigInt(dstBytes) && args.dst < args.src + BigInt(srcBytes)) {
      throw new InvalidArgumentError('convert: src and dst overlap; convert into another buffer');
    }
    const stream = args.stream ?? this.defaultStream;
    this.launch(convertKernel, convertLaunch(count, this.device.multiprocessors, stream), {
      src: args.src, srcCode: GEMM_TYPE[srcDtype], dst: args.dst, dstCode: GEMM_TYPE[dstDtype], count: BigInt(count),
    });
  }

  // ---- collectives (NCCL) ----------------------------------------------------------------------

  /**
   * A new NCCL group of `size` ranks: its ncclUniqueId, which every rank (one device and thread
   * each) passes to `joinCommunicator`. Opens libnccl.so.2 ($METRALE_NCCL_PATH overrides) on first
   * use, with NCCL_NVLS_ENABLE=0; a DeviceError says how to install NCCL when it is missing.
   */
  createCommunicatorId(size: number): CommunicatorId {
    this.#open('createCommunicatorId');
    if (!Number.isSafeInteger(size) || size < 1) throw new InvalidArgumentError(`createCommunicatorId: size must be a positive integer, got ${size}`);
    const addon = requireAddon('createCommunicatorId');
    const payload = this.#call('ncclGetUniqueId', () => addon.ncclUniqueId());
    return Object.freeze({ backend: BACKEND, size, payload });
  }

  /** This device as rank `rank` of the group (ncclCommInitRank: waits until every rank has joined). */
  joinCommunicator(id: CommunicatorId, rank: number): Communicator {
    const call = 'joinCommunicator';
    this.#open(call);
    const bytes = ncclIdBytes(call, id);
    if (!Number.isSafeInteger(rank) || rank < 0 || rank >= id.size) throw new InvalidArgumentError(`${call}: rank must be an integer in 0..${id.size - 1}, got ${rank}`);
    this.#captures.forbid(call, 'creating an NCCL communicator');
    const native = this.#native;
    const comm = this.#call('ncclCommInitRank', () => native.commInit(bytes, id.size, rank));
    return new NcclCommunicator(comm, rank, id.size, {
      checkRange: (ptr, n, c) => this.#checkRange(ptr, n, c),
      workStream: (stream, c) => this.#workStream(stream, c),
      call: (c, run) => {
        this.#open(c);
        return this.#call(c, run);
      },
      collective: (kind, h, send, recv, count, dtype, sid) => native.commCollective(kind, h, send, recv, count, dtype, sid),
      release: (h, abort) => native.commRelease(h, abort),
    });
  }

  // ---- whole device -------------------------------------------------------------------------

  memoryDigest(): string {
    this.#open('memoryDigest');
    this.#captures.forbid('memoryDigest', 'reading device memory synchronously');
    const hash = createHash('sha256');
    let largest = 1;
    for (const [, bytes] of this.#live.entries()) largest = Math.max(largest, bytes);
    const chunk = new Uint8Array(Math.min(DIGEST_CHUNK, largest));
    this.#call('memoryDigest', () => {
      for (const [ptr, bytes] of this.#live.entries()) {
        hash.update(`${hex(ptr)}:${bytes};`);
        for (let off = 0; off < bytes; off += chunk.length) {
          const view = chunk.subarray(0, Math.min(chunk.length, bytes - off));
          this.#native.downloadSync(view, ptr + BigInt(off));
          hash.update(view);
        }
      }
    });
    return hash.digest('hex');
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#native.dispose();
    this.#live.clear();
    this.#hosts.clear();
    this.#streams.clear();
    this.#events.clear();
    this.#graphs.clear();
    this.#execs.clear();
    this.#captures.clear();
  }

  // ---- internals ----------------------------------------------------------------------------

  #open(call: string): void {
    if (this.#disposed) throw new DeviceError(call, 'the CUDA backend was disposed', 'CUDA_ERROR_DEINITIALIZED');
  }

  /** Runs an addon call; what it throws becomes a DeviceError (launch inlines this: hot path). */
  #call<T>(call: string, run: () => T): T {
    try {
      return run();
    } catch (error) {
      throw this.#fail(error, call);
    }
  }

  /** Converts an addon failure; a failure while a capture is active also invalidates it. */
  #fail(error: unknown, call: string): DeviceError {
    const failure = toDeviceError(error, call);
    this.#captures.invalidate(`${call}: ${failure.message}`);
    return failure;
  }

  /**
   * A synchronous call. The driver refuses it during a capture (and invalidates the capture);
   * should it ever let one through, the contract still fails it.
   */
  #synchronous(call: string, what: string, run: () => void): void {
    this.#call(call, run);
    this.#captures.forbid(call, what);
  }

  /** A stream of this backend, as its native id. */
  #streamId(stream: Stream | undefined, call: string): number {
    if (stream === undefined) return 0;
    if (this.#streams.get(stream.id) !== stream) {
      throw new DeviceError(call, `stream ${String(stream?.id)} is not a live stream of this CUDA backend (destroyed, or made by another backend)`, INVALID_HANDLE);
    }
    return stream.id;
  }

  /**
   * The stream that stream-ordered work goes to. Work on a stream whose capture was invalidated
   * is refused, as the driver refuses it (these rules can invalidate a capture the driver still
   * considers valid).
   */
  #workStream(stream: Stream | undefined, call: string): number {
    const id = this.#streamId(stream, call);
    const invalidated = this.#captures.active ? this.#captures.invalidatedBy(id) : '';
    if (invalidated) throw new DeviceError(call, `the capture on stream ${id} was invalidated by ${invalidated}`, 'CUDA_ERROR_STREAM_CAPTURE_INVALIDATED');
    return id;
  }

  #checkHandle(live: boolean, call: string, what: string, handle: { id: number } | undefined): void {
    if (!live) throw new DeviceError(call, `${what} ${String(handle?.id)} is not a live ${what} of this CUDA backend (destroyed, or made by another backend)`, INVALID_HANDLE);
  }

  #eventId(event: GpuEvent, call: string): number {
    const id = this.#events.get(event);
    this.#checkHandle(id !== undefined, call, 'event', event);
    return id!;
  }

  #hostId(buffer: HostBuffer, call: string): number {
    const id = this.#hosts.get(buffer);
    if (id === undefined) throw new DeviceError(call, 'not a live pinned host buffer of this backend (allocate it with allocHost)', INVALID_VALUE);
    return id;
  }

  #checkHostRange(buffer: HostBuffer, offset: number, bytes: number, call: string): void {
    checkCount(offset, `${call}: host offset`);
    checkCount(bytes, `${call}: byte count`);
    if (offset + bytes > buffer.bytes.byteLength) {
      throw new DeviceError(call, `host range [${offset}, ${offset + bytes}) runs past the end of the ${buffer.bytes.byteLength}-byte pinned buffer`, INVALID_VALUE);
    }
  }

  /** The whole range must lie inside one live allocation, as on the CPU backend. */
  #checkRange(ptr: DevicePtr, bytes: number, call: string): void {
    if (typeof ptr !== 'bigint') throw new InvalidArgumentError(`${call}: a device pointer must be a bigint, got ${String(ptr)}`);
    if (!this.#live.contains(ptr, bytes)) {
      throw new DeviceError(call, `${hex(ptr)} + ${bytes} bytes is not inside one live allocation of this backend`, ILLEGAL_ADDRESS);
    }
  }
}
