// Locates and loads the native addon (build/Release/metrale_cuda.node) on first use, so that
// importing this package works where the addon was never built; probe() then says so.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { DeviceError } from '@metrale/core';

/** Properties of one device, as the addon reports them. */
export interface NativeDeviceInfo {
  readonly index: number;
  readonly name: string;
  readonly major: number;
  readonly minor: number;
  readonly totalMemory: number;
  readonly multiprocessors: number;
  readonly l2CacheBytes: number;
  readonly maxThreadsPerBlock: number;
  readonly maxSharedPerBlock: number;
  readonly maxSharedPerBlockOptin: number;
}

export interface NativeKernelInfo {
  readonly id: number;
  readonly maxThreadsPerBlock: number;
  readonly maxDynamicSharedBytes: number;
  readonly numRegs: number;
  readonly staticSharedBytes: number;
}

export interface NativePoolStats {
  readonly liveBytes: number;
  readonly liveBlocks: number;
  readonly cachedBytes: number;
  readonly cachedBlocks: number;
  readonly hits: number;
  readonly misses: number;
}

/** One device (native/device.h). Streams, events, graphs, modules and kernels are small integers. */
export interface NativeDevice {
  alloc(bytes: number): bigint;
  free(ptr: bigint): void;
  trim(): number;
  poolStats(): NativePoolStats;
  memInfo(): { free: number; total: number };
  allocHost(bytes: number): { id: number; buffer: ArrayBuffer };
  freeHost(id: number): void;
  memset(ptr: bigint, value: number, bytes: number, stream: number): void;
  copyHtoD(dst: bigint, host: number, offset: number, bytes: number, stream: number): void;
  copyDtoH(host: number, offset: number, src: bigint, bytes: number, stream: number): void;
  copyDtoD(dst: bigint, src: bigint, bytes: number, stream: number): void;
  uploadSync(dst: bigint, data: Uint8Array): void;
  downloadSync(out: Uint8Array, src: bigint): void;
  synchronize(): void;
  createStream(): number;
  destroyStream(stream: number): void;
  streamSynchronize(stream: number): void;
  createEvent(): number;
  recordEvent(event: number, stream: number): void;
  eventSynchronize(event: number): void;
  eventElapsed(start: number, end: number): number;
  destroyEvent(event: number): void;
  beginCapture(stream: number): void;
  endCapture(stream: number): { graph: number; nodes: number };
  /** CUstreamCaptureStatus: 0 none, 1 active, 2 invalidated. */
  captureStatus(stream: number): number;
  instantiate(graph: number): number;
  launchGraph(exec: number, stream: number): void;
  destroyGraph(graph: number): void;
  destroyGraphExec(exec: number): void;
  loadModule(image: Uint8Array): number;
  registerKernel(module: number, symbol: string, offsets: Uint32Array): NativeKernelInfo;
  /** The launch record shared with C++ (see native/device.h for its layout). */
  launchRecord(): ArrayBuffer;
  /** Launches what the launch record describes. */
  launch(): void;
  gemmInit(): void;
  /** ncclCommInitRank on this device; blocks until every rank has joined. Returns the communicator's id. */
  commInit(uniqueId: Uint8Array, nranks: number, rank: number): number;
  /** kind: 0 all-reduce (sum), 1 all-gather, 2 reduce-scatter (sum), 3 all-to-all; dtype: FLOAT_DTYPE_CODE. */
  commCollective(kind: number, comm: number, send: bigint, recv: bigint, count: number, dtype: number, stream: number): void;
  /** ncclCommAbort (abort: the other ranks' waiting collectives fail) or ncclCommDestroy. */
  commRelease(comm: number, abort: boolean): void;
  gemm(
    abType: number, cType: number, transA: boolean, transB: boolean, m: number, n: number, k: number,
    lda: number, ldb: number, ldc: number, a: bigint, b: bigint, c: bigint, alpha: number, beta: number, stream: number,
  ): void;
  dispose(): void;
}

