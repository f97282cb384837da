import {
  DeviceError, InvalidArgumentError, toDims, toEarlyStart, validateKernelArgs,
  type Communicator, type CommunicatorId, type ConvertArgs, type DeviceInfo, type DevicePtr, type GemmArgs, type GpuBackend, type GpuEvent, type Graph, type GraphExec,
  type HostBuffer, type Kernel, type KernelArgs, type KernelParams, type LaunchConfig, type Stream,
} from '@metrale/core';
import { resolveOptions, type CpuBackendOptions } from './backend-options.js';
import { Counters, type CpuBackendStats } from './backend-stats.js';
import { CheckedMemoryView } from './checked-memory-view.js';
import { checkConvert, runConvert } from './cpu-convert.js';
import { checkGemmMemory, planGemm, runGemm } from './cpu-gemm.js';
import { CpuCommunicator } from './cpu-communicator.js';
import { cpuDeviceInfo } from './device-info.js';
import { runNodes, type GraphNode } from './graph-node.js';
import { HandleTable, INVALID_HANDLE } from './handles.js';
import { HostBuffers } from './host-buffers.js';
import { checkLaunchShape } from './launch-limits.js';
import { MemoryArena } from './memory-arena.js';
import { cpuCommunicatorId, type CpuGroupOptions } from './shared-group.js';
import { StreamCaptures } from './stream-capture.js';

interface EventState {
  time: number | undefined;
}

/** Calls CUDA forbids while a capture is active: they fail and invalidate the capture. */
const FORBIDDEN_IN_CAPTURE = true;

/**
 * The reference device: device memory is a bounds-checked host arena and work runs at once, in
 * call order, on the calling thread, so stream order holds trivially. Capture, graphs and the
 * calls that break a capture follow the CUDA driver, so a layer that is wrong under CUDA graphs
 * is wrong here too.
 */
export class CpuBackend implements GpuBackend {
  readonly kind = 'cpu';
  readonly device: DeviceInfo;
  readonly defaultStream: Stream;
  readonly #arena: MemoryArena;
  readonly #host = new HostBuffers();
  readonly #streams = new HandleTable<Stream, true>('stream', 0);
  readonly #events = new HandleTable<GpuEvent, EventState>('event');
  readonly #graphs = new HandleTable<Graph, readonly GraphNode[]>('graph');
  readonly #execs = new HandleTable<GraphExec, readonly GraphNode[]>('graph exec');
  readonly #captures = new StreamCaptures();
  readonly #counters = new Counters();
  #disposed = false;

  constructor(options: CpuBackendOptions = {}) {
    const { memoryLimit, allocFill } = resolveOptions(options);
    this.#arena = new MemoryArena(memoryLimit, allocFill);
    this.device = cpuDeviceInfo(memoryLimit);
    this.defaultStream = this.#streams.add(true);
  }

  // Memory ----------------------------------------------------------------------------------

  alloc(bytes: number): DevicePtr {
    this.#enter('alloc', FORBIDDEN_IN_CAPTURE);
    return this.#arena.alloc('alloc', bytes);
  }

  free(ptr: DevicePtr): void {
    this.#enter('free', FORBIDDEN_IN_CAPTURE);
    this.#arena.free('free', ptr);
  }

