import type { DevicePtr } from '../device/device-ptr.js';
import type { FloatDtype } from '../device/dtype.js';
import type { Stream } from '../device/gpu-backend.js';
import { InvalidArgumentError } from '../errors.js';

/**
 * What the ranks of a group share to find each other: made once by one rank's backend
 * (`GpuBackend.createCommunicatorId`), handed to every rank (it survives `postMessage`), and
 * joined by each with `GpuBackend.joinCommunicator`. NCCL's `ncclUniqueId` on CUDA; shared
 * memory on the CPU backend.
 */
export interface CommunicatorId {
  /** The backend kind that made it ('cpu', 'cuda'); another kind refuses it. */
  readonly backend: string;
  /** Ranks in the group. */
  readonly size: number;
  /** Backend-specific and opaque: only the backend that made it reads it. */
  readonly payload: unknown;
}

/** One collective's buffers: device addresses on the calling rank, counts in elements. */
export interface CollectiveArgs {
  readonly send: DevicePtr;
  readonly recv: DevicePtr;
  /**
   * allReduce: elements of send and of recv. allGather: elements each rank sends (recv holds
   * size × count, rank r's at r × count). reduceScatter: elements each rank receives (send holds
   * size × count, the part for rank r at r × count). allToAll: elements sent to each peer (send
   * and recv hold size × count; recv's part r came from rank r).
   */
  readonly count: number;
  readonly dtype: FloatDtype;
  readonly stream: Stream;
}

/**
 * One rank's handle on a group of ranks, one per device, for the collectives of tensor and expert
 * parallelism. Every call is enqueued on `stream` like a kernel launch: it runs in stream order,
 * is recorded while the stream captures (and runs again at each replay), and completes when every
 * rank of the group has reached the same call; ranks must issue the same collectives in the same
 * order. Reductions are sums. f32 sums are deterministic: the same inputs give the same bits on
 * every rank and every run (the CPU backend adds rank 0, 1, … in order; NCCL's ring is fixed for
 * a fixed group and message size). Half types are summed in f32 and rounded once on the CPU
 * backend; NCCL rounds after each step of its ring.
 */
export interface Communicator {
  readonly rank: number;
  readonly size: number;
  /** recv = Σ over ranks of send (in place when send = recv). */
  allReduce(args: CollectiveArgs): void;
  /** recv[r · count …] = rank r's send. */
  allGather(args: CollectiveArgs): void;
  /** recv = Σ over ranks of their send[rank · count …]: the reduced part for this rank. */
  reduceScatter(args: CollectiveArgs): void;
  /** recv[r · count …] = rank r's send[rank · count …]: every pair of ranks swaps one part. */
  allToAll(args: CollectiveArgs): void;
  /**
   * Makes every rank's pending and later collectives fail (with `reason`) instead of waiting for
   * a rank that will not come: called by a rank whose step failed part-way.
   */
  abort(reason: string): void;
  /** Releases the rank's resources (not the device memory it reduced into). */
  dispose(): void;
}

export type CollectiveOp = 'allReduce' | 'allGather' | 'reduceScatter' | 'allToAll';

const COLLECTIVE_DTYPES: ReadonlySet<string> = new Set(['f32', 'bf16', 'f16']);

/**
 * Checks a collective's element type and count (an `InvalidArgumentError` naming `call` when
 * wrong) and returns how many elements it reads from `send` and writes to `recv` on a rank of a
 * group of `size`, as `CollectiveArgs.count` defines them.
 */
export function collectiveExtent(call: string, op: CollectiveOp, a: CollectiveArgs, size: number): { readonly send: number; readonly recv: number } {
  if (!COLLECTIVE_DTYPES.has(a.dtype)) throw new InvalidArgumentError(`${call}: dtype must be 'f32', 'bf16' or 'f16', got ${String(a.dtype)}`);
  if (!Number.isSafeInteger(a.count) || a.count < 0) throw new InvalidArgumentError(`${call}: count must be a non-negative integer, got ${a.count}`);
  const all = a.count * size;
  switch (op) {
    case 'allReduce': return { send: a.count, recv: a.count };
    case 'allGather': return { send: a.count, recv: all };
    case 'reduceScatter': return { send: all, recv: a.count };
    case 'allToAll': return { send: all, recv: all };
  }
}
