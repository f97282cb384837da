import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import { EngineLoop, InvalidArgumentError, NgramProposer, SeededRandom, SpeculationGate, StepDriver, generateAll, type AcceptedDrafts } from '../src/index.js';
import { BigramLayer } from './support/bigram-layer.js';

describe('SpeculationGate', () => {
  it('verifies to measure a verify, decodes to measure a decode, then picks the faster by tokens per millisecond', () => {
    const gate = new SpeculationGate({ probeEvery: 4 });
    expect(gate.shouldVerify(4, 4, 0)).toBe(true);
    gate.recordVerify(4, 10);
    expect(gate.shouldVerify(4, 4, 0)).toBe(false);
    gate.recordDecode(4, 5);
    // Plain: 4 tokens / 5 ms. Verify: (4 + accepted) / 10 ms.
    expect(gate.shouldVerify(4, 4, 3)).toBe(false);
    expect(gate.shouldVerify(4, 4, 5)).toBe(true);
    // Three sequences in the same bucket: (3 + accepted) / 10 against 3 / 5.
    expect(gate.shouldVerify(4, 3, 2.9)).toBe(false);
    expect(gate.shouldVerify(4, 3, 3.1)).toBe(true);
  });

  it('before any ratio, times a verify where one was captured and decodes through new buckets, probing after probeEvery decodes', () => {
    const gate = new SpeculationGate({ probeEvery: 3 });
    expect(gate.shouldVerify(8, 8, 0)).toBe(true);
    gate.recordVerify(8, undefined); // bucket 8's capture: not timed
    // A batch growing into bucket 16: its verify would be a capture too, so it decodes (also a capture).
    expect(gate.shouldVerify(16, 16, 0)).toBe(false);
    gate.recordDecode(16, undefined);
    // Back at bucket 8, whose verify graph exists: this verify is timed.
    expect(gate.shouldVerify(8, 8, 0)).toBe(true);
    gate.recordVerify(8, 12);
    expect(gate.shouldVerify(8, 8, 0)).toBe(false); // now the decode is measured
    // Still no ratio at 24: decodes, until probeEvery decodes in a row probe a verify.
    expect(gate.shouldVerify(24, 24, 0)).toBe(false);
    gate.recordDecode(24, undefined);
    gate.recordDecode(24, 9);
    expect(gate.shouldVerify(24, 24, 0)).toBe(false);
    gate.recordDecode(24, 9);
    expect(gate.shouldVerify(24, 24, 0)).toBe(true);
    gate.recordVerify(24, undefined);
    gate.recordDecode(8, 10); // ratio 1.2 at bucket 8 now, for every bucket
    expect(gate.shouldVerify(24, 24, 4.7)).toBe(false);
    expect(gate.shouldVerify(24, 24, 4.9)).toBe(true);
  });

  it('takes the nearest measured bucket\'s ratio for a bucket not yet measured both ways, and keeps each bucket\'s own', () => {
    const gate = new SpeculationGate({ smoothing: 1 });
    gate.recordVerify(8, 12);
    gate.recordDecode(8, 10); // ratio 1.2 at bucket 8
    // Bucket 16, unmeasured: 1 + accepted / 16 against 1.2, no verify to measure it first.
    expect(gate.shouldVerify(16, 16, 3)).toBe(false);
    expect(gate.shouldVerify(16, 16, 4)).toBe(true);
    gate.recordVerify(32, 30);
    gate.recordDecode(32, 20); // ratio 1.5 at bucket 32
    // Bucket 16 is as far from 8 as from 32 (by size ratio): the larger's ratio, 1.5.
    expect(gate.shouldVerify(16, 16, 7.9)).toBe(false);
    expect(gate.shouldVerify(16, 16, 8.1)).toBe(true);
    // Bucket 64 takes 32's, bucket 2 takes 8's.
    expect(gate.shouldVerify(64, 64, 31)).toBe(false);
    expect(gate.shouldVerify(64, 64, 33)).toBe(true);
    expect(gate.shouldVerify(2, 2, 0.3)).toBe(false);
    expect(gate.shouldVerify(2, 2, 0.5)).toBe(true);
    // A bucket with one measurement of its own still takes a neighbour's ratio until it has both.
    gate.recordDecode(16, 1);
    expect(gate.shouldVerify(16, 16, 8.1)).toBe(true);
    gate.recordVerify(16, 2); // its own: 2
    expect(gate.shouldVerify(16, 16, 8.1)).toBe(false);
    expect(gate.shouldVerify(16, 16, 17)).toBe(true);
  });

  it('probes with a verify after probeEvery decodes in a row, and with a decode after probeEvery verifies', () => {
    const gate = new SpeculationGate({ probeEvery: 3, smoothing: 1 });
    gate.recordVerify(2, 10);
    gate.recordDecode(2, 1);
    expect(gate.shouldVerify(2, 2, 0)).toBe(false);
    gate.recordDecode(2, 1);
    gate.recordDecode(2, 1);
    expect(gate.shouldVerify(2, 2, 0)).toBe(true);
    gate.recordVerify(2, 10);
    expect(gate.shouldVerify(2, 2, 0)).toBe(false);
    // Verifying wins (20 accepted), until three verifies in a row: then one decode.
    expect(gate.shouldVerify(2, 2, 20)).toBe(true);
    gate.recordVerify(2, 10);
    gate.recordVerify(2, 10);
    expect(gate.shouldVerify(2, 2, 20)).toBe(false);
    gate.recordDecode(2, 1);
    expect(gate.shouldVerify(2, 2, 20)).toBe(true);
  });

  it('takes drafts checked against decoded tokens in as a verify\'s count, in place of a probe', () => {
    const gate = new SpeculationGate({ probeEvery: 3, smoothing: 1 });
    gate.recordVerify(2, 10);
    gate.recordDecode(2, 1);
    gate.recordDecode(2, 1);
    const a: AcceptedDrafts = {};
    const b: AcceptedDrafts = {};
    gate.recordShadowAccepted(a, 3);
    expect(gate.expectedAccepted(a, 4)).toBe(3);
    // A sequence not yet checked expects what the last check found.
    expect(gate.expectedAccepted(b, 4)).toBe(3);
    // The check stands for the probe: two more decodes, no verify yet; a third in a row probes.
    gate.recordDecode(2, 1);
    gate.recordDecode(2, 1);
    expect(gate.shouldVerify(2, 2, 0)).toBe(false);
    gate.recordDecode(2, 1);
    expect(gate.shouldVerify(2, 2, 0)).toBe(true);
  });

  it('smooths its measurements', () => {
    const gate = new SpeculationGate({ smoothing: 0.5 });
    gate.recordVerify(1, 4);
    gate.recordDecode(1, 1);
    gate.recordDecode(1, 3); // smoothed decode: 2 ms
    expect(gate.shouldVerify(1, 1, 0.9)).toBe(false); // 1.9 / 4 < 1 / 2
    expect(gate.shouldVerify(1, 1, 1.1)).toBe(true); // 2.1 / 4 > 1 / 2
  });

  it('smooths a sequence\'s accepted drafts with its own weight', () => {
    const gate = new SpeculationGate({ smoothing: 0.5 });
    const sequence: AcceptedDrafts = {};
    gate.recordAccepted([sequence], [3]);
    expect(sequence.perVerify).toBe(3);
    expect(gate.expectedAccepted(sequence, 4)).toBe(3);
    gate.recordAccepted([sequence], [1]);
    expect(gate.expectedAccepted(sequence, 4)).toBe(2);
  });

  it('expects a sequence not yet verified to accept what verifies accepted per sequence of late, or all k before any verify', () => {
    const gate = new SpeculationGate({ smoothing: 0.5 });
    const newcomer: AcceptedDrafts = {};
    expect(gate.expectedAccepted(newcomer, 4)).toBe(4);
    const [a, b] = [{}, {}] as AcceptedDrafts[];
    gate.recordAccepted([a!, b!], [0, 0]);
    expect(gate.expectedAccepted(newcomer, 4)).toBe(0);
    gate.recordAccepted([a!, b!], [3, 1]); // 2 a sequence
    expect(gate.expectedAccepted(newcomer, 4)).toBe(1);
    // A sequence's own count wins over the others'.
    expect(gate.expectedAccepted(a!, 4)).toBe(1.5);
    expect(gate.expectedAccepted(b!, 4)).toBe(0.5);
    expect(gate.expectedAccepted({ perVerify: 0 }, 4)).toBe(0);
  });

  it('refuses options out of range', () => {
    expect(() => new SpeculationGate({ smoothing: 0 })).toThrow(InvalidArgumentError);
    expect(() => new SpeculationGate({ probeEvery: 0 })).toThrow(InvalidArgumentError);
  });
});