  /** The arena's limit and what it has not handed out (the device's memory is host memory). */
  memoryInfo(): { free: number; total: number } {
    return { free: this.#arena.limitBytes - this.#arena.liveBytes, total: this.#arena.limitBytes };
  }

  allocHost(bytes: number): HostBuffer {
    this.#enter('allocHost', FORBIDDEN_IN_CAPTURE);
    return this.#host.alloc('allocHost', bytes);
  }

  freeHost(buffer: HostBuffer): void {
    this.#enter('freeHost', FORBIDDEN_IN_CAPTURE);
    this.#host.free('freeHost', buffer);
  }

  memsetAsync(ptr: DevicePtr, value: number, bytes: number, stream?: Stream): void {
    const call = 'memsetAsync';
    this.#enter(call);
    if (!Number.isInteger(value) || value < 0 || value > 255) throw new InvalidArgumentError(`${call}: value must be a byte (0..255), got ${value}`);
    this.#arena.check(call, ptr, bytes);
    this.#submit(call, stream, 'memset', (c) => {
      this.#arena.bytes(c, ptr, bytes).fill(value);
    });
  }

  copyToDeviceAsync(dst: DevicePtr, src: HostBuffer, srcOffset: number, bytes: number, stream?: Stream): void {
    const call = 'copyToDeviceAsync';
    this.#enter(call);
    this.#host.range(call, src, srcOffset, bytes);
    this.#arena.check(call, dst, bytes);
    // The host bytes are read when the copy runs, so a replay sees the buffer's current contents.
    this.#submit(call, stream, 'copy host→device', (c) => this.#toDevice(c, dst, this.#host.range(c, src, srcOffset, bytes)));
  }

  copyToHostAsync(dst: HostBuffer, dstOffset: number, src: DevicePtr, bytes: number, stream?: Stream): void {
    const call = 'copyToHostAsync';
    this.#enter(call);
    this.#host.range(call, dst, dstOffset, bytes);
    this.#arena.check(call, src, bytes);
    this.#submit(call, stream, 'copy device→host', (c) => {
      this.#host.range(c, dst, dstOffset, bytes).set(this.#arena.bytes(c, src, bytes));
      this.#counters.bytesDeviceToHost += bytes;
    });
  }

  copyDeviceAsync(dst: DevicePtr, src: DevicePtr, bytes: number, stream?: Stream): void {
    const call = 'copyDeviceAsync';
    this.#enter(call);
    this.#arena.check(call, src, bytes);
    this.#arena.check(call, dst, bytes);
    this.#submit(call, stream, 'copy device→device', (c) => {
      // TypedArray#set copies correctly even when source and target overlap.
      this.#arena.bytes(c, dst, bytes).set(this.#arena.bytes(c, src, bytes));
      this.#counters.bytesDeviceToDevice += bytes;
    });
  }

  upload(dst: DevicePtr, data: ArrayBufferView): void {
    this.#enter('upload', FORBIDDEN_IN_CAPTURE);
    if (!ArrayBuffer.isView(data)) throw new InvalidArgumentError(`upload: data must be a typed array or DataView, got ${String(data)}`);
    this.#toDevice('upload', dst, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  }

  download(src: DevicePtr, bytes: number): Uint8Array {
    this.#enter('download', FORBIDDEN_IN_CAPTURE);
    const out = this.#arena.bytes('download', src, bytes).slice();
    this.#counters.bytesDeviceToHost += bytes;
    return out;
  }

  // Streams and events ----------------------------------------------------------------------

  createStream(): Stream {
    this.#enter('createStream');
    return this.#streams.add(true);
  }

  destroyStream(stream: Stream): void {
    const call = 'destroyStream';
    this.#enter(call);
    if (stream === this.defaultStream) throw new DeviceError(call, 'the default stream cannot be destroyed', INVALID_HANDLE);
    this.#streams.get(call, stream);
    if (this.#captures.isCapturing(stream)) throw new DeviceError(call, `stream ${stream.id} is capturing; end the capture first`, 'CUDA_ERROR_ILLEGAL_STATE');
    this.#streams.delete(call, stream);
  }

  synchronize(stream?: Stream): void {
    this.#enter('synchronize', FORBIDDEN_IN_CAPTURE);
    if (stream !== undefined) this.#streams.get('synchronize', stream);
  }

  createEvent(): GpuEvent {
    this.#enter('createEvent');
    return this.#events.add({ time: undefined });
  }

  recordEvent(event: GpuEvent, stream?: Stream): void {
    const call = 'recordEvent';
    this.#enter(call);
    this.#events.get(call, event);
    this.#submit(call, stream, `event ${event.id} record`, (c) => {
      this.#events.get(c, event).time = performance.now();
    });
  }

  synchronizeEvent(event: GpuEvent): void {
    this.#enter('synchronizeEvent', FORBIDDEN_IN_CAPTURE);
    this.#events.get('synchronizeEvent', event);
  }

  elapsedMs(start: GpuEvent, end: GpuEvent): number {
    const call = 'elapsedMs';
    this.#enter(call);
    const time = (e: GpuEvent): number => {
      const t = this.#events.get(call, e).time;
      if (t === undefined) throw new DeviceError(call, `event ${e.id} has not been recorded`, INVALID_HANDLE);
      return t;
    };
    return time(end) - time(start);
  }

  destroyEvent(event: GpuEvent): void {
    this.#enter('destroyEvent');
    this.#events.delete('destroyEvent', event);
  }

  // Capture and graphs ----------------------------------------------------------------------

  beginCapture(stream: Stream): void {
    this.#enter('beginCapture');
    this.#streams.get('beginCapture', stream);
    this.#captures.begin('beginCapture', stream);
  }

  endCapture(stream: Stream): Graph {
    this.#enter('endCapture');
    this.#streams.get('endCapture', stream);
    const nodes = Object.freeze(this.#captures.end('endCapture', stream));
    return this.#graphs.add(nodes, { nodes: nodes.length });
  }

  isCapturing(stream: Stream): boolean {
    this.#enter('isCapturing');
    this.#streams.get('isCapturing', stream);
    return this.#captures.isCapturing(stream);
  }

  instantiate(graph: Graph): GraphExec {
    this.#enter('instantiate');
    return this.#execs.add(this.#graphs.get('instantiate', graph));
  }

  launchGraph(exec: GraphExec, stream?: Stream): void {
    const call = 'launchGraph';
    this.#enter(call);
    const nodes = this.#execs.get(call, exec);
    const s = this.#stream(call, stream);
    // Launched into a capture, the graph becomes one child-graph node of the new graph.
    if (this.#captures.record(call, s, { label: `graph exec ${exec.id}`, children: nodes })) return;
    this.#counters.graphLaunches++;
    runNodes(nodes, call, () => this.#counters.nodesReplayed++);
  }

  destroyGraph(graph: Graph): void {
    this.#enter('destroyGraph');
    this.#graphs.delete('destroyGraph', graph);
  }

  destroyGraphExec(exec: GraphExec): void {
    this.#enter('destroyGraphExec');
    this.#execs.delete('destroyGraphExec', exec);
  }

  // Kernels ---------------------------------------------------------------------------------

  launch<P extends KernelParams>(kernel: Kernel<P>, config: LaunchConfig, args: KernelArgs<P>): void {
    const k = kernel as unknown as Kernel;
    const call = `launch ${k?.name}`;
    this.#enter(call);
    validateKernelArgs(k, args as Readonly<Record<string, unknown>>);
    const cpu = k.cpu;
    if (!cpu) throw new DeviceError(call, `kernel ${k.name} has no CPU implementation; give defineKernel a cpu function to run it on the cpu backend`);
    const grid = toDims(config.grid, `${call}: grid`);
    const block = toDims(config.block, `${call}: block`);
    const sharedBytes = config.sharedBytes ?? 0;
    checkLaunchShape(call, grid, block, sharedBytes);
    // An early start (programmatic dependent launch) only lets a kernel overlap the previous one
    // up to its wait; run in stream order, as here, it keeps the same results.
    toEarlyStart(k, config.earlyStart, call);
    // Arguments are copied now, as cuLaunchKernel copies them: later changes to `args` are not seen.
    const frozen = Object.freeze({ ...(args as Readonly<Record<string, unknown>>) }) as KernelArgs<KernelParams>;
    const ran = this.#submit(call, config.stream, `kernel ${k.name}`, (c) => {
      cpu(frozen, { mem: new CheckedMemoryView(this.#arena, c), grid, block, sharedBytes });
    });
    if (ran) this.#counters.kernelsLaunched++;
  }

  gemm(args: GemmArgs): void {
    this.#enter('gemm');
    const plan = planGemm(args);
    checkGemmMemory(this.#arena, 'gemm', plan);
    const ran = this.#submit('gemm', args.stream, `gemm ${plan.m}×${plan.n}×${plan.k}`, (c) => runGemm(this.#arena, c, plan));
    if (ran) this.#counters.gemmsLaunched++;
  }

  convert(args: ConvertArgs): void {
    this.#enter('convert');
    const frozen = Object.freeze({ ...args });
    checkConvert(this.#arena, 'convert', frozen);
    this.#submit('convert', args.stream, `convert ${frozen.count} ${frozen.srcDtype}→${frozen.dstDtype}`, (c) => runConvert(this.#arena, c, frozen));
  }

  // Collectives -------------------------------------------------------------------------------

  /**
   * A group of `size` ranks, each a CPU backend on its own thread (worker_threads): the id carries
   * shared memory, so it must reach the other threads by `postMessage`. `options` set the staging
   * per round and how long a rank waits for the others.
   */
  createCommunicatorId(size: number, options?: CpuGroupOptions): CommunicatorId {
    this.#enter('createCommunicatorId');
    return cpuCommunicatorId(size, options);
  }

  /** This backend as rank `rank` of the group: its collectives run on this backend's streams. */
  joinCommunicator(id: CommunicatorId, rank: number): Communicator {
    this.#enter('joinCommunicator');
    return new CpuCommunicator(id, rank, {
      arena: this.#arena,
      submit: (call, stream, label, run) => {
        this.#enter(call);
        this.#submit(call, stream, label, run);
      },
      ran: () => this.#counters.collectivesRun++,
    });
  }

  // Introspection and teardown --------------------------------------------------------------

  memoryDigest(): string {
    this.#enter('memoryDigest', FORBIDDEN_IN_CAPTURE);
    return this.#arena.digest();
  }

  /** A snapshot of the counters and memory figures; still readable after `dispose`. */
  stats(): CpuBackendStats {
    const a = this.#arena;
    return Object.freeze({
      liveBytes: a.liveBytes, peakBytes: a.peakBytes, liveAllocations: a.liveAllocations, liveHostBytes: this.#host.liveBytes,
      ...this.#counters,
      capturesBegun: this.#captures.begun, capturesFailed: this.#captures.failed,
    });
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#captures.clear();
    this.#arena.freeAll();
    this.#host.freeAll();
    for (const t of [this.#streams, this.#events, this.#graphs, this.#execs]) t.clear();
  }

  #enter(call: string, forbiddenInCapture = false): void {
    if (this.#disposed) throw new DeviceError(call, 'the cpu backend was disposed', 'CUDA_ERROR_DEINITIALIZED');
    if (forbiddenInCapture) this.#captures.forbid(call);
  }

  #stream(call: string, stream: Stream | undefined): Stream {
    const s = stream ?? this.defaultStream;
    this.#streams.get(call, s);
    return s;
  }

  /** Records the work when the stream is capturing, runs it otherwise; true when it ran. */
  #submit(call: string, stream: Stream | undefined, label: string, run: (call: string) => void): boolean {
    if (this.#captures.record(call, this.#stream(call, stream), { label, run })) return false;
    run(call);
    return true;
  }

  #toDevice(call: string, dst: DevicePtr, data: Uint8Array): void {
    this.#arena.bytes(call, dst, data.byteLength).set(data);
    this.#counters.hostToDeviceCopies++;
    this.#counters.bytesHostToDevice += data.byteLength;
  }
}
