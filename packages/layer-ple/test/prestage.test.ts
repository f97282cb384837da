// decodePrestage, decodePrestageRearm and the slot cache, on the CPU reference backend:
// - a capture that fails in the middle of a run, on a step with misses: re-arm does not touch the
//   LRU or upload again; hits, misses and uploaded bytes advance exactly once, as in an eager run;
// - a layer whose re-arm redoes the prestage is caught, by these counters and by the kit;
// - bytes uploaded = misses × L·P · element size; hits need no device call at all;
// - the layers of one model share one cache: the first layer of a step stages, the rest claim;
// - a slot staged for the step in flight is never evicted.
import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, SeededRandom, StepDriver, type LayerLimits, type TransformerLayer, relativeL2Error } from '@metrale/core';
import { PleLayer, plePlugin, type PleState } from '@metrale/layer-ple';
import { faultInjectingBackend } from '@metrale/core/testing';
import { describe, expect, it } from 'vitest';
import { FAIL_AT, run, STEPS } from './failed-capture.js';
import { referenceRows } from './ple-reference.js';
import { LIMITS, pleSetup } from './ple-setup.js';

describe('a capture that fails in the middle of a run with misses', () => {
  const setup = pleSetup(11);
  const rowBytes = setup.dims.layers * setup.dims.perLayer * 4;

  it('re-arms without a second LRU pass or upload: counters advance exactly once, as eagerly', () => {
    const failed = run(setup, STEPS, { graphs: true, failAt: FAIL_AT });
    const eager = run(setup, STEPS, { graphs: false });
    expect(failed.records[FAIL_AT]!.path).toBe('capture-failed');
    expect(failed.counts.failedCaptures).toBe(1);
    expect(failed.records.filter((r) => r.path === 'replay').length).toBeGreaterThan(0);
    // The failed step: 9 rows, 6 of them new tokens (20..25), 3 repeats (1, 20, 2) → 3 hits.
    const before = failed.records[FAIL_AT - 1]!.stats;
    const after = failed.records[FAIL_AT]!.stats;
    expect(after.misses - before.misses).toBe(6);
    expect(after.hits - before.hits).toBe(3);
    expect(after.uploadedRowBytes - before.uploadedRowBytes).toBe(6 * rowBytes);
    expect(after.prestageCalls - before.prestageCalls).toBe(3);
    // Host → device bytes of the step: the missed rows and the driver's own tables and inputs, nothing twice.
    const eagerDelta = eager.records[FAIL_AT]!.bytes - eager.records[FAIL_AT - 1]!.bytes;
    expect(failed.records[FAIL_AT]!.bytes - failed.records[FAIL_AT - 1]!.bytes).toBe(eagerDelta);
    // And every step after it: same outputs, same counters as never capturing at all.
    failed.records.forEach((r, i) => {
      expect(r.output, `output of step ${i}`).toEqual(eager.records[i]!.output);
      expect(r.stats, `stats after step ${i}`).toEqual(eager.records[i]!.stats);
      expect(r.bytes, `host → device bytes after step ${i}`).toBe(eager.records[i]!.bytes);
    });
  });

  it('also with a slot cache smaller than the tokens in flight over time (evictions around the failed step)', () => {
    const failed = run(setup, STEPS, { graphs: true, failAt: FAIL_AT, capacity: 12 });
    const eager = run(setup, STEPS, { graphs: false, capacity: 12 });
    expect(failed.records[FAIL_AT]!.path).toBe('capture-failed');
    expect(eager.records.at(-1)!.stats.evictions).toBeGreaterThan(0);
    failed.records.forEach((r, i) => {
      expect(r.output).toEqual(eager.records[i]!.output);
      expect(r.stats).toEqual(eager.records[i]!.stats);
    });
  });

  it('exposes a re-arm that redoes the prestage: the failed step counts its lookups twice', () => {
    const broken = run(setup, STEPS, { graphs: true, failAt: FAIL_AT, broken: true, capacity: 12 });
    const eager = run(setup, STEPS, { graphs: false, capacity: 12 });
    const b = broken.records[FAIL_AT]!.stats;
    const e = eager.records[FAIL_AT]!.stats;
    expect(b.prestageRows).toBe(e.prestageRows + 9);
    expect(b.hits + b.misses).toBe(e.hits + e.misses + 9);
    // Outputs stay right (the rows were already staged), so only counters can tell: they no longer match an eager run.
    broken.records.forEach((r, i) => expect(r.output).toEqual(eager.records[i]!.output));
    expect(broken.records.at(-1)!.stats).not.toEqual(eager.records.at(-1)!.stats);
  });
});

