import {
  FLOAT_DTYPE_CODE, InvalidArgumentError, collectiveExtent, floatBytes,
  type CollectiveArgs, type CollectiveOp, type Communicator, type CommunicatorId, type DevicePtr, type Stream,
} from '@metrale/core';

/** What a rank's communicator needs of its CUDA backend. */
export interface NcclHost {
  /** Throws unless `bytes` at `ptr` lie inside one live allocation. */
  checkRange(ptr: DevicePtr, bytes: number, call: string): void;
  /** The native id of a stream that may take work now (capture rules applied). */
  workStream(stream: Stream, call: string): number;
  /** Runs an addon call, turning its failure into a DeviceError. */
  call<T>(call: string, run: () => T): T;
  collective(kind: number, comm: number, send: DevicePtr, recv: DevicePtr, count: number, dtypeCode: number, stream: number): void;
  /** ncclCommAbort (abort) or ncclCommDestroy. */
  release(comm: number, abort: boolean): void;
}

/** The collectives' numbers in the addon (native/device-collectives.cc). */
const KIND: Readonly<Record<CollectiveOp, number>> = { allReduce: 0, allGather: 1, reduceScatter: 2, allToAll: 3 };

/** NCCL's id, checked: 128 bytes made by `createCommunicatorId` on a CUDA backend. */
export function ncclIdBytes(call: string, id: CommunicatorId): Uint8Array {
  if (id?.backend !== 'cuda') throw new InvalidArgumentError(`${call}: the id was made by the ${String(id?.backend)} backend; a cuda backend joins only ids of createCommunicatorId on a cuda backend`);
  const bytes = id.payload;
  if (!(bytes instanceof Uint8Array) || bytes.byteLength !== 128) throw new InvalidArgumentError(`${call}: the id's payload is not a 128-byte ncclUniqueId`);
  return bytes;
}

/**
 * One rank of an NCCL group on a CUDA backend: each collective is enqueued on the given stream of
 * this backend's device (recorded when the stream captures), with NCCL's sum. The counts are
 * those of `Communicator` (all-to-all is NCCL's grouped send and receive per peer).
 */
export class NcclCommunicator implements Communicator {
  readonly rank: number;
  readonly size: number;
  readonly #comm: number;
  readonly #host: NcclHost;
  #disposed = false;

  constructor(comm: number, rank: number, size: number, host: NcclHost) {
    this.#comm = comm;
    this.rank = rank;
    this.size = size;
    this.#host = host;
  }

  allReduce(a: CollectiveArgs): void {
    this.#enqueue('allReduce', a);
  }

  allGather(a: CollectiveArgs): void {
    this.#enqueue('allGather', a);
  }

  reduceScatter(a: CollectiveArgs): void {
    this.#enqueue('reduceScatter', a);
  }

  allToAll(a: CollectiveArgs): void {
    this.#enqueue('allToAll', a);
  }

  /** ncclCommAbort: the other ranks' collectives waiting for this one fail instead of hanging. */
  abort(_reason: string): void {
    this.#release(true);
  }

  dispose(): void {
    this.#release(false);
  }

  #release(abort: boolean): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#host.call(abort ? 'ncclCommAbort' : 'ncclCommDestroy', () => this.#host.release(this.#comm, abort));
  }

  #enqueue(op: CollectiveOp, a: CollectiveArgs): void {
    const call = `${op} (rank ${this.rank} of ${this.size})`;
    if (this.#disposed) throw new InvalidArgumentError(`${call}: the communicator was disposed or aborted`);
    const extent = collectiveExtent(call, op, a, this.size);
    if (a.count === 0) return;
    const eb = floatBytes(a.dtype);
    this.#host.checkRange(a.send, extent.send * eb, `${call} (send)`);
    this.#host.checkRange(a.recv, extent.recv * eb, `${call} (recv)`);
    const sid = this.#host.workStream(a.stream, call);
    this.#host.call(call, () => this.#host.collective(KIND[op], this.#comm, a.send, a.recv, a.count, FLOAT_DTYPE_CODE[a.dtype], sid));
  }
}
