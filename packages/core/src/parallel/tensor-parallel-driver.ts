import { receiveMessageOnPort, type MessagePort } from 'node:worker_threads';
import type { LayerLimits } from '../contract/layer.js';
import type { GpuBackend, Stream } from '../device/gpu-backend.js';
import type { BatchBuckets } from '../driver/batch-buckets.js';
import type { Sequence } from '../driver/sequence.js';
import type { StepDriver, StepInput, StepResult } from '../driver/step-driver.js';
import type { StepRunner } from '../driver/step-runner.js';
import { DeviceError, InvalidArgumentError } from '../errors.js';
import type { KvCacheInfo } from '../kv/kv-binding.js';
import type { KvCache } from '../kv/kv-cache.js';
import type { Communicator } from './communicator.js';
import { IN_STEP_ERRORS, type RankCommand, type RankEnvelope, type RankReply } from './rank-protocol.js';

/** The leader's end of one follower rank: the port commands go out on, and the word its replies bump. */
export interface FollowerLink {
  readonly port: MessagePort;
  /** Shared Int32Array(1), the follower's `RankFollowerOptions.signal`. */
  readonly signal: Int32Array;
}

export interface TensorParallelDriverOptions {
  /** Rank 0's driver, over rank 0's shard of the model; its results are what the engine reads. */
  readonly local: StepDriver;
  /** Rank 0's communicator. */
  readonly comm: Communicator;
  /** Ranks 1 … size − 1, in rank order. */
  readonly followers: readonly FollowerLink[];
  /** How long to wait for a follower's reply to one command (default 600 s). */
  readonly replyTimeoutMs?: number;
}

/** How long ranks that failed alike before any device work get to say so before the group is aborted. */
const IN_STEP_GRACE_MS = 5_000;
/** How long dispose waits for the followers' answers (a follower that is gone is not waited for longer). */
const DISPOSE_WAIT_MS = 30_000;

/**
 * A tensor-parallel group driven as one `StepRunner`: each call is sent to every follower rank
 * (which runs it on its own device and driver) and run on rank 0's driver here; the ranks meet in
 * the collectives inside their layers, and the call returns when every rank has answered. The
 * logits are rank 0's. A rank whose step fails part-way aborts the group's communicator, so no
 * rank waits forever, and the group refuses every later call: the engine must be restarted.
 */
export class TensorParallelDriver implements StepRunner {
  readonly local: StepDriver;
  readonly comm: Communicator;
  readonly #followers: readonly FollowerLink[];
  readonly #timeoutMs: number;
  #seq = 0;
  #broken: string | undefined;
  #disposed = false;

  constructor(options: TensorParallelDriverOptions) {
    const { local, comm, followers } = options;
    if (comm.rank !== 0) throw new InvalidArgumentError(`TensorParallelDriver: the leader is rank 0, got a communicator of rank ${comm.rank}`);
    if (followers.length !== comm.size - 1) throw new InvalidArgumentError(`TensorParallelDriver: a group of ${comm.size} ranks needs ${comm.size - 1} followers, got ${followers.length}`);
    this.local = local;
    this.comm = comm;
    this.#followers = followers;
    this.#timeoutMs = options.replyTimeoutMs ?? 600_000;
  }

