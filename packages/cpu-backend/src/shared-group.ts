import { DeviceError, InvalidArgumentError, type CommunicatorId } from '@metrale/core';

/** Control words at the start of the shared memory (Int32 indices). */
const COUNT = 0;
const GEN = 1;
const ABORTED = 2;
const REASON_LENGTH = 3;
const JOINED = 4;
const CONTROL_WORDS = 8;
const REASON_BYTES = 1024;
const HEADER_BYTES = CONTROL_WORDS * 4 + REASON_BYTES;

/** Bytes each rank stages per round of a collective, by default; larger messages go in rounds. */
export const DEFAULT_SLOT_BYTES = 1 << 20;
/** How long a rank waits at a collective for the others before it aborts the group. */
export const DEFAULT_TIMEOUT_MS = 300_000;

export interface CpuGroupOptions {
  /** Bytes each rank stages per round (default 1 MiB): a collective moves its data in rounds of this. */
  readonly slotBytes?: number;
  /** Milliseconds a rank waits at a collective before the group is aborted (default 300 s). */
  readonly timeoutMs?: number;
}

interface CpuGroupPayload {
  readonly shared: SharedArrayBuffer;
  readonly slotBytes: number;
  readonly timeoutMs: number;
}

/** A new group's id: shared memory that every rank's thread maps (it survives `postMessage`). */
export function cpuCommunicatorId(size: number, options: CpuGroupOptions = {}): CommunicatorId {
  if (!Number.isSafeInteger(size) || size < 1) throw new InvalidArgumentError(`createCommunicatorId: size must be a positive integer, got ${size}`);
  const slotBytes = options.slotBytes ?? DEFAULT_SLOT_BYTES;
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isSafeInteger(slotBytes) || slotBytes < 16 || slotBytes % 8 !== 0) {
    throw new InvalidArgumentError(`createCommunicatorId: slotBytes must be a multiple of 8, at least 16, got ${slotBytes}`);
  }
  if (!(timeoutMs > 0)) throw new InvalidArgumentError(`createCommunicatorId: timeoutMs must be positive, got ${timeoutMs}`);
  const payload: CpuGroupPayload = { shared: new SharedArrayBuffer(HEADER_BYTES + size * slotBytes), slotBytes, timeoutMs };
  return Object.freeze({ backend: 'cpu', size, payload });
}

/**
 * The ranks' meeting place: a barrier, a sticky abort with its reason, and one staging slot per
 * rank, all in shared memory. Each rank lives on its own thread; a rank that arrives first waits
 * (Atomics.wait) for the others, as a GPU stream waits at an NCCL kernel.
 */
export class SharedGroup {
  readonly size: number;
  readonly slotBytes: number;
  readonly #timeoutMs: number;
  readonly #control: Int32Array;
  readonly #reason: Uint8Array;
  readonly #shared: SharedArrayBuffer;

  constructor(call: string, id: CommunicatorId, rank: number) {
    if (id?.backend !== 'cpu') throw new InvalidArgumentError(`${call}: the id was made by the ${String(id?.backend)} backend; a cpu backend joins only ids of createCommunicatorId on a cpu backend`);
    const p = id.payload as Partial<CpuGroupPayload> | undefined;
    if (!(p?.shared instanceof SharedArrayBuffer) || !Number.isSafeInteger(p.slotBytes) || typeof p.timeoutMs !== 'number') {
      throw new InvalidArgumentError(`${call}: the id's payload is not a cpu group (made by createCommunicatorId?)`);
    }
    if (!Number.isSafeInteger(rank) || rank < 0 || rank >= id.size) throw new InvalidArgumentError(`${call}: rank must be an integer in 0..${id.size - 1}, got ${rank}`);
    this.size = id.size;
    this.slotBytes = p.slotBytes!;
    this.#timeoutMs = p.timeoutMs;
    this.#shared = p.shared;
    this.#control = new Int32Array(p.shared, 0, CONTROL_WORDS);
    this.#reason = new Uint8Array(p.shared, CONTROL_WORDS * 4, REASON_BYTES);
    if (rank >= 31) throw new InvalidArgumentError(`${call}: the cpu backend simulates at most 31 ranks, got rank ${rank}`);
    const bit = 1 << rank;
    if (Atomics.or(this.#control, JOINED, bit) & bit) throw new InvalidArgumentError(`${call}: rank ${rank} has already joined this group`);
  }

  /** Rank r's staging bytes. */
  slot(rank: number): Uint8Array {
    return new Uint8Array(this.#shared, HEADER_BYTES + rank * this.slotBytes, this.slotBytes);
  }

  /** Waits until every rank has arrived; throws when the group is (or becomes) aborted or the wait times out. */
  barrier(call: string, rank: number): void {
    const c = this.#control;
    this.throwIfAborted(call);
    const gen = Atomics.load(c, GEN);
    if (Atomics.add(c, COUNT, 1) === this.size - 1) {
      Atomics.store(c, COUNT, 0);
      Atomics.add(c, GEN, 1);
      Atomics.notify(c, GEN);
      return;
    }
    const deadline = performance.now() + this.#timeoutMs;
    while (Atomics.load(c, GEN) === gen) {
      this.throwIfAborted(call);
      const left = deadline - performance.now();
      if (left <= 0) {
        const reason = `rank ${rank} waited ${this.#timeoutMs} ms at ${call} for the other ranks`;
        this.abort(reason);
        throw new DeviceError(call, `${reason}; the group is aborted`, 'ncclSystemError');
      }
      Atomics.wait(c, GEN, gen, Math.min(left, 100));
    }
  }

  /** Marks the group failed (the first reason is kept) and wakes every waiting rank. */
  abort(reason: string): void {
    const c = this.#control;
    if (Atomics.compareExchange(c, ABORTED, 0, 1) === 0) {
      const bytes = new TextEncoder().encode(reason).subarray(0, REASON_BYTES);
      this.#reason.set(bytes);
      Atomics.store(c, REASON_LENGTH, bytes.length);
      Atomics.store(c, ABORTED, 2);
    }
    Atomics.notify(c, GEN);
  }

  throwIfAborted(call: string): void {
    const state = Atomics.load(this.#control, ABORTED);
    if (state === 0) return;
    // The reason is written between states 1 and 2.
    while (Atomics.load(this.#control, ABORTED) === 1) Atomics.wait(this.#control, ABORTED, 1, 1);
    const n = Atomics.load(this.#control, REASON_LENGTH);
    const reason = new TextDecoder().decode(this.#reason.slice(0, n));
    throw new DeviceError(call, `the communicator group was aborted: ${reason}`, 'ncclRemoteError');
  }
}
