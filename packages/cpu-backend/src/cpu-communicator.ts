import {
  InvalidArgumentError, bf16BitsToF32, collectiveExtent, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, floatBytes,
  type CollectiveArgs, type CollectiveOp, type Communicator, type CommunicatorId, type DevicePtr, type FloatDtype, type Stream,
} from '@metrale/core';
import type { MemoryArena } from './memory-arena.js';
import { SharedGroup } from './shared-group.js';

/** What a rank's communicator needs of its backend: its memory and its stream submission. */
export interface CommunicatorHost {
  readonly arena: MemoryArena;
  /** Runs `run` in stream order (recorded while the stream captures); as the backend's own work. */
  submit(call: string, stream: Stream | undefined, label: string, run: (call: string) => void): void;
  /** Counts one collective that ran. */
  ran(): void;
}

type Op = CollectiveOp;

/**
 * A rank of a group of CPU backends, each on its own thread, meeting in shared memory: a collective
 * runs when the rank's stream reaches it and returns when every rank has reached it, moving the
 * data through the ranks' staging slots in rounds. Sums add rank 0, 1, … in order in f32 (half
 * types round once at the end), so every rank gets the same bits on every run.
 */
export class CpuCommunicator implements Communicator {
  readonly rank: number;
  readonly size: number;
  readonly #group: SharedGroup;
  readonly #host: CommunicatorHost;
  #disposed = false;

  constructor(id: CommunicatorId, rank: number, host: CommunicatorHost) {
    this.#group = new SharedGroup('joinCommunicator', id, rank);
    this.rank = rank;
    this.size = id.size;
    this.#host = host;
  }

  allReduce(args: CollectiveArgs): void {
    this.#enqueue('allReduce', args);
  }

  allGather(args: CollectiveArgs): void {
    this.#enqueue('allGather', args);
  }

  reduceScatter(args: CollectiveArgs): void {
    this.#enqueue('reduceScatter', args);
  }

  allToAll(args: CollectiveArgs): void {
    this.#enqueue('allToAll', args);
  }

  abort(reason: string): void {
    this.#group.abort(`rank ${this.rank}: ${reason}`);
  }

  dispose(): void {
    this.#disposed = true;
  }

  #enqueue(op: Op, a: CollectiveArgs): void {
    const call = `${op} (rank ${this.rank} of ${this.size})`;
    if (this.#disposed) throw new InvalidArgumentError(`${call}: the communicator was disposed`);
    const extent = collectiveExtent(call, op, a, this.size);
    const eb = floatBytes(a.dtype);
    const { arena } = this.#host;
    arena.check(`${call} (send)`, a.send, extent.send * eb);
    arena.check(`${call} (recv)`, a.recv, extent.recv * eb);
    const frozen = Object.freeze({ ...a });
    this.#host.submit(call, a.stream, `${op} ${a.count} ${a.dtype}`, (c) => {
      this.#run(op, c, frozen);
      this.#host.ran();
    });
  }

  #run(op: Op, call: string, a: CollectiveArgs): void {
    const g = this.#group;
    const eb = floatBytes(a.dtype);
    const { arena } = this.#host;
    const peers = op === 'allReduce' || op === 'allGather' ? 1 : this.size;
    // Elements per peer part and round: a round stages `peers` parts in the rank's slot.
    const perRound = Math.max(1, Math.floor(g.slotBytes / (eb * peers)));
    const mine = g.slot(this.rank);
    const at = (ptr: DevicePtr, elements: number): DevicePtr => ptr + BigInt(elements * eb);
    for (let off = 0; off < a.count; off += perRound) {
      const n = Math.min(perRound, a.count - off);
      // Stage: this rank's part(s) of the round.
      for (let p = 0; p < peers; p++) mine.set(arena.bytes(call, at(a.send, p * a.count + off), n * eb), p * n * eb);
      g.barrier(call, this.rank);
      switch (op) {
        case 'allReduce':
          sumInto(arena.bytes(call, at(a.recv, off), n * eb), g, 0, n, a.dtype);
          break;
        case 'reduceScatter':
          sumInto(arena.bytes(call, at(a.recv, off), n * eb), g, this.rank * n, n, a.dtype);
          break;
        case 'allGather':
          for (let r = 0; r < this.size; r++) arena.bytes(call, at(a.recv, r * a.count + off), n * eb).set(g.slot(r).subarray(0, n * eb));
          break;
        case 'allToAll':
          for (let r = 0; r < this.size; r++) {
            arena.bytes(call, at(a.recv, r * a.count + off), n * eb).set(g.slot(r).subarray(this.rank * n * eb, (this.rank + 1) * n * eb));
          }
          break;
      }
      // Nobody restages a slot while another rank may still read it.
      g.barrier(call, this.rank);
    }
  }
}

/** out = Σ over ranks r = 0, 1, … of slot r's elements [first, first + n), summed in f32 in rank order. */
function sumInto(out: Uint8Array, g: SharedGroup, first: number, n: number, dtype: FloatDtype): void {
  const acc = new Float32Array(n);
  for (let r = 0; r < g.size; r++) {
    const slot = g.slot(r);
    if (dtype === 'f32') {
      const v = new Float32Array(slot.buffer, slot.byteOffset + first * 4, n);
      if (r === 0) acc.set(v);
      else for (let i = 0; i < n; i++) acc[i]! += v[i]!;
    } else {
      const v = new Uint16Array(slot.buffer, slot.byteOffset + first * 2, n);
      const decode = dtype === 'bf16' ? bf16BitsToF32 : f16BitsToF32;
      for (let i = 0; i < n; i++) acc[i] = r === 0 ? decode(v[i]!) : acc[i]! + decode(v[i]!);
    }
  }
  if (dtype === 'f32') {
    out.set(new Uint8Array(acc.buffer));
    return;
  }
  const bits = new Uint16Array(n);
  const encode = dtype === 'bf16' ? f32ToBf16Bits : f32ToF16Bits;
  for (let i = 0; i < n; i++) bits[i] = encode(acc[i]!);
  out.set(new Uint8Array(bits.buffer));
}
