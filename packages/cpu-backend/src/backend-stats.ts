/** What the CPU backend has done so far; tests and the conformance kit compare snapshots. */
export interface CpuBackendStats {
  /** Bytes in live device allocations. */
  readonly liveBytes: number;
  /** The most `liveBytes` has been. */
  readonly peakBytes: number;
  readonly liveAllocations: number;
  /** Bytes in live pinned host buffers. */
  readonly liveHostBytes: number;
  /** `launch` calls that ran a kernel eagerly (not captured, not replayed). */
  readonly kernelsLaunched: number;
  /** `gemm` calls that ran eagerly. */
  readonly gemmsLaunched: number;
  /** `launchGraph` calls that ran a graph (not those recorded into a capture). */
  readonly graphLaunches: number;
  /** Graph nodes run by replays, counting the nodes inside child graphs. */
  readonly nodesReplayed: number;
  /** Host → device copies and bytes that ran (eager, synchronous and replayed). */
  readonly hostToDeviceCopies: number;
  readonly bytesHostToDevice: number;
  readonly bytesDeviceToHost: number;
  readonly bytesDeviceToDevice: number;
  /** Collectives (all-reduce, all-gather, …) that ran: eagerly or replayed. */
  readonly collectivesRun: number;
  readonly capturesBegun: number;
  /** Captures whose `endCapture` threw `CaptureError`. */
  readonly capturesFailed: number;
}

/** The mutable counters behind `CpuBackendStats` (memory figures come from the arena). */
export class Counters {
  kernelsLaunched = 0;
  gemmsLaunched = 0;
  graphLaunches = 0;
  nodesReplayed = 0;
  hostToDeviceCopies = 0;
  bytesHostToDevice = 0;
  bytesDeviceToHost = 0;
  bytesDeviceToDevice = 0;
  collectivesRun = 0;
}
