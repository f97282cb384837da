import { describe, expect, it } from 'vitest';
import type { StepRunner } from '../src/driver/step-runner.js';
import { LoopSpeculation } from '../src/engine/loop-speculation.js';
import { startRunning, type RunningSequence } from '../src/engine/running-sequence.js';

const VOCAB = 16;
/** The verify target of cases that never verify (the gate's choices and the decoded-token checks alone). */
const NO_VERIFY = { driver: {} as StepRunner, vocab: VOCAB, picker: undefined };

/** A running sequence of `prompt`, as the loop admits it (the sequence record is never read here). */
function running(id: number, prompt: number[], sampling?: { temperature: number }): RunningSequence {
  return startRunning({ id, prompt, maxTokens: 32, ...(sampling ? { sampling } : {}) }, { id, slot: id, length: 0, awaitingAccept: false }, id, VOCAB);
}

/** What the loop's emit does to a sequence for a generated token. */
function generate(r: RunningSequence, token: number): void {
  r.history.push(token);
  r.generated++;
}

describe('LoopSpeculation', () => {
  it('without a gate verifies every step and checks no drafts against decoded tokens', () => {
    let proposals = 0;
    const spec = new LoopSpeculation({ proposer: { propose: () => (proposals++, [1]) }, k: 2, adaptive: false }, NO_VERIFY);
    const r = running(0, [1, 2]);
    expect(spec.adaptive).toBe(false);
    expect(spec.verifies(1, [r])).toBe(true);
    expect(spec.decodes(1, [r])).toBe(false);
    const before = spec.countsBefore([r]);
    expect(before).toBeUndefined();
    generate(r, 3);
    spec.checkDecoded([r], before);
    expect(r.shadow).toBeUndefined();
    expect(proposals).toBe(0);
  });

  it('with a gate decodes where verifies cost more than their accepted drafts bring, whatever the sequences sample with', () => {
    const spec = new LoopSpeculation({ proposer: { propose: () => [] }, k: 4 }, NO_VERIFY);
    const r = running(0, [1, 2]);
    // Nothing measured: the first step verifies to measure.
    expect(spec.verifies(1, [r])).toBe(true);
    spec.recordVerify(1, undefined); // the capture
    spec.recordVerify(1, 10);
    spec.recordDecode(1, 1);
    const before = spec.countsBefore([r]);
    generate(r, 3);
    spec.checkDecoded([r], before); // proposes nothing: 0 accepted
    expect(r.acceptedDrafts.perVerify).toBe(0);
    expect(spec.decodes(1, [r])).toBe(true);
    expect(spec.verifies(1, [r])).toBe(false);
    // A seeded sampled sequence no longer forces verifies: its tokens are the same either way.
    const seeded = running(1, [1, 2], { temperature: 1, seed: 5 } as { temperature: number });
    seeded.acceptedDrafts.perVerify = 0;
    expect(spec.verifies(1, [seeded])).toBe(false);
  });

  it("checks each sequence's drafts, greedy or sampled, against the tokens it decodes and takes the count in as a verify's; those that did not generate are left alone", () => {
    const spec = new LoopSpeculation({ proposer: { propose: (_history, max) => [7, 8, 9].slice(0, max) }, k: 2 }, NO_VERIFY);
    const greedy = running(0, [1, 2]);
    const sampled = running(1, [1, 2], { temperature: 1 });
    const idle = running(2, [1, 2]);
    const all = [greedy, sampled, idle];
    const step = (tokens: (number | undefined)[]) => {
      const before = spec.countsBefore(all)!;
      all.forEach((r, i) => tokens[i] !== undefined && generate(r, tokens[i]!));
      spec.checkDecoded(all, before);
    };
    step([3, 3, undefined]); // proposes [7, 8] for both sequences that generated
    expect(greedy.shadow?.drafts).toEqual([7, 8]);
    expect(sampled.shadow?.drafts).toEqual([7, 8]);
    expect(idle.shadow).toBeUndefined();
    step([7, 5, undefined]); // the greedy's first draft matched (not settled); the sampled one's differs: 0 accepted
    expect(greedy.acceptedDrafts.perVerify).toBeUndefined();
    expect(sampled.acceptedDrafts.perVerify).toBe(0);
    step([5, 7, undefined]); // the greedy's second differs: 1 accepted, and new drafts
    expect(greedy.acceptedDrafts.perVerify).toBe(1);
    expect(greedy.shadow?.drafts).toEqual([7, 8]);
    expect(idle.acceptedDrafts.perVerify).toBeUndefined();
  });
});