  get gpu(): GpuBackend { return this.local.gpu; }
  get stream(): Stream { return this.local.stream; }
  get limits(): LayerLimits { return this.local.limits; }
  get buckets(): BatchBuckets { return this.local.buckets; }
  get size(): number { return this.comm.size; }
  get kv(): KvCache { return this.local.kv; }
  get kvInfo(): KvCacheInfo { return this.local.kvInfo; }
  // Prefix caching is off under tensor parallelism: each rank's pool hands out its own pages as its
  // sequences grow (the same calls give every rank the same needs), but shared cached blocks would
  // have to be kept alike on every rank.
  get canResume(): boolean { return false; }
  get savesState(): boolean { return false; }
  /** Why the group failed (it refuses every call since), or undefined while it works. */
  get broken(): string | undefined { return this.#broken; }

  open(prefix?: readonly string[]): Sequence {
    if (prefix && prefix.length > 0) throw new InvalidArgumentError('tensor-parallel driver: sequences cannot start at a cached prefix (prefix caching is off under tensor parallelism)');
    let seq: Sequence | undefined;
    this.#run({ op: 'open' }, () => (seq = this.local.open()), (reply, rank) => {
      const o = reply.opened;
      if (o?.id !== seq!.id || o.slot !== seq!.slot) {
        return `rank ${rank} opened sequence ${o?.id} in slot ${o?.slot}, rank 0 sequence ${seq!.id} in slot ${seq!.slot}`;
      }
      return undefined;
    });
    return seq!;
  }

  close(seq: Sequence): void {
    this.#run({ op: 'close', id: seq.id }, () => this.local.close(seq));
  }

  saveSnapshot(): void {
    throw new InvalidArgumentError('tensor-parallel driver: no state snapshots (prefix caching is off under tensor parallelism)');
  }

  prefill(input: StepInput & { readonly lengths: readonly number[] }, onChunk?: (result: StepResult, firstRow: number) => void): StepResult {
    let result: StepResult | undefined;
    this.#run({ op: 'prefill', ids: input.seqs.map((s) => s.id), lengths: input.lengths, ...rowsOf(input) }, () => (result = this.local.prefill(input, onChunk)));
    return result!;
  }

  decode(input: StepInput): StepResult {
    let result: StepResult | undefined;
    this.#run({ op: 'decode', ids: input.seqs.map((s) => s.id), ...rowsOf(input) }, () => (result = this.local.decode(input)));
    return result!;
  }

  verify(input: StepInput & { readonly k: number }): StepResult {
    let result: StepResult | undefined;
    this.#run({ op: 'verify', ids: input.seqs.map((s) => s.id), k: input.k, ...rowsOf(input) }, () => (result = this.local.verify(input)));
    return result!;
  }

  accept(accepted: readonly number[]): void {
    this.#run({ op: 'accept', accepted: [...accepted] }, () => this.local.accept(accepted));
  }

  readOutput(result: StepResult): Uint8Array {
    return this.local.readOutput(result);
  }

  readOutputF32(result: StepResult): Float32Array {
    return this.local.readOutputF32(result);
  }

  /** Disposes every rank's driver (the followers' threads, stacks and communicators are their owners'). */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    const seq = this.#send({ op: 'dispose' });
    try {
      this.local.dispose();
    } finally {
      this.#await(seq, this.#broken ? IN_STEP_GRACE_MS : Math.min(this.#timeoutMs, DISPOSE_WAIT_MS));
    }
  }

  #send(command: RankCommand): number {
    const seq = this.#seq++;
    const envelope: RankEnvelope = { seq, command };
    for (const f of this.#followers) f.port.postMessage(envelope);
    return seq;
  }

  /**
   * Sends `command`, runs `local`, waits for every follower's answer and turns any failure into
   * one error: a failure every rank had alike before any device work is rethrown and the group
   * goes on; any other breaks the group.
   */
  #run(command: RankCommand, local: () => unknown, check?: (reply: RankReply, rank: number) => string | undefined): void {
    if (this.#disposed) throw new InvalidArgumentError('this TensorParallelDriver was disposed');
    if (this.#broken) throw new DeviceError('tensor-parallel group', `the group failed earlier (${this.#broken}); restart the engine`);
    const seq = this.#send(command);
    let localError: unknown;
    try {
      local();
    } catch (error) {
      localError = error;
    }
    const localName = (localError as Error | undefined)?.name;
    const inStep = localError !== undefined && IN_STEP_ERRORS.has(localName ?? '');
    if (localError !== undefined && !inStep) this.#abort(`${command.op} failed on rank 0: ${(localError as Error)?.message ?? String(localError)}`);
    let replies = this.#await(seq, inStep ? IN_STEP_GRACE_MS : this.#timeoutMs);
    if (inStep && replies.some((r) => !r)) {
      this.#abort(`${command.op} failed on rank 0 before any device work: ${(localError as Error).message}`);
      replies = replies.map((r, i) => r ?? this.#awaitOne(i, seq, this.#timeoutMs));
    }
    const problems: string[] = [];
    replies.forEach((r, i) => {
      const rank = i + 1;
      if (!r) problems.push(`rank ${rank} did not answer ${command.op} within ${this.#timeoutMs} ms`);
      else if (!r.ok) {
        const alike = inStep && !r.aborted && r.error?.name === localName && r.error?.message === (localError as Error).message;
        if (!alike) problems.push(`rank ${rank}: ${r.error?.name}: ${r.error?.message}`);
      } else if (localError !== undefined) problems.push(`rank ${rank} ran ${command.op} while rank 0 failed`);
      else {
        const wrong = check?.(r, rank);
        if (wrong) problems.push(wrong);
      }
    });
    if (problems.length > 0) {
      const reason = problems.join('; ');
      this.#abort(reason);
      this.#broken = reason;
      if (localError !== undefined) throw localError;
      throw new DeviceError(`tensor-parallel ${command.op}`, `${reason}; the group is aborted`);
    }
    if (localError !== undefined) {
      if (!inStep) this.#broken = (localError as Error)?.message ?? String(localError);
      throw localError;
    }
  }

  #abort(reason: string): void {
    this.comm.abort(reason);
  }

  #await(seq: number, timeoutMs: number): (RankReply | undefined)[] {
    return this.#followers.map((_, i) => this.#awaitOne(i, seq, timeoutMs));
  }

  /** The reply of follower i to command `seq` (older replies are skipped), or undefined after `timeoutMs`. */
  #awaitOne(i: number, seq: number, timeoutMs: number): RankReply | undefined {
    const { port, signal } = this.#followers[i]!;
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const seen = Atomics.load(signal, 0);
      const m = receiveMessageOnPort(port);
      if (m) {
        const reply = m.message as RankReply;
        if (reply.seq === seq) return reply;
        continue;
      }
      const left = deadline - performance.now();
      if (left <= 0) return undefined;
      Atomics.wait(signal, 0, seen, Math.min(left, 100));
    }
  }
}

function rowsOf(input: StepInput): { tokens?: Int32Array; input?: Uint8Array } {
  return {
    ...(input.tokens ? { tokens: input.tokens } : {}),
    ...(input.input ? { input: new Uint8Array(input.input.buffer, input.input.byteOffset, input.input.byteLength) } : {}),
  };
}
