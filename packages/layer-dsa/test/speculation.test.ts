// Rejected verify rows, and the replay sync of the host-tracked cache lengths.
import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, ReplaySyncError, SeededRandom, type Sequence } from '@metrale/core';
import plugin, { DsaLayer, type DsaState } from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { configOf, GLM5, GLM53, pack, randomRows, randomWeights, Rig, weightsOf, type Shape } from './dsa-setup.js';

const limits = { maxSeqs: 2, maxSeqLen: 40, maxBatch: 2, maxK: 4, maxRows: 40 };

/**
 * The same scenario twice, differing only in the rows a verify rejects: once ordinary rows, once
 * rows scaled ×40 (if they were ever visible, their keys would dominate every later indexer score
 * and attention). Records, for every step after the verify, the outputs, the selection of every
 * row and the indexer scores of every candidate.
 */
function runWithRejected(shape: Shape, scaleRejected: number) {
  const { tensors } = randomWeights(shape, 21);
  const rig = new Rig(configOf(shape), [tensors], limits);
  const layer = rig.layers[0] as DsaLayer;
  const rnd = new SeededRandom(5);
  const W = shape.hidden;
  const seqs: Sequence[] = [rig.driver.open(), rig.driver.open()];
  const records: { out: Float32Array; sel: Uint8Array; selCount: Uint8Array; scores: Float32Array[] }[] = [];
  /** `positions`: the position of every row of the step just run. */
  const record = (out: Float32Array, positions: number[]) => {
    const dbg = layer.debugBuffers();
    const rows = positions.length;
    // Scores of candidate j of row r sit at r·scoreStride + j; only a row's own candidates are defined.
    const scores = positions.map((pos, r) => {
      const n = Math.floor((pos + 1) / shape.kpool);
      return new Float32Array(rig.gpu.download(dbg.scores + BigInt(4 * r * dbg.scoreStride), 4 * Math.max(n, 1)).slice().buffer);
    });
    records.push({ out, sel: rig.gpu.download(dbg.sel, 4 * rows * dbg.selWidth), selCount: rig.gpu.download(dbg.selCount, 4 * rows), scores });
  };
  try {
    rig.prefill(seqs, [20, 13], pack(randomRows(rnd, 33, W)));
    rig.decode(seqs, pack(randomRows(rnd, 2, W)));
    // Verify 4 rows each; sequence 0 accepts 1, sequence 1 accepts 2.
    const verify = randomRows(rnd, 8, W);
    const garble = randomRows(new SeededRandom(99), 8, W).map((r) => r.map((x) => x * scaleRejected));
    const rows = verify.map((r, i) => ((i < 4 ? i % 4 >= 1 : i % 4 >= 2) ? garble[i]! : r));
    const first = rig.verify(seqs, 4, pack(rows), [1, 2]).out;
    for (let step = 0; step < 5; step++) {
      const positions = seqs.map((q) => q.length);
      const r = rig.decode(seqs, pack(randomRows(rnd, 2, W)));
      expect(r.path).toBe('replay');
      record(r.out, positions);
    }
    const positions = seqs.flatMap((q) => [0, 1, 2, 3].map((i) => q.length + i));
    const v = rig.verify(seqs, 4, pack(randomRows(rnd, 8, W)), [4, 4]);
    expect(v.path).toBe('replay');
    record(v.out, positions);
    const last = seqs.map((q) => q.length);
    const after = rig.decode(seqs, pack(randomRows(rnd, 2, W)));
    record(after.out, last);
    return { first, records, lengths: seqs.map((s) => (rig.driver.stateOf(s, 0) as DsaState).length) };
  } finally {
    rig.dispose();
  }
}

describe('a rejected verify row never influences a later score or attention output', () => {
  for (const shape of [GLM5, GLM53]) {
    it(`${shape.variant}: later outputs, selections and indexer scores are bit-identical whatever the rejected rows held`, () => {
      const plain = runWithRejected(shape, 1);
      const loud = runWithRejected(shape, 40);
      // The rejected rows differ, and within their own verify they do change the outputs (row 3 of
      // sequence 0 attends to itself and its garbled predecessors)...
      const W = shape.hidden;
      const row3 = (x: Float32Array) => Buffer.from(x.buffer, x.byteOffset + 12 * W, 4 * W);
      expect(row3(loud.first).equals(row3(plain.first))).toBe(false);
      // ...but they leave no trace in any later step.
      expect(loud.lengths).toEqual(plain.lengths);
      expect(loud.records.length).toBe(plain.records.length);
      plain.records.forEach((a, i) => {
        const b = loud.records[i]!;
        expect(Buffer.from(b.out.buffer).equals(Buffer.from(a.out.buffer)), `outputs of step ${i}`).toBe(true);
        expect(Buffer.from(b.selCount).equals(Buffer.from(a.selCount)), `selection sizes of step ${i}`).toBe(true);
        expect(Buffer.from(b.sel).equals(Buffer.from(a.sel)) || equalSelections(a, b), `selections of step ${i}`).toBe(true);
        a.scores.forEach((s, r) => expect(Buffer.from(b.scores[r]!.buffer).equals(Buffer.from(s.buffer)), `scores of row ${r}, step ${i}`).toBe(true));
      });
    });
  }
});

