import { describe, expect, it } from 'vitest';
import {
  BatchBuckets,
  defaultBuckets,
  graphKey,
  InvalidArgumentError,
  StepDriver,
  type LayerLimits,
  type Sequence,
  type StepResult,
} from '../src/index.js';
import { cpuBackend } from './support/cpu.js';
import { expectThrow, Inputs, LIMITS, WIDTH, withRig, type Rig } from './support/driver-rig.js';
import { CallLog, KernelLayer } from './support/recording-layer.js';
import type { ModelRow } from './support/recording-model.js';

function prefilled(rig: Rig, inputs: Inputs, lengths: number[]): Sequence[] {
  const seqs = lengths.map(() => rig.open());
  const rows = lengths.reduce((a, b) => a + b, 0);
  rig.prefill(seqs, lengths, inputs.rows(rows), inputs.tokens(rows));
  rig.log.clear();
  return seqs;
}

describe('BatchBuckets', () => {
  it('defaults to 1, 2, 4, multiples of 8 (of 16 past 256) and maxBatch', () => {
    expect(defaultBuckets(1)).toEqual([1]);
    expect(defaultBuckets(3)).toEqual([1, 2, 3]);
    expect(defaultBuckets(6)).toEqual([1, 2, 4, 6]);
    expect(defaultBuckets(8)).toEqual([1, 2, 4, 8]);
    expect(new BatchBuckets(8).sizes).toEqual([1, 2, 4, 8]);
    expect(defaultBuckets(64)).toEqual([1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]);
    expect(defaultBuckets(100)).toEqual([1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 100]);
    const big = defaultBuckets(300);
    expect(big.slice(-5)).toEqual([248, 256, 272, 288, 300]);
    // Padding never exceeds 7 rows up to 256, nor 15 beyond.
    const b = new BatchBuckets(300);
    for (let n = 1; n <= 300; n++) expect(b.bucketFor(n) - n).toBeLessThanOrEqual(n <= 256 ? 7 : 15);
  });

  it('gives the smallest bucket that holds the batch', () => {
    const b = new BatchBuckets(8);
    expect([1, 2, 3, 4, 5, 7, 8].map((n) => b.bucketFor(n))).toEqual([1, 2, 4, 4, 8, 8, 8]);
    const custom = new BatchBuckets(8, [8, 3, 3]);
    expect(custom.sizes).toEqual([3, 8]);
    expect([1, 3, 4, 8].map((n) => custom.bucketFor(n))).toEqual([3, 3, 8, 8]);
  });

  it('refuses batches outside 1..maxBatch, naming the value', () => {
    const b = new BatchBuckets(4);
    expectThrow(() => b.bucketFor(0), InvalidArgumentError, /batch of 0 sequences/, /maxBatch \(4\)/);
    expectThrow(() => b.bucketFor(5), InvalidArgumentError, /batch of 5 sequences/);
    expectThrow(() => b.bucketFor(1.5), InvalidArgumentError, /batch of 1\.5 sequences/);
  });

  it('refuses bad bucket lists, naming them', () => {
    expectThrow(() => new BatchBuckets(4, []), InvalidArgumentError, /buckets must be positive integers, got \[\]/);
    expectThrow(() => new BatchBuckets(4, [0, 4]), InvalidArgumentError, /got \[0, 4\]/);
    expectThrow(() => new BatchBuckets(4, [2.5, 4]), InvalidArgumentError, /got \[2\.5, 4\]/);
    expectThrow(() => new BatchBuckets(8, [2, 4]), InvalidArgumentError, /largest bucket must equal maxBatch \(8\), got \[2, 4\]/);
    expectThrow(() => new BatchBuckets(4, [2, 8]), InvalidArgumentError, /maxBatch \(4\)/);
  });

  it('keys graphs by phase, bucket and k', () => {
    expect(graphKey('decode', 4, 1)).toBe('decode:4:1');
    expect(new Set([graphKey('decode', 2, 1), graphKey('verify', 2, 1), graphKey('decode', 4, 1), graphKey('verify', 2, 2)]).size).toBe(4);
  });
});

