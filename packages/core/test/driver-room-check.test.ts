import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, ReplayRoomError, type Sequence } from '../src/index.js';
import { expectThrow, Inputs, withRig, type Rig } from './support/driver-rig.js';

function prefilled(rig: Rig, inputs: Inputs, lengths: number[]): Sequence[] {
  const seqs = lengths.map(() => rig.open());
  const rows = lengths.reduce((a, b) => a + b, 0);
  rig.prefill(seqs, lengths, inputs.rows(rows), inputs.tokens(rows));
  return seqs;
}

/** Everything a refused step must leave as it was. */
function snapshot(rig: Rig, seqs: readonly Sequence[]) {
  rig.gpu.synchronize();
  return {
    digest: rig.gpu.memoryDigest(),
    lengths: seqs.map((s) => s.length),
    awaiting: seqs.map((s) => s.awaitingAccept),
    states: seqs.flatMap((s) => rig.layers.map((l, i) => l.inspectState(rig.driver.stateOf(s, i) as never))),
    graphs: rig.driver.graphs.describe(),
  };
}

describe('step driver: a failed room check', () => {
  it('throws before any prestage or write, leaves memory and host state untouched, and the next step runs normally', () => {
    withRig({}, (rig) => {
      const inputs = new Inputs(71);
      const [a, b] = prefilled(rig, inputs, [3, 2]);
      expect(rig.step([a!, b!], undefined, inputs.rows(2), inputs.tokens(2)).result.path).toBe('capture');
      const before = snapshot(rig, [a!, b!]);
      rig.recording(1).failRoom = true;
      rig.log.clear();
      const error = expectThrow(
        () => rig.driver.decode({ seqs: [a!, b!], input: inputs.rows(2), tokens: inputs.tokens(2) }),
        ReplayRoomError,
        /L1: a step of 1 row\(s\) at length 4 ends at 5/,
      );
      expect([error.layer, error.seqLen, error.k]).toEqual(['L1', 4, 1]);
      // Checks ran layer by layer up to the failing one; nothing else was called.
      expect(rig.log.lines()).toEqual([
        `checkReplayRoom L0 s${a!.slot} len=4 k=1`,
        `checkReplayRoom L0 s${b!.slot} len=3 k=1`,
        `checkReplayRoom L1 s${a!.slot} len=4 k=1`,
      ]);
      expect(snapshot(rig, [a!, b!])).toEqual(before);
      expectThrow(() => rig.driver.accept([1, 1]), InvalidArgumentError, /no verify step is waiting/);

      rig.recording(1).failRoom = false;
      const next = rig.step([a!, b!], undefined, inputs.rows(2), inputs.tokens(2));
      expect(next.result.path).toBe('replay');
      // The host model never saw the refused step: equal outputs mean it left no trace.
      expect(next.output).toEqual(next.expected);
      expect([a!.length, b!.length]).toEqual([5, 4]);
    });
  });

  it('refuses a replayed verify without leaving it pending', () => {
    withRig({ layers: [{ name: 'L0', salt: 0.125, woaStashFloats: 4 }, { name: 'L1', salt: -0.375 }] }, (rig) => {
      const inputs = new Inputs(72);
      const [a, b, c] = prefilled(rig, inputs, [3, 2, 5]);
      const first = rig.step([a!, b!], 3, inputs.rows(6), inputs.tokens(6));
      expect(first.output).toEqual(first.expected);
      rig.driver.accept([3, 1]);
      const before = snapshot(rig, [a!, b!, c!]);
      rig.recording(0).failRoom = true;
      rig.log.clear();
      expectThrow(() => rig.driver.verify({ seqs: [b!, a!], k: 3, input: inputs.rows(6), tokens: inputs.tokens(6) }), ReplayRoomError, /L0/);
      // Host-side only: the batched-run question, then the room check that refuses.
      expect(rig.log.lines()).toEqual(['gdnVerifyRunBatched L0', 'gdnVerifyRunBatched L1', `checkReplayRoom L0 s${b!.slot} len=3 k=3`]);
      expect(snapshot(rig, [a!, b!, c!])).toEqual(before);
      expectThrow(() => rig.driver.accept([1, 1]), InvalidArgumentError, /no verify step is waiting/);

      rig.recording(0).failRoom = false;
      const again = rig.step([b!, a!], 3, inputs.rows(6), inputs.tokens(6));
      expect(again.result.path).toBe('replay');
      expect(again.output).toEqual(again.expected);
      rig.driver.accept([2, 0]);
      expect(rig.log.lines('gdnFoldAccepted')).toEqual(['gdnFoldAccepted L0']);
      expect([a!.length, b!.length]).toEqual([6, 5]);
    });
  });

  it('is checked against the cache capacity with the length before the step and k', () => {
    withRig({ layers: [{ name: 'L0', salt: 0.125, capacity: 7 }, { name: 'L1', salt: -0.375 }] }, (rig) => {
      const inputs = new Inputs(73);
      const [a] = prefilled(rig, inputs, [5]);
      expect(rig.step([a!], undefined, inputs.rows(1), inputs.tokens(1)).result.path).toBe('capture');
      expect(rig.step([a!], undefined, inputs.rows(1), inputs.tokens(1)).result.path).toBe('replay');
      expect(a!.length).toBe(7);
      const before = snapshot(rig, [a!]);
      const error = expectThrow(() => rig.driver.decode({ seqs: [a!], input: inputs.rows(1) }), ReplayRoomError, /past the cache capacity 7/);
      expect([error.seqLen, error.k, error.capacity]).toEqual([7, 1, 7]);
      expect(snapshot(rig, [a!])).toEqual(before);
    });
  });
});
