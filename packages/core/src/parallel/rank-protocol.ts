/**
 * The messages between the leader of a tensor-parallel group (rank 0, where the engine loop runs)
 * and each follower rank (a thread or process with its own device and step driver): one command
 * per driver call, with the sequences named by id, and one reply per command. Every rank's driver
 * sees the same calls in the same order, so sequence ids and slots agree on every rank.
 */
export type RankCommand =
  | { readonly op: 'open' }
  | { readonly op: 'close'; readonly id: number }
  | { readonly op: 'prefill'; readonly ids: readonly number[]; readonly lengths: readonly number[]; readonly tokens?: Int32Array; readonly input?: Uint8Array }
  | { readonly op: 'decode'; readonly ids: readonly number[]; readonly tokens?: Int32Array; readonly input?: Uint8Array }
  | { readonly op: 'verify'; readonly ids: readonly number[]; readonly k: number; readonly tokens?: Int32Array; readonly input?: Uint8Array }
  | { readonly op: 'accept'; readonly accepted: readonly number[] }
  | { readonly op: 'dispose' };

export interface RankReply {
  /** The command's number, counted from 0 by the leader. */
  readonly seq: number;
  readonly ok: boolean;
  /** open: the sequence the follower opened, to check that the ranks agree. */
  readonly opened?: { readonly id: number; readonly slot: number };
  /** A failed command: the error's class name and message. */
  readonly error?: { readonly name: string; readonly message: string };
  /** The follower aborted the group's communicator (its step failed part-way). */
  readonly aborted?: boolean;
}

/** A numbered command as it travels. */
export interface RankEnvelope {
  readonly seq: number;
  readonly command: RankCommand;
}

/**
 * Errors every rank throws alike before any device work of a step (argument checks, the replay
 * room check): the group stays in step, so no rank aborts the communicator for them.
 */
export const IN_STEP_ERRORS: ReadonlySet<string> = new Set(['InvalidArgumentError', 'ReplayRoomError']);
