import type { CheckResult } from './conformance.js';
import { compareRuns } from './compare-runs.js';
import { withHarness, type LayerSetup, type StepRecord } from './harness.js';
import type { RowSource, ScriptOp } from './script.js';

/**
 * `prefix-resume-equals-prefill`: a sequence that starts on another one's cached blocks (and, for
 * a layer that keeps recurrent state, on the snapshot saved at their end) computes its next rows
 * exactly as the sequence that prefilled them. Both decode the same rows side by side, so a
 * resumed sequence writing into the shared pages would also show.
 */
export function prefixResumeCheck(setup: LayerSetup, src: RowSource, tolerance: number, resumable: boolean): Omit<CheckResult, 'check'> {
  if (!resumable) return { status: 'n/a', detail: 'the layer does not implement resumeAt: a model with it never starts a sequence at a cached prefix' };
  const page = setup.kvPageSize;
  const blocks = Math.min(2, Math.floor((setup.limits.maxSeqLen - 4) / page), Math.floor(setup.limits.maxRows / page));
  if (blocks < 1) return { status: 'n/a', detail: `pages of ${page} rows do not fit maxSeqLen ${setup.limits.maxSeqLen} with room to decode after them` };
  const hashes = Array.from({ length: blocks }, (_, b) => `conformance-block-${b}`);
  const prompt = src.prefill([0], [blocks * page]);
  const both = (op: ScriptOp): ScriptOp => {
    if (op.op !== 'decode') return op;
    const input = new Float32Array(2 * src.width);
    input.set(op.input, 0);
    input.set(op.input, src.width);
    return { op: 'decode', seqs: [0, 1], input, tokens: Int32Array.from([op.tokens[0]!, op.tokens[0]!]) };
  };
  const decodes = [src.decode([0]), src.decode([0]), src.decode([0])].map(both);
  const records = withHarness(setup, { graphs: true, speculation: 'write-on-accept', failCaptures: false }, (h) => {
    h.run([{ op: 'open', seq: 0 }, prompt]);
    const first = h.seq(0);
    h.driver.saveSnapshot(first, hashes[blocks - 1]!);
    h.driver.kv.register(first.slot, hashes, blocks);
    h.step({ op: 'open', seq: 1, prefix: hashes }, 0);
    if (h.seq(1).length !== blocks * page) throw new Error(`the resumed sequence starts at length ${h.seq(1).length}, not ${blocks * page}`);
    return decodes.map((op, i) => h.step(op, i + 1));
  });
  // Row 0 is the sequence that prefilled; row 1 the one that resumed: they must agree, outputs and host state.
  const side = (which: 0 | 1): StepRecord[] =>
    records.map((r) => ({
      ...r,
      ...(r.output ? { output: r.output.subarray((which * r.output.length) / 2, ((which + 1) * r.output.length) / 2) } : {}),
      snapshot: { 0: r.snapshot[which] },
    }));
  const diff = compareRuns(side(1), side(0), tolerance);
  return diff ?? { status: 'pass', detail: `a sequence started on ${blocks} cached block(s) of ${page} rows decodes as the sequence that prefilled them` };
}
