// The layer on CUDA (the GPU lane): the conformance kit (default slot cache and a 12-slot cache
// that evicts, and bf16 rows), a capture failing in the middle of a run with misses (counters and
// host → device bytes advance exactly once, as eagerly), a table far larger than the slot cache
// staying within 1e-5 of the float64 reference, and bf16 rows against Hugging Face's model held in
// bf16. Without a GPU the suite skips and says why.
import { runLayerConformance } from '@metrale/core/testing';
import type { GpuBackend, MetralePlugin, Precision } from '@metrale/core';
import plugin, { plePlugin, type PleCacheStats } from '@metrale/layer-ple';
import { beforeAll, describe, expect, it } from 'vitest';
import { FAIL_AT, run, STEPS } from '../failed-capture.js';
import { SAME_DTYPE } from '../ple-reference.js';
import { pleSetup } from '../ple-setup.js';
import { runAgainstReference, SCENARIO, type Op } from '../run-steps.js';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

const cuda = await cudaAvailable();
if (!cuda.available) console.warn(`[layer-ple gpu] conformance skipped: ${cuda.reason}`);

let create: () => GpuBackend;

describe.skipIf(!cuda.available)('@metrale/layer-ple on CUDA', () => {
  beforeAll(async () => {
    ensureFatbins();
    create = cuda.create!;
  });

  for (const [label, p] of [['default slot cache', plugin], ['12-slot cache', plePlugin({ slotCapacity: 12 })]] as const) {
    it(`passes every check of the conformance kit (${label})`, () => {
      const setup = pleSetup(7, { hidden: 64, perLayer: 32, layers: 4, vocab: 48, tableVocab: 40, layerIndex: 2 }, { table: 'bf16', embed: 'bf16' });
      const report = runLayerConformance(p, { backend: create, config: setup.config, layerIndex: setup.layerIndex, weights: setup.weights, tolerance: 1e-5 });
      console.log(report.checks.map((c) => `${c.check}: ${c.status} — ${c.detail}`).join('\n'));
      expect(report.passed).toBe(true);
      expect(report.checks.find((c) => c.check === 'failed-capture-rearm')!.status).toBe('pass');
    });
  }

  const BF16: Precision = { rows: 'bf16', fp8Weights: false };
  const dims = { hidden: 64, perLayer: 32, layers: 4, vocab: 48, tableVocab: 40, layerIndex: 2 };

  it('passes every check of the conformance kit with bf16 rows', () => {
    const setup = pleSetup(7, dims, { table: 'bf16', embed: 'bf16', weights: 'bf16' });
    const bf16: MetralePlugin = { ...plugin, create: (context) => plugin.create({ ...context, precision: BF16 }) };
    const report = runLayerConformance(bf16, { backend: create, config: setup.config, layerIndex: setup.layerIndex, weights: setup.weights, rowDtype: 'bf16' });
    console.log(report.checks.map((c) => `${c.check}: ${c.status} — ${c.detail}`).join('\n'));
    expect(report.passed).toBe(true);
  });

  it(`bf16 rows stay within ${SAME_DTYPE.bf16} of Hugging Face's model held in bf16, graphs on`, () => {
    const steps = runAgainstReference(pleSetup(3, dims, { table: 'bf16', embed: 'bf16', weights: 'bf16' }), 3, SCENARIO, { gpu: create, precision: BF16 });
    console.log(`[layer-ple gpu] bf16 rows against HF held in bf16: worst step ${Math.max(...steps.map((s) => s.rel)).toExponential(2)}`);
    for (const [i, s] of steps.entries()) expect(s.rel, `step ${i} (${s.op}, ${s.path})`).toBeLessThan(SAME_DTYPE.bf16);
    expect(steps.some((s) => s.path === 'replay')).toBe(true);
  });

  it('re-arms a capture that failed mid-run with misses without a second lookup or upload', () => {
    const setup = pleSetup(11);
    for (const capacity of [undefined, 12]) {
      const failed = run(setup, STEPS, { graphs: true, failAt: FAIL_AT, capacity, backend: create });
      const eager = run(setup, STEPS, { graphs: false, capacity, backend: create });
      expect(failed.records[FAIL_AT]!.path).toBe('capture-failed');
      const d = (r: typeof failed, key: keyof PleCacheStats) => (r.records[FAIL_AT]!.stats[key] as number) - (r.records[FAIL_AT - 1]!.stats[key] as number);
      expect([d(failed, 'misses'), d(failed, 'hits')]).toEqual([6, 3]);
      failed.records.forEach((r, i) => {
        expect(r.stats, `stats after step ${i}`).toEqual(eager.records[i]!.stats);
        expect(r.bytes, `host → device bytes after step ${i}`).toBe(eager.records[i]!.bytes);
      });
      console.log(`[layer-ple gpu] failed capture at step ${FAIL_AT} (capacity ${capacity ?? 'default'}): ${failed.records.map((r) => r.path).join(', ')}`);
    }
  });

  it('stays within 1e-5 of the float64 reference with a table 16× the slot cache', () => {
    const dims = { hidden: 128, perLayer: 32, layers: 5, vocab: 230, tableVocab: 200, layerIndex: 3 };
    const ops: Op[] = [...SCENARIO];
    for (let i = 0; i < 10; i++) ops.push({ op: 'decode', seqs: [0, 1, 2] }, { op: 'verify', seqs: [2, 0, 1], k: 3, accepted: [i % 4, 3, 1] });
    let last: PleCacheStats | undefined;
    const steps = runAgainstReference(pleSetup(21, dims, { table: 'bf16' }), 3, ops, { gpu: create, layerOptions: { slotCapacity: 12 }, after: (l) => (last = l.stats()) });
    const worst = Math.max(...steps.map((s) => s.rel));
    console.log(`[layer-ple gpu] eviction run: ${steps.length} steps, worst rel ${worst.toExponential(2)}, ${JSON.stringify(last)}`);
    for (const [i, s] of steps.entries()) expect(s.rel, `step ${i} (${s.op}, ${s.path})`).toBeLessThan(1e-5);
    expect(last!.evictions).toBeGreaterThan(50);
  });
});