describe('step driver: graph cache', () => {
  it('captures one graph per (phase, bucket, k) and replays it for any batch of that bucket', () => {
    withRig({}, (rig) => {
      const inputs = new Inputs(81);
      const [a, b, c, d] = prefilled(rig, inputs, [2, 3, 1, 4]);
      const paths: string[] = [];
      const run = (seqs: Sequence[], k?: number) => {
        const r = rig.step(seqs, k, inputs.rows(seqs.length * (k ?? 1)), inputs.tokens(seqs.length * (k ?? 1)));
        expect(r.output).toEqual(r.expected);
        paths.push(`${r.result.phase}:${r.result.batch}:${r.result.k} ${r.result.path}`);
        if (k !== undefined) rig.driver.accept(seqs.map((_, i) => 1 + (i % k)));
      };
      run([a!]);
      run([b!]);
      run([a!, b!]);
      run([a!, b!, c!]);
      run([d!, c!, b!, a!]);
      run([a!], 1);
      run([a!, b!], 2);
      run([c!, d!], 2);
      run([c!, d!], 3);
      run([a!, b!, c!], 2);
      expect(paths).toEqual([
        'decode:1:1 capture', 'decode:1:1 replay', 'decode:2:1 capture', 'decode:4:1 capture', 'decode:4:1 replay',
        'verify:1:1 capture', 'verify:2:2 capture', 'verify:2:2 replay', 'verify:2:3 capture', 'verify:4:2 capture',
      ]);
      expect(rig.driver.graphs.describe()).toEqual({
        'decode:1:1': { kind: 'graph', replays: 1 },
        'decode:2:1': { kind: 'graph', replays: 0 },
        'decode:4:1': { kind: 'graph', replays: 1 },
        'verify:1:1': { kind: 'graph', replays: 0 },
        'verify:2:2': { kind: 'graph', replays: 1 },
        'verify:2:3': { kind: 'graph', replays: 0 },
        'verify:4:2': { kind: 'graph', replays: 0 },
      });
      // Each capture ran its layers once, at its own batch and k.
      expect(rig.log.forwards().filter((f) => f.capturing).map((f) => `${f.phase}:${f.batch}:${f.k}`)).toEqual(
        ['decode:1:1', 'decode:2:1', 'decode:4:1', 'verify:1:1', 'verify:2:2', 'verify:2:3', 'verify:4:2'].flatMap((key) => [key, key]),
      );
    });
  });

  it('pads to the buckets it was given', () => {
    withRig({ buckets: [2, 4] }, (rig) => {
      const inputs = new Inputs(82);
      const [a, b, c] = prefilled(rig, inputs, [2, 3, 1]);
      expect(rig.driver.buckets.sizes).toEqual([2, 4]);
      const one = rig.step([a!], undefined, inputs.rows(1), inputs.tokens(1));
      expect([one.result.batch, one.result.rows, one.result.path]).toEqual([2, 1, 'capture']);
      expect(one.output).toEqual(one.expected);
      const two = rig.step([c!, b!], undefined, inputs.rows(2), inputs.tokens(2));
      expect([two.result.batch, two.result.path]).toEqual([2, 'replay']);
      expect(two.output).toEqual(two.expected);
      expect(rig.log.forwards()[0]!.stateSlots).toEqual([a!.slot, undefined]);
    });
    expectThrow(() => withRig({ buckets: [1, 2] }, () => undefined), InvalidArgumentError, /largest bucket must equal maxBatch \(4\), got \[1, 2\]/);
  });

  it('never captures with graphs off', () => {
    withRig({ graphs: false }, (rig) => {
      const inputs = new Inputs(83);
      const [a, b, c] = prefilled(rig, inputs, [2, 3, 1]);
      const paths = new Set<string>();
      for (let i = 0; i < 3; i++) {
        for (const [seqs, k] of [[[a!, b!], undefined], [[a!, b!, c!], 2], [[c!], undefined]] as const) {
          const r = rig.step(seqs, k, inputs.rows(seqs.length * (k ?? 1)), inputs.tokens(seqs.length * (k ?? 1)));
          expect(r.output).toEqual(r.expected);
          paths.add(r.result.path);
          if (k) rig.driver.accept(seqs.map(() => 1));
        }
      }
      expect([...paths]).toEqual(['eager']);
      expect(rig.driver.graphs.describe()).toEqual({});
      expect(rig.log.forwards().some((f) => f.capturing)).toBe(false);
      expect(rig.log.of('checkReplayRoom', 'syncReplayedStep', 'decodePrestageRearm')).toEqual([]);
      expect(rig.log.of('decodePrestage')).toHaveLength(3 * 2 * (2 + 3 + 1));
    });
  });
});

