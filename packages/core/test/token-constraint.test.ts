import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import { EngineLoop, NgramProposer, SeededRandom, StepDriver, generateAll, maskLogitsRow, type GenerateRequest, type TokenConstraint } from '../src/index.js';
import { BigramLayer } from './support/bigram-layer.js';

const V = 16;

/** Logits that make token t → (t·5 + 3) mod 16 the clear favourite: odd after even, even after odd. */
function table(): Float32Array {
  const t = new SeededRandom(3).normals(V * V);
  for (let i = 0; i < V; i++) t[i * V + ((i * 5 + 3) % V)]! += 6;
  return t;
}

/** Allows the tokens of `allowed` only, and is complete after `length` of them; counts what the loop asked. */
class SetConstraint implements TokenConstraint {
  readonly taken: number[] = [];
  released = 0;
  rolledBack = 0;
  constructor(readonly allowed: ReadonlySet<number>, readonly length: number) {}
  allowedTokens(): Int32Array {
    const mask = new Int32Array(1);
    if (this.isComplete()) return mask;
    for (const t of this.allowed) mask[0]! |= 1 << t;
    return mask;
  }
  accept(token: number): boolean {
    if (this.isComplete() || !this.allowed.has(token)) return false;
    this.taken.push(token);
    return true;
  }
  rollback(n: number): void {
    if (n > this.taken.length) throw new Error(`rollback(${n}) past the start`);
    this.taken.length -= n;
    this.rolledBack += n;
  }
  isComplete(): boolean {
    return this.taken.length >= this.length;
  }
  release(): void {
    this.released++;
  }
}

const EVEN = new Set([0, 2, 4, 6, 8, 10, 12, 14]);

function run(requests: readonly GenerateRequest[], spec?: number) {
  const gpu = new CpuBackend();
  const layer = new BigramLayer(gpu, V, table());
  const driver = new StepDriver({ gpu, layers: [layer], limits: { maxSeqs: 2, maxSeqLen: 40, maxBatch: 2, maxK: 5, maxRows: 16 } });
  try {
    const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, ...(spec ? { speculation: { proposer: new NgramProposer({ k: spec }), k: spec } } : {}) });
    return generateAll(loop, requests, spec);
  } finally {
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  }
}