export interface NativeAddon {
  loadDriver(): { ok: boolean; path: string; error: string };
  init(): { result: number; code: string; text: string };
  driverVersion(): number;
  deviceCount(): number;
  deviceInfo(index: number): NativeDeviceInfo;
  loadCublasLt(candidates: readonly string[]): {
    ok: boolean; path: string; version: number; tried: { path: string; error: string }[];
  };
  selfCheck(): { ok: boolean; checked: number; problems: string[] };
  /** Opens NCCL (once per process; NCCL_NVLS_ENABLE=0 is set first). */
  loadNccl(): { ok: boolean; path: string; version: number; error: string };
  /** ncclGetUniqueId: 128 bytes. Throws (with why) when NCCL cannot be opened. */
  ncclUniqueId(): Uint8Array;
  Device: new (index: number) => NativeDevice;
}

export type AddonLoad =
  | { readonly ok: true; readonly addon: NativeAddon; readonly path: string }
  | { readonly ok: false; readonly reason: string };

/**
 * Where the addon may be: $METRALE_CUDA_ADDON, then build/Release and build/Debug of this package.
 * The paths are relative to this module's URL, which is src/addon.ts under vitest and
 * dist/index.js once bundled; both sit one level below the package root.
 */
export function addonCandidates(env: NodeJS.ProcessEnv = process.env): string[] {
  const local = ['../build/Release/metrale_cuda.node', '../build/Debug/metrale_cuda.node'].map((p) =>
    fileURLToPath(new URL(p, import.meta.url)),
  );
  return env.METRALE_CUDA_ADDON ? [env.METRALE_CUDA_ADDON, ...local] : local;
}

/** Loads the first existing candidate; never throws. */
export function loadAddonFrom(candidates: readonly string[]): AddonLoad {
  const path = candidates.find((p) => existsSync(p));
  if (!path) {
    return {
      ok: false,
      reason: `addon not built: no ${candidates.join(' or ')}; run 'node scripts/build.mjs' in packages/cuda-backend (needs cmake and a C++ compiler, no CUDA toolkit)`,
    };
  }
  try {
    const require = createRequire(import.meta.url);
    return { ok: true, addon: require(path) as NativeAddon, path };
  } catch (error) {
    return { ok: false, reason: `addon not loadable: ${path}: ${(error as Error).message}` };
  }
}

let cached: AddonLoad | undefined;

/** Loads the addon once per thread; never throws. */
export function loadAddon(): AddonLoad {
  cached ??= loadAddonFrom(addonCandidates());
  return cached;
}

/** The loaded addon, or a DeviceError that says why there is none. */
export function requireAddon(call: string): NativeAddon {
  const load = loadAddon();
  if (!load.ok) throw new DeviceError(call, load.reason);
  return load.addon;
}

/**
 * Turns what the addon threw into a DeviceError: the addon's errors carry `call`, `code` (the
 * CUresult or cublasStatus name) and `detail` (its text); anything else keeps its message.
 */
export function toDeviceError(error: unknown, fallbackCall: string): DeviceError {
  if (error instanceof DeviceError) return error;
  const e = error as { call?: unknown; code?: unknown; detail?: unknown; message?: unknown };
  if (typeof e?.call === 'string') {
    const detail = typeof e.detail === 'string' ? e.detail : String(e.message);
    return new DeviceError(e.call, detail, typeof e.code === 'string' ? e.code : undefined, { cause: error });
  }
  return new DeviceError(fallbackCall, String(e?.message ?? error), undefined, { cause: error });
}

/** The same DeviceError (call and code kept) with context appended to its detail. */
export function withContext(error: DeviceError, context: string): DeviceError {
  const prefix = error.code ? `${error.call} failed: ${error.code}: ` : `${error.call}: `;
  const detail = error.message.startsWith(prefix) ? error.message.slice(prefix.length) : error.message;
  return new DeviceError(error.call, `${detail} ${context}`, error.code, { cause: error });
}