/** Selections agree on every valid entry (entries past selCount are scratch). */
function equalSelections(a: { sel: Uint8Array; selCount: Uint8Array }, b: { sel: Uint8Array; selCount: Uint8Array }): boolean {
  const ca = new Int32Array(a.selCount.buffer.slice(0));
  const sa = new Int32Array(a.sel.buffer.slice(0));
  const sb = new Int32Array(b.sel.buffer.slice(0));
  const width = sa.length / ca.length;
  for (let r = 0; r < ca.length; r++) for (let j = 0; j < ca[r]!; j++) if (sa[r * width + j] !== sb[r * width + j]) return false;
  return true;
}

describe('replay sync of the host-tracked cache lengths', () => {
  function layerAndState() {
    const gpu = new CpuBackend();
    const layer = plugin.create({ gpu, layerType: 'dsa', config: configOf(GLM5), layerIndex: 0, weights: weightsOf(randomWeights(GLM5, 1).tensors), limits }) as DsaLayer;
    return { gpu, layer, state: layer.openState(0) };
  }

  it('throws ReplaySyncError when the host length is behind the sequence length', () => {
    const { gpu, layer, state } = layerAndState();
    state.length = 3;
    expect(() => layer.syncReplayedStep(state, 5, 1)).toThrow(ReplaySyncError);
    expect(() => layer.syncReplayedStep(state, 5, 1)).toThrow(/host length 3 is behind the sequence length 5/);
    expect(state.length).toBe(3);
    gpu.dispose();
  });

  it('rewinds when ahead (rejected rows of the last verify), then advances by k', () => {
    const { gpu, layer, state } = layerAndState();
    state.length = 9; // a verify of 4 at 5, one accepted: committed length 6
    layer.syncReplayedStep(state, 6, 1);
    expect(state.length).toBe(7);
    layer.syncReplayedStep(state, 7, 4);
    expect(state.length).toBe(11);
    gpu.dispose();
  });

  it('a replay through the driver throws when a state lost rows behind the driver’s back', () => {
    const { tensors } = randomWeights(GLM5, 2);
    const rig = new Rig(configOf(GLM5), [tensors], limits);
    const rnd = new SeededRandom(3);
    const seq = rig.driver.open();
    rig.prefill([seq], [6], pack(randomRows(rnd, 6, GLM5.hidden)));
    rig.decode([seq], pack(randomRows(rnd, 1, GLM5.hidden))); // captured
    rig.decode([seq], pack(randomRows(rnd, 1, GLM5.hidden))); // replayed
    (rig.driver.stateOf(seq, 0) as DsaState).length = 5;
    expect(() => rig.decode([seq], pack(randomRows(rnd, 1, GLM5.hidden)))).toThrow(ReplaySyncError);
    rig.dispose();
  });

  it('the eager forward sets lengths (idempotent): running one step twice leaves the same length', () => {
    const { tensors } = randomWeights(GLM5, 2);
    const rig = new Rig(configOf(GLM5), [tensors], limits, { graphs: false });
    const rnd = new SeededRandom(4);
    const seq = rig.driver.open();
    rig.prefill([seq], [6], pack(randomRows(rnd, 6, GLM5.hidden)));
    rig.verify([seq], 3, pack(randomRows(rnd, 3, GLM5.hidden)), [1]);
    expect((rig.driver.stateOf(seq, 0) as DsaState).length).toBe(9); // ahead until the next step
    rig.decode([seq], pack(randomRows(rnd, 1, GLM5.hidden)));
    expect((rig.driver.stateOf(seq, 0) as DsaState).length).toBe(8);
    rig.dispose();
  });
});

describe('verify needs nothing from the driver beyond the step tables', () => {
  it('refuses a step wider than limits.maxK before launching', () => {
    const gpu = new CpuBackend();
    const layer = plugin.create({ gpu, layerType: 'dsa', config: configOf(GLM53), layerIndex: 0, weights: weightsOf(randomWeights(GLM53, 1).tensors), limits: { ...limits, maxK: 2 } });
    const state = layer.openState(0);
    const step = {
      phase: 'verify', gpu, stream: gpu.defaultStream, batch: 1, k: 3, rows: 3, input: 0n, output: 0n, speculation: 'write-on-accept',
      tables: { slots: 0n, seqLens: 0n, rowStarts: 0n, tokens: 0n, positions: 0n },
      host: { states: [state], seqLens: Int32Array.of(4), rowStarts: Int32Array.of(0, 3), tokens: new Int32Array(3) },
    } as const;
    expect(() => layer.forward(step)).toThrow(InvalidArgumentError);
    expect(() => layer.forward(step)).toThrow(/k = 3 .* limits\.maxK \(2\)/);
    gpu.dispose();
  });
});
