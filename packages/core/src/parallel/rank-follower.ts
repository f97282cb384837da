import type { MessagePort } from 'node:worker_threads';
import type { Sequence } from '../driver/sequence.js';
import type { StepDriver, StepInput } from '../driver/step-driver.js';
import { InvalidArgumentError } from '../errors.js';
import type { Communicator } from './communicator.js';
import { IN_STEP_ERRORS, type RankCommand, type RankEnvelope, type RankReply } from './rank-protocol.js';

export interface RankFollowerOptions {
  readonly driver: StepDriver;
  readonly comm: Communicator;
  /** The leader's end of the link is the other port of this channel. */
  readonly port: MessagePort;
  /** Shared Int32Array(1): bumped and notified after each reply, so the leader can wait without an event loop. */
  readonly signal: Int32Array;
  /** Called after the `dispose` command was answered (the follower's thread may end). */
  readonly onDispose?: () => void;
}

/**
 * Runs a follower rank: each command from the leader is applied to this rank's driver, in order,
 * and answered. A step that fails part-way aborts the communicator, so ranks waiting in a
 * collective for this one fail instead of waiting forever.
 */
export function serveRankCommands(options: RankFollowerOptions): void {
  const { driver, comm, port, signal } = options;
  const seqs = new Map<number, Sequence>();
  const byId = (id: number): Sequence => {
    const s = seqs.get(id);
    if (!s) throw new InvalidArgumentError(`rank ${comm.rank}: sequence ${id} is not open here; the ranks are out of step`);
    return s;
  };
  const rows = (c: { tokens?: Int32Array; input?: Uint8Array }): Omit<StepInput, 'seqs'> => ({
    ...(c.tokens ? { tokens: c.tokens } : {}), ...(c.input ? { input: c.input } : {}),
  });
  const apply = (c: RankCommand): Partial<RankReply> => {
    switch (c.op) {
      case 'open': {
        const s = driver.open();
        seqs.set(s.id, s);
        return { opened: { id: s.id, slot: s.slot } };
      }
      case 'close':
        driver.close(byId(c.id));
        seqs.delete(c.id);
        return {};
      case 'prefill':
        driver.prefill({ seqs: c.ids.map(byId), lengths: c.lengths, ...rows(c) });
        return {};
      case 'decode':
        driver.decode({ seqs: c.ids.map(byId), ...rows(c) });
        return {};
      case 'verify':
        driver.verify({ seqs: c.ids.map(byId), k: c.k, ...rows(c) });
        return {};
      case 'accept':
        driver.accept(c.accepted);
        return {};
      case 'dispose':
        driver.dispose();
        return {};
    }
  };
  port.on('message', (m: RankEnvelope) => {
    let reply: RankReply;
    try {
      reply = { seq: m.seq, ok: true, ...apply(m.command) };
    } catch (error) {
      const name = (error as Error)?.name ?? 'Error';
      const message = (error as Error)?.message ?? String(error);
      const aborted = !IN_STEP_ERRORS.has(name);
      if (aborted) comm.abort(`${m.command.op} failed: ${message}`);
      reply = { seq: m.seq, ok: false, error: { name, message }, aborted };
    }
    port.postMessage(reply);
    Atomics.add(signal, 0, 1);
    Atomics.notify(signal, 0);
    if (m.command.op === 'dispose') {
      port.close();
      options.onDispose?.();
    }
  });
}