describe('token constraints in the engine loop', () => {
  it('masks a logit row: forbidden tokens become −∞, a mask that allows nothing throws', () => {
    const row = Float32Array.from({ length: 40 }, (_, i) => i);
    const mask = Int32Array.of(-1, 0b101);
    maskLogitsRow(row, 40, 0, mask);
    expect(Array.from(row.subarray(0, 32))).toEqual(Array.from({ length: 32 }, (_, i) => i));
    expect(row[32]).toBe(32);
    expect(row[33]).toBe(-Infinity);
    expect(row[34]).toBe(34);
    expect(Array.from(row.subarray(35)).every((v) => v === -Infinity)).toBe(true);
    expect(() => maskLogitsRow(new Float32Array(8), 8, 0, Int32Array.of(0))).toThrow(/allows no token/);
  });

  it('greedy output keeps to the constraint, ends with stop once it is complete, and is the same under speculation', () => {
    const make = (): GenerateRequest & { constraint: SetConstraint } => ({ prompt: [2, 4, 2, 4, 2], maxTokens: 20, constraint: new SetConstraint(EVEN, 9) });
    const plain = make();
    const base = run([plain]).outputs[0]!;
    expect(base.finishReason).toBe('stop');
    expect(base.tokens).toHaveLength(9);
    expect(base.tokens.every((t) => EVEN.has(t))).toBe(true);
    // Without the constraint the model alternates parity: the mask changed the output.
    expect(run([{ prompt: [2, 4, 2, 4, 2], maxTokens: 9 }]).outputs[0]!.tokens.some((t) => !EVEN.has(t))).toBe(true);
    expect(plain.constraint.taken).toEqual(base.tokens);
    expect(plain.constraint.released).toBe(1);
    for (const k of [1, 3]) {
      const req = make();
      const { outputs, stats } = run([req], k);
      expect(outputs[0]!.tokens).toEqual(base.tokens);
      // The loop walked the drafts and took them back; the constraint holds exactly what was emitted.
      expect(stats.speculation!.drafted).toBeGreaterThan(0);
      expect(req.constraint.rolledBack).toBeGreaterThan(0);
      expect(req.constraint.taken).toEqual(base.tokens);
      expect(req.constraint.released).toBe(1);
    }
  });

  it('drafts that run past the point where the constraint completes end the output there, verified alone', () => {
    // Without the speculation gate every step with drafts verifies, so drafts cross the end.
    const gpu = new CpuBackend();
    const layer = new BigramLayer(gpu, V, table());
    const driver = new StepDriver({ gpu, layers: [layer], limits: { maxSeqs: 1, maxSeqLen: 40, maxBatch: 1, maxK: 5, maxRows: 16 } });
    try {
      for (const length of [7, 8, 9, 10]) {
        const req = { prompt: [2, 4, 2, 4, 2], maxTokens: 20, constraint: new SetConstraint(EVEN, length) };
        const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: 16, speculation: { proposer: new NgramProposer({ k: 3 }), k: 3, adaptive: false } });
        const out = generateAll(loop, [req], 3).outputs[0]!;
        expect(out.finishReason, `length ${length}`).toBe('stop');
        expect(out.tokens).toEqual(Array(length).fill(2));
      }
    } finally {
      driver.dispose();
      layer.dispose();
      gpu.dispose();
    }
  });

  it('a draft the constraint forbids is rejected even where the model would pick it', () => {
    // The prompt repeats 1 → 8, so the n-gram proposer drafts 8 after 1; the model agrees, the constraint (odd tokens only after the first) does not.
    const odd = new Set([1, 3, 5, 7, 9, 11, 13, 15]);
    const req = { prompt: [1, 8, 1, 8, 1], maxTokens: 6, constraint: new SetConstraint(odd, 6) };
    const { outputs } = run([req], 2);
    expect(outputs[0]!.tokens.every((t) => odd.has(t))).toBe(true);
    expect(outputs[0]!.tokens).toEqual(run([{ ...req, constraint: new SetConstraint(odd, 6) }]).outputs[0]!.tokens);
  });

  it('sampled tokens keep to the constraint too, with and without speculation', () => {
    for (const spec of [undefined, 2]) {
      const req = { prompt: [1, 3], maxTokens: 12, sampling: { temperature: 1.5, seed: 9 }, constraint: new SetConstraint(EVEN, 100) };
      const out = run([req], spec).outputs[0]!;
      expect(out.tokens).toHaveLength(12);
      expect(out.finishReason).toBe('length');
      expect(out.tokens.every((t) => EVEN.has(t))).toBe(true);
    }
  });

  it('a constraint that allows nothing ends its request with an error; the other request goes on', () => {
    const dead = new SetConstraint(new Set(), 5);
    const { outputs } = run([{ prompt: [1], maxTokens: 4, constraint: dead }, { prompt: [2], maxTokens: 4 }]);
    expect(outputs[0]!.finishReason).toBe('error');
    expect(outputs[0]!.error).toMatch(/allows no token/);
    expect(outputs[1]!.finishReason).toBe('length');
    expect(outputs[1]!.tokens).toHaveLength(4);
    expect(dead.released).toBe(1);
  });

  it('a cancelled request releases its constraint, waiting or running', () => {
    const gpu = new CpuBackend();
    const layer = new BigramLayer(gpu, V, table());
    const driver = new StepDriver({ gpu, layers: [layer], limits: { maxSeqs: 1, maxSeqLen: 40, maxBatch: 1, maxK: 1, maxRows: 16 } });
    try {
      const loop = new EngineLoop({ driver, vocabSize: V, prefillChunk: 16 });
      const a = new SetConstraint(EVEN, 50);
      const b = new SetConstraint(EVEN, 50);
      loop.add({ id: 1, prompt: [1], maxTokens: 30, constraint: a });
      loop.add({ id: 2, prompt: [1], maxTokens: 30, constraint: b });
      loop.step();
      loop.cancel(2);
      loop.cancel(1);
      expect([a.released, b.released]).toEqual([1, 1]);
    } finally {
      driver.dispose();
      layer.dispose();
      gpu.dispose();
    }
  });
});