describe('slot cache', () => {
  const setup = pleSetup(12);
  const rowBytes = setup.dims.layers * setup.dims.perLayer * 4;

  it('uploads misses × L·P · element size bytes and nothing on hits (bf16 rows: L·P·2 per miss)', () => {
    for (const table of ['f32', 'bf16'] as const) {
      const s = pleSetup(13, undefined, { table });
      const elem = table === 'f32' ? 4 : 2;
      const inner = new CpuBackend();
      const { gpu, counts } = faultInjectingBackend(inner, { failCaptures: false });
      const layer = new PleLayer({ gpu, layerType: 'ple', config: s.config, layerIndex: 1, weights: s.weights, limits: LIMITS });
      const state = layer.openState(0);
      const stream = gpu.createStream();
      const stage = (tokens: number[]) => {
        const before = { bytes: counts.hostToDeviceBytes, copies: counts.hostToDeviceCopies, stats: layer.stats() };
        layer.decodePrestage(Int32Array.from(tokens), state, gpu, stream);
        layer.syncReplayedStep(state, 0, tokens.length); // as a replay consumes it
        const after = layer.stats();
        return { bytes: counts.hostToDeviceBytes - before.bytes, copies: counts.hostToDeviceCopies - before.copies, misses: after.misses - before.stats.misses, hits: after.hits - before.stats.hits };
      };
      expect(stage([5, 6, 5])).toEqual({ bytes: 2 * s.dims.layers * s.dims.perLayer * elem, copies: 1, misses: 2, hits: 1 }); // slots 0, 1: one copy
      expect(stage([6, 5, 6])).toEqual({ bytes: 0, copies: 0, misses: 0, hits: 3 });
      expect(stage([7])).toEqual({ bytes: s.dims.layers * s.dims.perLayer * elem, copies: 1, misses: 1, hits: 0 });
      const st = layer.stats();
      expect(st.uploadedRowBytes).toBe(st.misses * s.dims.layers * s.dims.perLayer * elem);
      expect(st.rowBytes).toBe(s.dims.layers * s.dims.perLayer * elem);
      layer.dispose();
      inner.dispose();
    }
  });

  it('never evicts a slot the step in flight uses, and evicts least recently used first', () => {
    const limits: LayerLimits = { maxSeqs: 4, maxSeqLen: 16, maxBatch: 2, maxK: 3, maxRows: 8 };
    const gpu = new CpuBackend();
    const layer = new PleLayer({ gpu, layerType: 'ple', config: setup.config, layerIndex: 1, weights: setup.weights, limits }, { slotCapacity: 6, share: false });
    const [a, b] = [layer.openState(0), layer.openState(1)];
    const stream = gpu.defaultStream;
    const prestage = (s: PleState, t: number[]) => layer.decodePrestage(Int32Array.from(t), s, gpu, stream);
    const done = (...states: PleState[]) => states.forEach((s) => layer.syncReplayedStep(s, 0, 1));
    prestage(a, [1, 2, 3]);
    prestage(b, [4, 5, 6]);
    done(a, b);
    expect(layer.cache.lruOrder()).toEqual([1, 2, 3, 4, 5, 6]);
    prestage(a, [2, 1, 7]); // 7 evicts 3 (the oldest not in this step)
    expect(layer.cache.lruOrder()).toEqual([4, 5, 6, 2, 1, 7]);
    prestage(b, [4, 8, 9]); // 4 is touched; 8 and 9 evict 5 and 6, never 2, 1, 7 of slot a's pending step
    expect(layer.cache.lruOrder()).toEqual([2, 1, 7, 4, 8, 9]);
    expect(layer.cache.slotOf(3)).toBe(-1);
    // A third sequence in the same step finds every slot pinned: a clear error, nothing changed.
    const c = layer.openState(2);
    const before = layer.stats();
    expect(() => prestage(c, [10])).toThrow(/all 6 slots hold rows of the step in flight; create the layer with a larger slotCapacity/);
    expect(layer.stats().misses).toBe(before.misses);
    expect(c.armed).toBe(false);
    done(a, b);
    prestage(c, [10]); // after the step, 2 (the oldest) goes
    expect(layer.cache.lruOrder()).toEqual([1, 7, 4, 8, 9, 10]);
    layer.dispose();
    gpu.dispose();
  });

  it('refuses a capacity below one step of rows', () => {
    const gpu = new CpuBackend();
    expect(() => new PleLayer({ gpu, layerType: 'ple', config: setup.config, layerIndex: 1, weights: setup.weights, limits: LIMITS }, { slotCapacity: 11 })).toThrow(
      /slotCapacity must be an integer ≥ 12 \(maxBatch 4 × maxK 3/,
    );
    gpu.dispose();
  });

  it('serves every layer of a model from one cache: the first layer stages, the others claim', () => {
    const s = pleSetup(14, undefined, { allLayers: true });
    const gpu = new CpuBackend();
    const inner = gpu;
    const layers = [0, 1, 2].map((l) => plePlugin().create({ gpu, layerType: 'ple', config: s.config, layerIndex: l, weights: s.weights, limits: LIMITS }) as PleLayer);
    expect(layers[1]!.cache).toBe(layers[0]!.cache);
    expect(layers[2]!.cache).toBe(layers[0]!.cache);
    // Each layer's rows are the next layer's input; the stack runs through one driver.
    const driver = new StepDriver({ gpu, layers: layers as TransformerLayer[], limits: LIMITS });
    const seqs = [driver.open(), driver.open()];
    const random = new SeededRandom(3);
    const D = s.dims.hidden;
    const check = (tokens: number[], result: ReturnType<StepDriver['decode']>, input: Float32Array) => {
      let x: ArrayLike<number> = input;
      for (const l of [0, 1, 2]) x = referenceRows(s.weights, { ...s.dims, layerIndex: l }, Float32Array.from(x), Int32Array.from(tokens));
      expect(relativeL2Error(driver.readOutputF32(result), x)).toBeLessThan(1e-5);
    };
    const prefillTokens = [3, 4, 3, 5];
    const pin = random.normals(4 * D);
    check(prefillTokens, driver.prefill({ seqs, lengths: [3, 1], tokens: Int32Array.from(prefillTokens), input: pin }), pin);
    const before = layers[0]!.stats();
    for (const tokens of [[3, 9], [9, 10], [11, 3], [12, 13]]) {
      const input = random.normals(2 * D);
      check(tokens, driver.decode({ seqs, tokens: Int32Array.from(tokens), input }), input);
    }
    const after = layers[0]!.stats();
    // 4 steps × 2 sequences: 8 staging calls (one layer), 16 claims (the two others); 5 new tokens (9..13) uploaded once.
    expect(after.prestageCalls - before.prestageCalls).toBe(8);
    expect(after.prestageClaims - before.prestageClaims).toBe(16);
    expect(after.misses - before.misses).toBe(5);
    expect(after.hits - before.hits).toBe(3);
    expect(after.uploadedRowBytes - before.uploadedRowBytes).toBe(5 * s.dims.layers * s.dims.perLayer * 4);
    driver.dispose();
    for (const l of layers) l.dispose();
    expect(layers[0]!.cache.disposed).toBe(true);
    inner.dispose();
  });

  it('refuses layers of one cache prestaged with different tokens in one step', () => {
    const s = pleSetup(15, undefined, { allLayers: true });
    const gpu = new CpuBackend();
    const [l0, l1] = [0, 1].map((l) => new PleLayer({ gpu, layerType: 'ple', config: s.config, layerIndex: l, weights: s.weights, limits: LIMITS }));
    const [s0, s1] = [l0!.openState(0), l1!.openState(0)];
    l0!.decodePrestage(Int32Array.of(4), s0, gpu, gpu.defaultStream);
    expect(() => l1!.decodePrestage(Int32Array.of(5), s1, gpu, gpu.defaultStream)).toThrow(InvalidArgumentError);
    expect(() => l1!.decodePrestage(Int32Array.of(5), s1, gpu, gpu.defaultStream)).toThrow(/prestaged with tokens \[5\] by one layer and \[4\] by another/);
    // share: false gives an independent cache.
    const solo = new PleLayer({ gpu, layerType: 'ple', config: s.config, layerIndex: 1, weights: s.weights, limits: LIMITS }, { share: false });
    expect(solo.cache).not.toBe(l0!.cache);
    for (const l of [l0!, l1!, solo]) l.dispose();
    gpu.dispose();
  });

  it('reports rowBytes of a step: bytes uploaded per step = that step\'s misses × rowBytes', () => {
    const rows: number[] = [];
    const s = setup;
    const gpu = new CpuBackend();
    const layer = new PleLayer({ gpu, layerType: 'ple', config: s.config, layerIndex: 1, weights: s.weights, limits: LIMITS });
    const driver = new StepDriver({ gpu, layers: [layer], limits: LIMITS });
    const seqs = [driver.open(), driver.open()];
    driver.prefill({ seqs, lengths: [1, 1], tokens: Int32Array.of(1, 2), input: new SeededRandom(1).normals(2 * s.dims.hidden) });
    for (const tokens of [[1, 2], [3, 1], [4, 5], [4, 4]]) {
      const before = layer.stats();
      driver.decode({ seqs, tokens: Int32Array.from(tokens), input: new SeededRandom(2).normals(2 * s.dims.hidden) });
      const after = layer.stats();
      rows.push(after.uploadedRowBytes - before.uploadedRowBytes);
      expect(after.uploadedRowBytes - before.uploadedRowBytes).toBe((after.misses - before.misses) * rowBytes);
    }
    expect(rows).toEqual([0, rowBytes, 2 * rowBytes, 0]);
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  });
});
