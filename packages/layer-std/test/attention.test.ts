import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, KvCacheFullError, SeededRandom, StepDriver, type LayerLimits } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import plugin, { AttentionLayer, attnDecodeLaunch, coreLaunch, keyChunks, partialsBytes, qwen3NextAttentionOptions } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { attentionWeights, CONFIG, runScript } from './attention-reference.js';

describe('AttentionLayer (Qwen3-Next gated attention) against a float64 reference', () => {
  it('prefill, decode and verify with partial acceptance, graphs replayed, pages of 4 rows', () => {
    expect(runScript({ graphs: true, pageSize: 4 })).toBeLessThan(1e-5);
  });
  it('eager, pages of 16 rows', () => {
    expect(runScript({ graphs: false, pageSize: 16 })).toBeLessThan(1e-5);
  });
  it('sequences of 600 and 290 rows: decode and verify rows over several key chunks (std.attn_combine), graphs replayed', () => {
    expect(runScript({ graphs: true, pageSize: 16, long: true })).toBeLessThan(1e-5);
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
    const o = qwen3NextAttentionOptions(CONFIG);
    const limits: LayerLimits = { maxSeqs: 2, maxSeqLen: 48, maxBatch: 2, maxK: 4, maxRows: 16 };
    const gpu = new CpuBackend();
    const layer = new AttentionLayer(gpu, attentionWeights(o).source(), limits, o);
    const driver = new StepDriver({ gpu, layers: [layer], limits, kvCache: { pageSize: 4, pages: 3 }, graphs: false, speculation: 'none' });
    expect(driver.kvInfo).toMatchObject({ pageSize: 4, pages: 3, tokens: 12, pageBytes: layer.kvPageBytes(4) });
    const seq = driver.open();
    driver.prefill({ seqs: [seq], lengths: [12], input: new SeededRandom(1).normals(12 * o.hidden) });
    const before = gpu.memoryDigest();
    expect(() => driver.decode({ seqs: [seq], input: new Float32Array(o.hidden) })).toThrow(KvCacheFullError);
    expect(() => driver.decode({ seqs: [seq], input: new Float32Array(o.hidden) })).toThrow(/needs 1 more page\(s\) of 4 rows, but 0 of 3 are available/);
    expect(gpu.memoryDigest()).toBe(before);
    expect(seq.length).toBe(12);
    // Closing the sequence gives its pages back.
    driver.close(seq);
    expect(driver.kv.available).toBe(3);
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  });

  it('the attention layers of a model share one device RoPE table and one buffer of split-KV records, freed with the last of them', () => {
    const o = qwen3NextAttentionOptions(CONFIG);
    const limits: LayerLimits = { maxSeqs: 1, maxSeqLen: 4096, maxBatch: 1, maxK: 1, maxRows: 8 };
    const gpu = new CpuBackend();
    const free0 = gpu.memoryInfo().free;
    const first = new AttentionLayer(gpu, attentionWeights(o).source(), limits, o);
    const one = free0 - gpu.memoryInfo().free;
    const second = new AttentionLayer(gpu, attentionWeights(o).source(), limits, o);
    const two = free0 - gpu.memoryInfo().free;
    // The table (cos and sin, 4096 positions × rotary / 2, f32) and the records (one decode row, 64 chunks) are held once.
    const table = 2 * 4 * limits.maxSeqLen * (o.rotaryDim / 2);
    const records = partialsBytes(1, o.heads, o.headDim, keyChunks('decode', limits.maxSeqLen));
    expect(records).toBe(4 * o.heads * 64 * (o.headDim + 2));
    expect(two - one).toBe(one - table - records);
    first.dispose();
    expect(free0 - gpu.memoryInfo().free).toBe(one);
    second.dispose();
    expect(gpu.memoryInfo().free).toBe(free0);
    gpu.dispose();
  });

  it('cuts decode and verify rows into key chunks from the longest sequence, never prefill rows; splits fill the device, at most one per chunk', () => {
    expect(keyChunks('prefill', 262144)).toBe(1);
    expect(keyChunks('decode', 262144)).toBe(64);
    expect(keyChunks('verify', 1000)).toBe(16);
    expect(keyChunks('decode', 64)).toBe(1);
    expect(keyChunks('decode', 65)).toBe(2);
    // The 80B shape (2 kv heads, d 256, bf16) on 132 multiprocessors: batch 1 takes every chunk's split, batch 64 three.
    const stream = new CpuBackend().defaultStream;
    expect(coreLaunch(1, 2, 256, 2, 64, 132, stream)).toMatchObject({ grid: [1, 2, 64], block: 256, sharedBytes: 4 * 32768 });
    expect(coreLaunch(64, 2, 256, 2, 64, 132, stream).grid).toEqual([64, 2, 3]);
    expect(coreLaunch(64, 2, 256, 2, 1, 132, stream).grid).toEqual([64, 2, 1]);
    // f32 at d 20: tiles of ⌊32768 / 160⌋ = 204 keys.
    expect(coreLaunch(3, 2, 20, 4, 1, 132, stream).sharedBytes).toBe(4 * 2 * 204 * 20 * 4);
    expect(partialsBytes(5, 16, 256, 1)).toBe(0);
    // Tensor cores (bf16, d 256, template 256): 4 warps; the Q tile and each warp's two K and V tiles of 16 keys, rows padded by 8.
    expect(attnDecodeLaunch(1, 2, 256, 2, 64, 132, stream)).toMatchObject({ grid: [1, 2, 64], block: 128, sharedBytes: (16 + 4 * 2 * 2 * 16) * 264 * 2 });
    expect(attnDecodeLaunch(64, 2, 256, 2, 64, 132, stream).grid).toEqual([64, 2, 3]);
    // d 40 takes the template of 64.
    expect(attnDecodeLaunch(3, 1, 40, 2, 8, 132, stream).sharedBytes).toBe(272 * 72 * 2);
  });

  it('refuses a forward before the driver binds the page pool', () => {
    const o = qwen3NextAttentionOptions(CONFIG);
    const limits: LayerLimits = { maxSeqs: 1, maxSeqLen: 8, maxBatch: 1, maxK: 1, maxRows: 8 };
    const gpu = new CpuBackend();
    const layer = new AttentionLayer(gpu, attentionWeights(o).source(), limits, o);
    const state = layer.openState(0);
    const step = {
      phase: 'prefill', gpu, stream: gpu.defaultStream, batch: 1, k: 0, rows: 1, input: 0n, output: 0n, speculation: 'none',
      tables: { slots: 0n, seqLens: 0n, rowStarts: 0n, tokens: 0n, positions: 0n },
      host: { states: [state], seqLens: new Int32Array([0]), rowStarts: new Int32Array([0, 1]), tokens: new Int32Array(1) },
    } as const;
    expect(() => layer.forward(step)).toThrow(/before kvBind; run the layer through a StepDriver/);
    expect(() => layer.forward(step)).toThrow(InvalidArgumentError);
    layer.dispose();
    gpu.dispose();
  });

  it('kvUnbind gives the pages back; the layer binds afresh after it, and a disposed driver unbinds it', () => {
    const o = qwen3NextAttentionOptions(CONFIG);
    const limits: LayerLimits = { maxSeqs: 2, maxSeqLen: 48, maxBatch: 2, maxK: 1, maxRows: 16 };
    const gpu = new CpuBackend();
    const layer = new AttentionLayer(gpu, attentionWeights(o).source(), limits, o);
    const taken = (() => {
      const free0 = gpu.memoryInfo().free;
      return () => free0 - gpu.memoryInfo().free;
    })();
    const page = layer.kvPageBytes(4);
    const table = gpu.alloc(4 * 2 * 12);
    const binding = { pageSize: 4, pages: 10, pagesPerSeq: 12, blockTable: table };
    layer.kvBind(binding);
    expect(taken()).toBe(4 * 2 * 12 + 10 * page);
    layer.kvUnbind();
    expect(taken()).toBe(4 * 2 * 12);
    expect(layer.kvCache()).toBeUndefined();
    // Nothing bound: nothing to free.
    layer.kvUnbind();
    expect(taken()).toBe(4 * 2 * 12);
    layer.kvBind(binding);
    expect(layer.kvCache()?.binding).toBe(binding);
    // A bind over a binding nobody unbound frees it first.
    layer.kvBind({ ...binding, pages: 6 });
    expect(taken()).toBe(4 * 2 * 12 + 6 * page);
    gpu.free(table);

    // Through drivers, one after the other: each runs as the first, and gives everything back.
    const input = new SeededRandom(2).normals(6 * o.hidden);
    const prefill = () => {
      const driver = new StepDriver({ gpu, layers: [layer], limits, kvCache: { pageSize: 4, pages: 8 }, graphs: false, speculation: 'none' });
      const seq = driver.open();
      const out = driver.readOutputF32(driver.prefill({ seqs: [seq], lengths: [6], input }));
      driver.dispose();
      return out;
    };
    const first = prefill();
    expect(taken()).toBe(0);
    expect(layer.kvCache()).toBeUndefined();
    expect(prefill()).toEqual(first);
    expect(taken()).toBe(0);
    layer.dispose();
    // Disposed: the pages went with the layer, and unbinding does nothing.
    layer.kvUnbind();
    gpu.dispose();
  });

  it('passes the conformance kit on the CPU backend (room check included)', () => {
    const o = qwen3NextAttentionOptions(CONFIG);
    const report = runLayerConformance(plugin, {
      backend: () => new CpuBackend(), layerType: 'attention', config: CONFIG, kvPageSize: 4,
      weights: attentionWeights(o).source(), k: 3,
    });
    const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(report.passed).toBe(true);
    expect(status['room-check-before-write']).toBe('pass');
    expect(status['rejected-rows-leave-no-trace']).toBe('pass');
    expect(status['verify-accept-equals-decode']).toBe('pass');
    expect(status['prefix-resume-equals-prefill']).toBe('pass');
  });
});
