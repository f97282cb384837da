import {
  InvalidArgumentError, MemoryWeightSource, StepDriver, WeightsError, tensorOf,
  type GdnCarryBinding, type HostTensor, type LayerStep,
} from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin, { GdnLayer } from '@metrale/layer-gdn';
import { describe, expect, it } from 'vitest';
import { configOf, randomWeights, SMALL, splitTensors } from './gdn-setup.js';

const limits = { maxSeqs: 2, maxSeqLen: 64, maxBatch: 2, maxK: 2, maxRows: 16 };

/** Creating the layer throws `kind` matching `message`, and the device is untouched. */
function expectRefused(config: Record<string, unknown>, tensors: HostTensor[], message: RegExp, kind: new (...a: never[]) => Error = WeightsError): void {
  const gpu = new CpuBackend();
  try {
    const before = { digest: gpu.memoryDigest(), stats: gpu.stats() };
    let error: unknown;
    try {
      plugin.create({ gpu, layerType: 'gdn', config, layerIndex: 0, weights: new MemoryWeightSource('bad.safetensors', tensors), limits });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(kind);
    expect((error as Error).message).toMatch(message);
    expect(gpu.memoryDigest()).toBe(before.digest);
    expect(gpu.stats().liveAllocations).toBe(before.stats.liveAllocations);
    expect(gpu.stats().hostToDeviceCopies).toBe(before.stats.hostToDeviceCopies);
  } finally {
    gpu.dispose();
  }
}

const good = randomWeights(SMALL, 1).tensors;
const without = (ts: HostTensor[], name: string) => ts.filter((t) => t.name !== name);
const replaced = (ts: HostTensor[], t: HostTensor) => [...without(ts, t.name), t];
const convDim = 2 * SMALL.hk * SMALL.dk + SMALL.hv * SMALL.dv;

describe('bad weights and configs are refused before any device allocation or write', () => {
  it('a missing tensor, named with its origin', () => {
    expectRefused(configOf(SMALL), without(good, 'A_log'), /bad\.safetensors: missing tensor 'A_log'/);
    expectRefused(configOf(SMALL), without(good, 'in_proj_qkvz.weight'), /missing tensor 'in_proj_qkvz\.weight' \(nor the Qwen3\.5 split/);
    expectRefused(configOf(SMALL), without(splitTensors(SMALL, good), 'in_proj_z.weight'), /missing tensor 'in_proj_z\.weight'/);
  });

  it('a tensor of the wrong shape', () => {
    const conv = tensorOf('conv1d.weight', new Float32Array(convDim * SMALL.K), [convDim, SMALL.K]);
    expectRefused(configOf(SMALL), replaced(good, conv), /bad\.safetensors: tensor 'conv1d\.weight' has shape \[\d+, 4\], expected \[\d+, 1, 4\]/);
    const out = tensorOf('out_proj.weight', new Float32Array(SMALL.hidden * SMALL.hv * SMALL.dv), [SMALL.hv * SMALL.dv, SMALL.hidden]);
    expectRefused(configOf(SMALL), replaced(good, out), /tensor 'out_proj\.weight' has shape/);
    const b = tensorOf('in_proj_b.weight', new Float32Array(2 * SMALL.hv * SMALL.hidden), [2 * SMALL.hv, SMALL.hidden]);
    expectRefused(configOf(SMALL), replaced(splitTensors(SMALL, good), b), /tensor 'in_proj_b\.weight' has shape/);
  });

  it('a non-finite weight', () => {
    const dt = tensorOf('dt_bias', Float32Array.from({ length: SMALL.hv }, (_, i) => (i === 2 ? NaN : 0)), [SMALL.hv]);
    expectRefused(configOf(SMALL), replaced(good, dt), /tensor 'dt_bias' holds a non-finite value/);
  });

  it('a config whose head counts do not divide', () => {
    expectRefused(configOf({ ...SMALL, hk: 3, hv: 4 }), good, /head counts do not divide: linear_num_value_heads \(4\) must be a multiple of linear_num_key_heads \(3\)/);
  });

  it('a hidden_act other than silu', () => {
    expectRefused(configOf(SMALL, { hidden_act: 'gelu' }), good, /hidden_act is "gelu"/);
  });

  it('a missing or invalid config field, by name', () => {
    const config = configOf(SMALL);
    delete config.linear_key_head_dim;
    expectRefused(config, good, /config\.linear_key_head_dim is missing/);
    expectRefused(configOf(SMALL, { linear_conv_kernel_dim: 0 }), good, /config\.linear_conv_kernel_dim must be a positive integer/);
    expectRefused(configOf(SMALL, { metrale_weight_dtype: 'bf16' }), good, /metrale_weight_dtype/);
    expectRefused(configOf(SMALL, { model_type: 'llama' }), good, /model_type is "llama"/);
  });
});

/**
 * A driver whose verifies are refused (`byDriver`: the driver's refusal, when the layer declines the
 * run in gdnVerifyRunBatched; else the layer's own): nothing launched, no layer memory touched.
 */
function expectVerifyRefused(options: { speculation: 'none' | 'write-on-accept'; driverMaxK: number; k: number }, message: RegExp, byDriver: RegExp = message): void {
  const gpu = new CpuBackend();
  const layer = plugin.create({ gpu, layerType: 'gdn', config: configOf(SMALL), layerIndex: 0, weights: new MemoryWeightSource('w', good), limits });
  const driver = new StepDriver({ gpu, layers: [layer], limits: { ...limits, maxK: options.driverMaxK, maxRows: 16 }, speculation: options.speculation, graphs: false });
  try {
    const seq = driver.open();
    driver.prefill({ seqs: [seq], lengths: [3], input: new Float32Array(3 * SMALL.hidden).fill(0.5) });
    driver.decode({ seqs: [seq], input: new Float32Array(SMALL.hidden).fill(0.25) });
    gpu.synchronize();
    const before = gpu.stats();
    expect(() => driver.verify({ seqs: [seq], k: options.k, input: new Float32Array(options.k * SMALL.hidden) })).toThrow(byDriver);
    const after = gpu.stats();
    expect(after.kernelsLaunched).toBe(before.kernelsLaunched);
    expect(after.gemmsLaunched).toBe(before.gemmsLaunched);
    // The forward itself refuses before touching anything: called directly, no byte changes.
    const digest = gpu.memoryDigest();
    const step = { phase: 'verify', gpu, stream: driver.stream, batch: 1, k: options.k, rows: options.k, input: 0n, output: 0n, speculation: options.speculation,
      tables: { slots: 0n, seqLens: 0n, rowStarts: 0n, tokens: 0n, positions: 0n }, host: { states: [], seqLens: new Int32Array(1), rowStarts: new Int32Array(2), tokens: new Int32Array(1) } } as unknown as LayerStep;
    expect(() => layer.forward(step)).toThrow(message);
    expect(gpu.memoryDigest()).toBe(digest);
  } finally {
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  }
}

describe('verify that cannot be made reversible is refused before any launch', () => {
  it('no write-on-accept or carried binding', () => {
    expectVerifyRefused({ speculation: 'none', driverMaxK: 2, k: 2 }, /verify needs write-on-accept or carried state; create the StepDriver with speculation/);
  });

  it('k larger than the bound stash', () => {
    expectVerifyRefused({ speculation: 'write-on-accept', driverMaxK: 4, k: 3 }, /k = 3 rows does not fit the bound stash, sized for maxK = 2/,
      /plugin gdn: layer 0 cannot verify sequences 0 \(k = 3, 1 batch positions\) in one batched step \(gdnVerifyRunBatched answered false\)/);
  });

  it('bindings too small for the layer', () => {
    const gpu = new CpuBackend();
    const layer = new GdnLayer({ gpu, layerType: 'gdn', config: configOf(SMALL), layerIndex: 0, weights: new MemoryWeightSource('w', good), limits });
    try {
      expect(() => layer.gdnWoaBind(8n, 16n, 1)).toThrow(/stash for 1 sequences, but the layer serves 2 slots/);
      const binding: GdnCarryBinding = {
        flag: 8n, stash: 16n, stashSeqFloats: layer.gdnWoaStashSeqFloats(), pendingRows: 24n, slotTable: 32n,
        convStash: 48n, convRowElems: convDim, convStashRows: 4, maxK: 1, seqs: 2, maxBatch: 2,
      };
      expect(() => layer.gdnCarryBind(binding)).toThrow(/maxK = 1 rows per slot, but the layer verifies up to 2/);
      expect(() => layer.gdnCarryBind({ ...binding, maxK: 2, stashSeqFloats: 10 })).toThrow(/stash of 10 f32 per sequence/);
      expect(() => layer.gdnCarryBind({ ...binding, maxK: 2, convRowElems: convDim - 1 })).toThrow(InvalidArgumentError);
      expect(() => layer.gdnCarryBind({ ...binding, maxK: 2, convStashRows: 2 })).toThrow(/conv stash of 2 rows per slot, needs 4/);
      expect(layer.gdnFoldAccepted(gpu, 0n, 0n, 2, 1, gpu.defaultStream)).toBe(false);
    } finally {
      layer.dispose();
      gpu.dispose();
    }
  });
});

describe('gdnVerifyRunBatched answers from the run it is asked about', () => {
  it('takes a run of open states on distinct slots, k in 1..maxK, positions within maxBatch and maxRows, with a binding and a table', () => {
    const gpu = new CpuBackend();
    const create = (l: typeof limits) => new GdnLayer({ gpu, layerType: 'gdn', config: configOf(SMALL), layerIndex: 0, weights: new MemoryWeightSource('w', good), limits: l });
    const layer = create(limits);
    const tight = create({ ...limits, maxRows: 3 });
    try {
      const a = layer.openState(0);
      const b = layer.openState(1);
      expect(layer.gdnVerifyRunBatched([a, b], 2, 2, 32n), 'no verify binding yet').toBe(false);
      layer.gdnWoaBind(8n, 16n, 2);
      expect(layer.gdnVerifyRunBatched([a, b], 2, 2, 32n)).toBe(true);
      expect(layer.gdnVerifyRunBatched([b, a], 1, 2, 32n)).toBe(true);
      expect(layer.gdnVerifyRunBatched([b], 2, 2, 32n), 'one sequence, then padding').toBe(true);
      expect(layer.gdnVerifyRunBatched([a, b], 3, 2, 32n), 'k past maxK').toBe(false);
      expect(layer.gdnVerifyRunBatched([a, b], 0, 2, 32n)).toBe(false);
      expect(layer.gdnVerifyRunBatched([a, b], 2, 1, 32n), 'fewer positions than sequences').toBe(false);
      expect(layer.gdnVerifyRunBatched([a], 2, 3, 32n), 'positions past maxBatch').toBe(false);
      expect(layer.gdnVerifyRunBatched([a, b], 2, 2, 0n), 'no slot table').toBe(false);
      expect(layer.gdnVerifyRunBatched([a, a], 2, 2, 32n), 'one slot twice').toBe(false);
      expect(layer.gdnVerifyRunBatched([], 2, 2, 32n)).toBe(false);
      expect(layer.gdnVerifyRunBatched([a, { slot: 5 }], 2, 2, 32n), 'a slot the layer does not have').toBe(false);
      layer.closeState(b);
      expect(layer.gdnVerifyRunBatched([a, b], 2, 2, 32n), 'a closed state').toBe(false);
      expect(layer.gdnVerifyRunBatched([a], 2, 2, 32n)).toBe(true);
      const t = tight.openState(0);
      tight.gdnWoaBind(8n, 16n, 2);
      expect(tight.gdnVerifyRunBatched([t], 1, 2, 32n)).toBe(true);
      expect(tight.gdnVerifyRunBatched([t], 2, 2, 32n), 'rows past maxRows').toBe(false);
    } finally {
      layer.dispose();
      tight.dispose();
      gpu.dispose();
    }
  });
});