describe('step driver: chunked prefill', () => {
  const small: LayerLimits = { maxSeqs: 6, maxSeqLen: 64, maxBatch: 4, maxK: 2, maxRows: 8 };

  /** Runs a prefill chunk by chunk, checking each chunk's tables and output against the model. */
  function chunked(rig: Rig, seqs: Sequence[], lengths: number[], inputs: Inputs, expectedChunks: { seqs: Sequence[]; take: number[] }[]) {
    const total = lengths.reduce((x, y) => x + y, 0);
    const input = inputs.rows(total);
    const tokens = inputs.tokens(total);
    const before = new Map(seqs.map((s) => [s, s.length]));
    rig.log.clear();
    const chunks: { result: StepResult; firstRow: number; output: Float32Array }[] = [];
    const last = rig.driver.prefill({ seqs, lengths, input, tokens }, (result, firstRow) =>
      chunks.push({ result, firstRow, output: rig.driver.readOutputF32(result).slice() }),
    );
    expect(chunks).toHaveLength(expectedChunks.length);
    expect(last).toEqual(chunks[chunks.length - 1]!.result);
    const forwards = rig.log.forwards().filter((f) => f.phase === 'prefill');
    const lengthNow = new Map(before);
    let row = 0;
    expectedChunks.forEach((chunk, i) => {
      const rows = chunk.take.reduce((x, y) => x + y, 0);
      const seqLens = chunk.seqs.map((s) => lengthNow.get(s)!);
      const rowStarts = [0];
      for (const t of chunk.take) rowStarts.push(rowStarts[rowStarts.length - 1]! + t);
      const positions = chunk.seqs.flatMap((s, p) => Array.from({ length: chunk.take[p]! }, (_, j) => seqLens[p]! + j));
      const got = chunks[i]!;
      expect([got.firstRow, got.result.rows, got.result.batch, got.result.k, got.result.path]).toEqual([row, rows, chunk.seqs.length, 0, 'prefill']);
      for (const f of forwards.slice(2 * i, 2 * i + 2)) {
        expect([f.batch, f.k, f.rows, f.capturing]).toEqual([chunk.seqs.length, 0, rows, false]);
        expect(f.stateSlots).toEqual(chunk.seqs.map((s) => s.slot));
        expect(f.device).toEqual({
          slots: chunk.seqs.map((s) => s.slot),
          seqLens,
          rowStarts,
          tokens: Array.from(tokens.subarray(row, row + rows)),
          positions,
        });
      }
      const modelRows: ModelRow[] = positions.map((position, r) => {
        const p = rowStarts.findIndex((start, q) => r >= start && r < rowStarts[q + 1]!);
        return { slot: chunk.seqs[p]!.slot, seqLen: seqLens[p]!, position, token: tokens[row + r]! };
      });
      expect(got.output).toEqual(rig.model.step(modelRows, input.subarray(row * WIDTH, (row + rows) * WIDTH)));
      chunk.seqs.forEach((s, p) => lengthNow.set(s, lengthNow.get(s)! + chunk.take[p]!));
      row += rows;
    });
    expect(forwards).toHaveLength(2 * expectedChunks.length);
    expect(row).toBe(total);
  }

  it('splits a prefill longer than maxRows into chunks, a sequence spanning two', () => {
    withRig({ limits: small }, (rig) => {
      const inputs = new Inputs(91);
      const [a, b, c] = [rig.open(), rig.open(), rig.open()];
      chunked(rig, [a, b, c], [5, 7, 2], inputs, [
        { seqs: [a, b], take: [5, 3] },
        { seqs: [b, c], take: [4, 2] },
      ]);
      expect([a.length, b.length, c.length]).toEqual([5, 7, 2]);
      // Continuing prefill: positions and lengths go on from the committed lengths.
      chunked(rig, [c, a], [3, 9], inputs, [
        { seqs: [c, a], take: [3, 5] },
        { seqs: [a], take: [4] },
      ]);
      expect([a.length, b.length, c.length]).toEqual([14, 7, 5]);
      expect(rig.layers[0]!.inspectState(rig.driver.stateOf(a, 0) as never)).toMatchObject({ length: 14 });
      // A decode after chunked prefill continues from there.
      const r = rig.step([a, b, c], undefined, inputs.rows(3), inputs.tokens(3));
      expect(r.output).toEqual(r.expected);
    });
  });

  it('runs a chunk of exactly maxRows, and one row per chunk', () => {
    withRig({ limits: small }, (rig) => {
      const inputs = new Inputs(92);
      const [a, b] = [rig.open(), rig.open()];
      chunked(rig, [a, b], [8, 9], inputs, [
        { seqs: [a], take: [8] },
        { seqs: [b], take: [8] },
        { seqs: [b], take: [1] },
      ]);
      expect([a.length, b.length]).toEqual([8, 9]);
    });
  });

  it('never puts more than maxBatch sequences in one chunk', () => {
    const limits: LayerLimits = { maxSeqs: 6, maxSeqLen: 64, maxBatch: 2, maxK: 2, maxRows: 8 };
    withRig({ limits }, (rig) => {
      const inputs = new Inputs(93);
      const seqs = Array.from({ length: 6 }, () => rig.open());
      chunked(rig, seqs, [1, 1, 1, 1, 2, 1], inputs, [
        { seqs: seqs.slice(0, 2), take: [1, 1] },
        { seqs: seqs.slice(2, 4), take: [1, 1] },
        { seqs: seqs.slice(4, 6), take: [2, 1] },
      ]);
      expect(seqs.map((s) => s.length)).toEqual([1, 1, 1, 1, 2, 1]);
    });
  });
});

