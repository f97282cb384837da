import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import { EngineLoop, InvalidArgumentError, NgramProposer, SeededRandom, SpeculationGate, StepDriver, generateAll } from '../src/index.js';
import { BigramLayer } from './support/bigram-layer.js';

describe('SpeculationGate', () => {
  it('verifies to measure a verify, decodes to measure a decode, then picks the faster by tokens per millisecond', () => {
    const gate = new SpeculationGate({ probeEvery: 4 });
    expect(gate.shouldVerify(4, 0)).toBe(true);
    gate.recordVerify(4, 10);
    expect(gate.shouldVerify(4, 0)).toBe(false);
    gate.recordDecode(4, 5);
    // Plain: 4 tokens / 5 ms. Verify: (4 + accepted) / 10 ms.
    expect(gate.shouldVerify(4, 3)).toBe(false);
    expect(gate.shouldVerify(4, 5)).toBe(true);
    // Another batch size has its own measurements.
    expect(gate.shouldVerify(8, 0)).toBe(true);
  });

  it('probes with a verify after probeEvery decodes in a row', () => {
    const gate = new SpeculationGate({ probeEvery: 3, smoothing: 1 });
    gate.recordVerify(2, 10);
    gate.recordDecode(2, 1);
    expect(gate.shouldVerify(2, 0)).toBe(false);
    gate.recordDecode(2, 1);
    gate.recordDecode(2, 1);
    expect(gate.shouldVerify(2, 0)).toBe(true);
    gate.recordVerify(2, 10);
    expect(gate.shouldVerify(2, 0)).toBe(false);
  });

  it('smooths its measurements', () => {
    const gate = new SpeculationGate({ smoothing: 0.5 });
    gate.recordVerify(1, 4);
    gate.recordDecode(1, 1);
    gate.recordDecode(1, 3); // smoothed decode: 2 ms
    expect(gate.shouldVerify(1, 0.9)).toBe(false); // 1.9 / 4 < 1 / 2
    expect(gate.shouldVerify(1, 1.1)).toBe(true); // 2.1 / 4 > 1 / 2
  });

  it('smooths a sequence\'s accepted drafts with its own weight', () => {
    const gate = new SpeculationGate({ smoothing: 0.5 });
    expect(gate.smoothAccepted(undefined, 3)).toBe(3);
    expect(gate.smoothAccepted(3, 1)).toBe(2);
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
      const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: 64, speculation: { proposer: new NgramProposer({ k: 4 }), k: 4, adaptive } });
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
    // Four accepted drafts per verify cost about what one decoded token does here.
    expect(adaptive.stats.steps.verify).toBeGreaterThan(adaptive.stats.steps.decode);
  });
});