describe('the engine loop with adaptive speculation', () => {
  const V = 16;
  // token t → (5t + 3) mod 16 by a wide margin: one cycle through all 16 tokens, which n-gram drafts predict.
  const table = () => {
    const t = new SeededRandom(3).normals(V * V);
    for (let i = 0; i < V; i++) t[i * V + ((i * 5 + 3) % V)]! += 6;
    return t;
  };

  function generate(adaptive: boolean) {
    const gpu = new CpuBackend();
    const layer = new BigramLayer(gpu, V, table());
    const driver = new StepDriver({ gpu, layers: [layer], limits: { maxSeqs: 1, maxSeqLen: 128, maxBatch: 1, maxK: 5, maxRows: 64 } });
    try {
      const cycle = [2, 13, 4, 7, 6, 1, 8, 11, 10, 5, 12, 15, 14, 9, 0, 3];
      // Step times by a clock the steps advance (a decode 1 ms, a verify of 5 rows 1.5 ms), not by
      // this machine's: the gate's choices do not depend on the load beside the test.
      let now = 0;
      const decode = driver.decode.bind(driver);
      const verify = driver.verify.bind(driver);
      driver.decode = (input) => ((now += 1), decode(input));
      driver.verify = (input) => ((now += 1.5), verify(input));
      const loop = new EngineLoop({
        driver, vocabSize: V, prefillChunk: 64, speculation: { proposer: new NgramProposer({ k: 4 }), k: 4, adaptive }, clock: () => now,
      });
      return generateAll(loop, [{ prompt: [...cycle, ...cycle], maxTokens: 60 }], 4);
    } finally {
      driver.dispose();
      layer.dispose();
      gpu.dispose();
    }
  }

  it('gives the tokens of always-verify, and keeps verifying where drafts are accepted', () => {
    const always = generate(false);
    const adaptive = generate(true);
    expect(adaptive.outputs[0]!.tokens).toEqual(always.outputs[0]!.tokens);
    expect(always.stats.speculation!.acceptanceRate).toBeGreaterThan(0.9);
    // Four accepted drafts per verify cost half again what one decoded token does here.
    expect(adaptive.stats.steps.verify).toBeGreaterThan(adaptive.stats.steps.decode);
  });
});