describe('step driver: argument checks', () => {
  it('refuses bad decode and verify arguments before calling any hook, naming the value', () => {
    withRig({}, (rig) => {
      const inputs = new Inputs(101);
      const [a, b, c, d, e] = prefilled(rig, inputs, [1, 2, 3, 1, 2]);
      const dr = rig.driver;
      expectThrow(() => dr.decode({ seqs: [] }), InvalidArgumentError, /decode: give at least one sequence/);
      expectThrow(() => dr.decode({ seqs: [a!, b!, a!] }), InvalidArgumentError, new RegExp(`decode: sequence ${a!.id} is listed twice`));
      expectThrow(() => dr.decode({ seqs: [a!, b!, c!, d!, e!] }), InvalidArgumentError, /decode: 5 sequences exceed maxBatch \(4\)/);
      expectThrow(() => dr.verify({ seqs: [a!], k: 4 }), InvalidArgumentError, /k must be between 1 and maxK \(3\), got 4/);
      expectThrow(() => dr.verify({ seqs: [a!], k: 0 }), InvalidArgumentError, /got 0/);
      expectThrow(() => dr.verify({ seqs: [a!], k: 1.5 }), InvalidArgumentError, /got 1\.5/);
      expectThrow(() => dr.decode({ seqs: [a!, b!], input: inputs.rows(3) }), InvalidArgumentError, /decode: 2 input rows of 16 bytes need 32 bytes, got 48/);
      expectThrow(() => dr.verify({ seqs: [a!, b!], k: 2, input: inputs.rows(2) }), InvalidArgumentError, /verify: 4 input rows of 16 bytes need 64 bytes, got 32/);
      expectThrow(() => dr.decode({ seqs: [a!, b!], tokens: inputs.tokens(3) }), InvalidArgumentError, /decode: 2 rows need 2 token ids, got 3/);
      expectThrow(() => dr.verify({ seqs: [a!], k: 3, tokens: inputs.tokens(1) }), InvalidArgumentError, /verify: 3 rows need 3 token ids, got 1/);
      dr.close(e!);
      expectThrow(() => dr.decode({ seqs: [a!, e!] }), InvalidArgumentError, new RegExp(`decode: sequence ${e!.id} is not open in this driver`));
      expectThrow(() => dr.verify({ seqs: [e!], k: 1 }), InvalidArgumentError, new RegExp(`verify: sequence ${e!.id} is not open`));
      expectThrow(() => dr.close(e!), InvalidArgumentError, new RegExp(`close: sequence ${e!.id} is not open`));
      expectThrow(() => dr.stateOf(a!, 5), InvalidArgumentError, /no layer 5 \(the stack has 2\)/);
      expect(rig.log.of('decodePrestage', 'checkReplayRoom', 'forward', 'gdnWoaStashSeqFloats')).toEqual([]);
      expect([a!.length, b!.length, c!.length, d!.length]).toEqual([1, 2, 3, 1]);
      // A sequence of another driver with the same id is not this driver's.
      withRig({}, (other) => {
        const stranger = other.open();
        const own = dr.open();
        expect(stranger.id).not.toBe(own.id);
        const twin = { ...stranger, id: own.id } as Sequence;
        expectThrow(() => dr.decode({ seqs: [twin] }), InvalidArgumentError, new RegExp(`sequence ${own.id} is not open in this driver`));
      });
    });
  });

  it('refuses bad prefill arguments, naming the value', () => {
    withRig({}, (rig) => {
      const inputs = new Inputs(102);
      const [a, b] = [rig.open(), rig.open()];
      const dr = rig.driver;
      expectThrow(() => dr.prefill({ seqs: [a, b], lengths: [1] }), InvalidArgumentError, /prefill: 2 sequences but 1 lengths/);
      expectThrow(() => dr.prefill({ seqs: [a, b], lengths: [1, 0] }), InvalidArgumentError, /lengths\[1\] must be a positive integer, got 0/);
      expectThrow(() => dr.prefill({ seqs: [a], lengths: [1.5] }), InvalidArgumentError, /lengths\[0\] must be a positive integer, got 1\.5/);
      expectThrow(() => dr.prefill({ seqs: [a], lengths: [-2] }), InvalidArgumentError, /got -2/);
      expectThrow(() => dr.prefill({ seqs: [a, b], lengths: [2, 3], tokens: inputs.tokens(4) }), InvalidArgumentError, /prefill: 5 rows need 5 token ids, got 4/);
      expectThrow(() => dr.prefill({ seqs: [a, b], lengths: [2, 3], input: inputs.rows(6) }), InvalidArgumentError, /prefill: 5 input rows of 16 bytes need 80 bytes, got 96/);
      expectThrow(() => dr.prefill({ seqs: [a, a], lengths: [1, 1] }), InvalidArgumentError, new RegExp(`prefill: sequence ${a.id} is listed twice`));
      expectThrow(() => dr.prefill({ seqs: [], lengths: [] }), InvalidArgumentError, /prefill: give at least one sequence/);
      dr.close(b);
      expectThrow(() => dr.prefill({ seqs: [b], lengths: [1] }), InvalidArgumentError, new RegExp(`prefill: sequence ${b.id} is not open`));
      expect(rig.log.forwards()).toEqual([]);
      expect(a.length).toBe(0);
    });
  });

  it('opens a sequence in each free slot and refuses one more', () => {
    withRig({}, (rig) => {
      const seqs = Array.from({ length: LIMITS.maxSeqs }, () => rig.driver.open());
      expect(new Set(seqs.map((s) => s.slot))).toEqual(new Set([0, 1, 2, 3, 4, 5]));
      expect(new Set(seqs.map((s) => s.id)).size).toBe(LIMITS.maxSeqs);
      expectThrow(() => rig.driver.open(), InvalidArgumentError, /all 6 sequence slots are in use; close a sequence first/);
      rig.driver.close(seqs[3]!);
      const again = rig.driver.open();
      expect(again.slot).toBe(seqs[3]!.slot);
      expect(again.id).not.toBe(seqs[3]!.id);
      expect(again.length).toBe(0);
      expect(rig.log.lines('openState', 'closeState').slice(-4)).toEqual([
        `closeState L0 s${seqs[3]!.slot}`, `closeState L1 s${seqs[3]!.slot}`, `openState L0 s${again.slot}`, `openState L1 s${again.slot}`,
      ]);
    });
  });

  it('checks its construction and refuses use after dispose', () => {
    const gpu = cpuBackend();
    try {
      const log = new CallLog();
      const narrow = new KernelLayer({ name: 'N', log, gpu, limits: LIMITS, width: 4 });
      const wide = new KernelLayer({ name: 'W', log, gpu, limits: LIMITS, width: 8 });
      expectThrow(() => new StepDriver({ gpu, layers: [], limits: LIMITS }), InvalidArgumentError, /at least one layer/);
      expectThrow(() => new StepDriver({ gpu, layers: [narrow, wide], limits: LIMITS }), InvalidArgumentError, /layer 1 \(test-kernel\) reads 32-byte rows but layer 0 \(test-kernel\) writes 16-byte rows/);
      expectThrow(() => new StepDriver({ gpu, layers: [narrow], limits: { ...LIMITS, maxSeqs: 0 } }), InvalidArgumentError, /limits\.maxSeqs must be a positive integer, got 0/);
      expectThrow(() => new StepDriver({ gpu, layers: [narrow], limits: { ...LIMITS, maxK: 2.5 } }), InvalidArgumentError, /limits\.maxK must be a positive integer, got 2\.5/);
      expectThrow(() => new StepDriver({ gpu, layers: [narrow], limits: { ...LIMITS, maxRows: 11 } }), InvalidArgumentError, /limits\.maxRows \(11\) must hold a full verify step: maxBatch × maxK = 12/);
      expectThrow(() => new StepDriver({ gpu, layers: [narrow], limits: LIMITS, buckets: [3] }), InvalidArgumentError, /largest bucket/);
      // A stream given to the driver stays the caller's; one it made itself goes with it.
      const stream = gpu.createStream();
      const borrowed = new StepDriver({ gpu, layers: [narrow], limits: LIMITS, stream });
      expect(borrowed.stream).toBe(stream);
      borrowed.dispose();
      expect(() => gpu.synchronize(stream)).not.toThrow();
      gpu.destroyStream(stream);
      const driver = new StepDriver({ gpu, layers: [narrow], limits: LIMITS });
      const s = driver.open();
      driver.dispose();
      driver.dispose();
      expect(() => gpu.synchronize(driver.stream)).toThrow(/stream/);
      expectThrow(() => driver.open(), InvalidArgumentError, /disposed/);
      expectThrow(() => driver.decode({ seqs: [s] }), InvalidArgumentError, /disposed/);
      expectThrow(() => driver.prefill({ seqs: [s], lengths: [1] }), InvalidArgumentError, /disposed/);
      expectThrow(() => driver.accept([]), InvalidArgumentError, /disposed/);
      narrow.dispose();
      wide.dispose();
    } finally {
      gpu.dispose();
    }
  });
});
