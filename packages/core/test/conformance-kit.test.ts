import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import { ConformanceError, MemoryWeightSource, SeededRandom, tensorOf } from '../src/index.js';
import { runLayerConformance } from '../src/testing/index.js';
import { RearmRedoesPrestageLayer, tokenTablePlugin } from './support/token-table-layer.js';

const hidden = 8;
const vocab = 24;
const random = new SeededRandom(7);
const weights = new MemoryWeightSource('token-table test weights', [tensorOf('table', random.normals(vocab * hidden), [vocab, hidden])]);
const options = { backend: () => new CpuBackend(), config: { hidden_size: hidden, vocab_size: vocab }, weights };

describe('conformance kit on a layer with prestage (token table with an LRU row cache)', () => {
  it('passes the correct layer, every check passing or not applicable', () => {
    const report = runLayerConformance(tokenTablePlugin(), options);
    expect(report.passed).toBe(true);
    const byName = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(byName['failed-capture-rearm']).toBe('pass');
    expect(byName['replay-equals-eager']).toBe('pass');
    expect(byName['verify-accept-equals-decode']).toBe('pass');
    expect(byName['room-check-before-write']).toBe('n/a');
  });

  it('catches a layer that redoes its prestage work on re-arm', () => {
    let error: unknown;
    try {
      runLayerConformance(tokenTablePlugin(RearmRedoesPrestageLayer), options);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConformanceError);
    const failed = (error as ConformanceError).failures.map((f) => f.check);
    expect(failed).toEqual(['failed-capture-rearm']);
    expect((error as ConformanceError).failures[0]!.detail).toMatch(/host state|host→device/);
  });
});
