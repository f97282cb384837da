import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, SeededRandom, StepDriver, type LayerLimits } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import plugin, { AttentionLayer, qwen3NextAttentionOptions } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { attentionWeights, CONFIG, runScript } from './attention-reference.js';

describe('AttentionLayer (Qwen3-Next gated attention) against a float64 reference', () => {
  it('prefill, decode and verify with partial acceptance, graphs replayed, pages of 4 rows', () => {
    expect(runScript({ graphs: true, pageSize: 4 })).toBeLessThan(1e-5);
  });
  it('eager, pages of 16 rows', () => {
    expect(runScript({ graphs: false, pageSize: 16 })).toBeLessThan(1e-5);
  });

  it('reads partial_rotary_factor and rope_theta from rope_parameters or the top level', () => {
    expect(qwen3NextAttentionOptions(CONFIG)).toMatchObject({ rotaryDim: 4, ropeTheta: 10000, gated: true, normOffset: 1 });
    const legacy = { ...CONFIG, rope_parameters: undefined, rope_theta: 5e6, partial_rotary_factor: 0.25 };
    expect(qwen3NextAttentionOptions(legacy)).toMatchObject({ rotaryDim: 2, ropeTheta: 5e6 });
    // Qwen3-Next's default when nothing says: a quarter of the head.
    expect(qwen3NextAttentionOptions({ ...CONFIG, rope_parameters: { rope_type: 'default', rope_theta: 1e4 } })).toMatchObject({ rotaryDim: 2 });
    expect(() => qwen3NextAttentionOptions({ ...CONFIG, rope_parameters: { rope_type: 'yarn', rope_theta: 1e4 } })).toThrow(/'default' RoPE only/);
  });

  it('refuses a step when the page pool is exhausted, before writing anything', () => {
    const o = { ...qwen3NextAttentionOptions(CONFIG), pageSize: 4, pages: 3 };
    const limits: LayerLimits = { maxSeqs: 2, maxSeqLen: 48, maxBatch: 2, maxK: 4, maxRows: 16 };
    const gpu = new CpuBackend();
    const layer = new AttentionLayer(gpu, attentionWeights(o).source(), limits, o);
    const driver = new StepDriver({ gpu, layers: [layer], limits });
    const seq = driver.open();
    driver.prefill({ seqs: [seq], lengths: [12], input: new SeededRandom(1).normals(12 * o.hidden) });
    expect(() => driver.decode({ seqs: [seq], input: new Float32Array(o.hidden) })).toThrow(InvalidArgumentError);
    expect(() => driver.decode({ seqs: [seq], input: new Float32Array(o.hidden) })).toThrow(/needs 1 more page/);
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  });

  it('passes the conformance kit on the CPU backend (room check included)', () => {
    const o = qwen3NextAttentionOptions(CONFIG);
    const report = runLayerConformance(plugin, {
      backend: () => new CpuBackend(), layerType: 'attention', config: { ...CONFIG, metrale_std: { page_size: 4 } },
      weights: attentionWeights(o).source(), k: 3,
    });
    const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(report.passed).toBe(true);
    expect(status['room-check-before-write']).toBe('pass');
    expect(status['rejected-rows-leave-no-trace']).toBe('pass');
    expect(status['verify-accept-equals-decode']).toBe('pass');
  });
});
