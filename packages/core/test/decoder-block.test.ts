import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import {
  BlockScratch, DecoderBlock, InvalidArgumentError, MemoryWeightSource, SeededRandom, StepDriver, defineKernel, definePlugin, resolveHooks, tensorOf,
  type AddsResidual, type GdnCarryBinding, type LayerState, type LayerStep, type ResidualAdd, type TransformerLayer,
} from '../src/index.js';
import { runLayerConformance } from '../src/testing/index.js';
import { TokenTableLayer } from './support/token-table-layer.js';
import { testAdd } from './support/test-residual-add.js';

const W = 8;

/** A fake sub-layer: identity-shaped rows, optional hooks that record their calls. */
function fake(
  name: string, calls: string[],
  hooks: { woa?: number; carry?: { stashSeqFloats: number; convRowElems: number }; room?: boolean; batched?: boolean; fold?: boolean; pageBytes?: number; snapshotBytes?: number; resume?: boolean } = {},
): TransformerLayer {
  const layer: Record<string, unknown> = {
    type: name, inputRowBytes: 4 * W, outputRowBytes: 4 * W,
    openState: (slot: number) => ({ slot, name }),
    closeState: () => calls.push(`${name}.close`),
    forward: () => calls.push(`${name}.forward`),
    dispose: () => calls.push(`${name}.dispose`),
  };
  if (hooks.woa !== undefined) {
    layer.gdnWoaStashSeqFloats = () => hooks.woa;
    layer.gdnWoaBind = (_f: bigint, stash: bigint, seqs: number) => calls.push(`${name}.woaBind ${stash} ${seqs}`);
  }
  if (hooks.carry) {
    layer.gdnCarrySeqFloats = () => hooks.carry;
    layer.gdnCarryBind = (b: GdnCarryBinding) => calls.push(`${name}.carryBind stash=${b.stash} per=${b.stashSeqFloats} conv=${b.convStash} row=${b.convRowElems}`);
  }
  if (hooks.room) {
    layer.checkReplayRoom = (s: { name: string }, len: number, k: number) => calls.push(`${s.name}.room ${len} ${k}`);
    layer.syncReplayedStep = (s: { name: string }, len: number, k: number) => calls.push(`${s.name}.sync ${len} ${k}`);
  }
  if (hooks.batched) layer.gdnVerifyRunBatched = () => name !== 'no';
  if (hooks.fold) layer.gdnFoldAccepted = () => calls.push(`${name}.fold`) > 0;
  if (hooks.pageBytes !== undefined) {
    layer.kvPageBytes = (pageSize: number) => hooks.pageBytes! * pageSize;
    layer.kvBind = (b: { pages: number }) => calls.push(`${name}.kvBind ${b.pages}`);
    layer.kvUnbind = () => calls.push(`${name}.kvUnbind`);
  }
  if (hooks.snapshotBytes !== undefined) {
    layer.stateSnapshotBytes = () => hooks.snapshotBytes;
    layer.stateSnapshotBind = (count: number) => calls.push(`${name}.snapshotBind ${count}`);
    layer.saveStateSnapshot = (s: { name: string }, index: number) => calls.push(`${s.name}.save ${index}`);
  }
  if (hooks.resume) layer.resumeAt = (s: { name: string }, length: number, snapshot: number | undefined) => calls.push(`${s.name}.resume ${length} ${snapshot}`);
  return layer as unknown as TransformerLayer;
}

function block(gpu: CpuBackend, branches: TransformerLayer[][]): { block: DecoderBlock; scratch: BlockScratch } {
  const scratch = new BlockScratch(gpu, 4 * W, 16);
  return { block: new DecoderBlock({ gpu, branches, add: testAdd, scratch }), scratch };
}

const doubleKernel = defineKernel({
  name: 'test.double_added',
  params: { a: 'ptr', b: 'ptr', sum: 'ptr', out: 'ptr', count: 'i32' },
  cpu: (p, { mem }) => {
    const a = mem.f32(p.a, p.count);
    const b = mem.f32(p.b, p.count);
    const sum = mem.f32(p.sum, p.count);
    const out = mem.f32(p.out, p.count);
    for (let i = 0; i < p.count; i++) sum[i] = a[i]! + b[i]!;
    for (let i = 0; i < p.count; i++) out[i] = 2 * sum[i]!;
  },
});

/** f(x) = 2x, a stateless part that can take the add before it (AddsResidual; b = 0 for a plain forward). */
function doubler(gpu: CpuBackend): TransformerLayer & AddsResidual {
  const zeros = gpu.alloc(4 * W * 8);
  gpu.upload(zeros, new Float32Array(W * 8));
  const launch = (step: LayerStep<LayerState>, a: bigint, b: bigint, sum: bigint) =>
    gpu.launch(doubleKernel, { grid: 1, block: 1, stream: step.stream }, { a, b, sum, out: step.output, count: step.rows * W });
  return {
    type: 'doubler', inputRowBytes: 4 * W, outputRowBytes: 4 * W,
    openState: (slot: number) => ({ slot }),
    closeState: () => {},
    forward: (step) => launch(step, step.input, zeros, step.output),
    forwardAdded: (step, r) => launch(step, r.a, r.b, r.sum),
    dispose: () => gpu.free(zeros),
  };
}

describe('DecoderBlock: one TransformerLayer made of sub-layers', () => {
  it('sums its parts\' page and snapshot bytes, binds each, and resumes at a prefix only when every part can', () => {
    const gpu = new CpuBackend();
    const calls: string[] = [];
    const parts = () => [[fake('n', calls, { resume: true }), fake('g', calls, { snapshotBytes: 40, resume: true })], [fake('a', calls, { pageBytes: 3, resume: true })]];
    const { block: b } = block(gpu, parts());
    expect(b.kvPageBytes!(16)).toBe(48);
    expect(b.stateSnapshotBytes!()).toBe(40);
    b.kvBind!({ pageSize: 16, pages: 9, pagesPerSeq: 4, blockTable: 1n });
    b.stateSnapshotBind!(5);
    const state = b.openState(0);
    b.saveStateSnapshot!(state, 2, gpu.defaultStream);
    b.resumeAt!(state, 32, 2, gpu.defaultStream);
    b.kvUnbind!();
    b.stateSnapshotBind!(0);
    expect(calls).toEqual(['a.kvBind 9', 'g.snapshotBind 5', 'g.save 2', 'n.resume 32 2', 'g.resume 32 2', 'a.resume 32 2', 'a.kvUnbind', 'g.snapshotBind 0']);
    // One part that cannot resume: the block cannot either.
    const partial = block(gpu, [[fake('n', calls)], [fake('a', calls, { pageBytes: 3, resume: true })]]).block;
    expect(resolveHooks(partial).implemented.has('resumeAt')).toBe(false);
    expect(resolveHooks(partial).implemented.has('kvBind')).toBe(true);
    expect(resolveHooks(partial).implemented.has('kvUnbind')).toBe(true);
    gpu.dispose();
  });

  it('exposes only the hooks some sub-layer implements', () => {
    const gpu = new CpuBackend();
    const calls: string[] = [];
    const plain = block(gpu, [[fake('a', calls), fake('b', calls)], [fake('c', calls)]]).block;
    expect([...resolveHooks(plain).implemented]).toEqual([]);
    const roomy = block(gpu, [[fake('a', calls), fake('m', calls, { room: true })], [fake('c', calls)]]).block;
    expect([...resolveHooks(roomy).implemented].sort()).toEqual(['checkReplayRoom', 'syncReplayedStep']);
    const state = roomy.openState(2);
    roomy.checkReplayRoom!(state, 5, 3);
    roomy.syncReplayedStep!(state, 5, 3);
    expect(calls).toEqual(['m.room 5 3', 'm.sync 5 3']);
    gpu.dispose();
  });

  it('sums write-on-accept stash sizes and binds each sub-layer to its own slice', () => {
    const gpu = new CpuBackend();
    const calls: string[] = [];
    const { block: b } = block(gpu, [[fake('n', calls), fake('g1', calls, { woa: 10 })], [fake('n2', calls), fake('g2', calls, { woa: 6 })]]);
    expect(b.gdnWoaStashSeqFloats!()).toBe(16);
    b.gdnWoaBind!(1n, 1000n, 4);
    // g2's slab starts after g1's: 4 sequences × 10 floats × 4 bytes.
    expect(calls).toEqual(['g1.woaBind 1000 4', `g2.woaBind ${1000 + 4 * 4 * 10} 4`]);
    gpu.dispose();
  });

  it('answers carried sizes only when every speculative part carries, and slices the carry buffers', () => {
    const gpu = new CpuBackend();
    const calls: string[] = [];
    const carry = { stashSeqFloats: 10, convRowElems: 3 };
    const mixed = block(gpu, [[fake('g1', calls, { woa: 10, carry }), fake('w', calls, { woa: 5 })]]).block;
    expect(mixed.gdnCarrySeqFloats!()).toBeUndefined();
    const both = block(gpu, [[fake('g1', calls, { woa: 10, carry }), fake('g2', calls, { woa: 6, carry: { stashSeqFloats: 6, convRowElems: 5 } })]]).block;
    expect(both.gdnCarrySeqFloats!()).toEqual({ stashSeqFloats: 16, convRowElems: 8 });
    both.gdnCarryBind!({
      flag: 1n, stash: 1000n, stashSeqFloats: 16, pendingRows: 2n, slotTable: 3n, convStash: 5000n, convRowElems: 8, convStashRows: 2, maxK: 2, seqs: 4, maxBatch: 2,
    });
    expect(calls).toEqual([
      'g1.carryBind stash=1000 per=10 conv=5000 row=3',
      `g2.carryBind stash=${1000 + 4 * 4 * 10} per=6 conv=${5000 + 4 * 4 * 2 * 3} row=5`,
    ]);
    gpu.dispose();
  });

  it('combines gdnVerifyRunBatched and gdnFoldAccepted', () => {
    const gpu = new CpuBackend();
    const calls: string[] = [];
    const b = block(gpu, [[fake('yes', calls, { batched: true, fold: true }), fake('x', calls)], [fake('no', calls, { batched: true, fold: true })]]).block;
    const s = b.openState(0);
    expect(b.gdnVerifyRunBatched!([s], 2, 0, 0n)).toBe(false);
    expect(b.gdnFoldAccepted!(gpu, 0n, 0n, 2, 1, gpu.defaultStream)).toBe(true);
    expect(calls).toEqual(['yes.fold', 'no.fold']);
    gpu.dispose();
  });

  it('refuses chains whose row widths do not line up', () => {
    const gpu = new CpuBackend();
    const wide = { ...fake('wide', []), outputRowBytes: 4 * W * 2 } as TransformerLayer;
    expect(() => block(gpu, [[wide]])).toThrow(InvalidArgumentError);
    expect(() => block(gpu, [[]])).toThrow(/at least one layer/);
    gpu.dispose();
  });

  it('computes x + f(x) per branch through the driver, graphs replayed', () => {
    const gpu = new CpuBackend();
    const limits = { maxSeqs: 2, maxSeqLen: 32, maxBatch: 2, maxK: 2, maxRows: 8 };
    const vocab = 12;
    const table = new SeededRandom(1).normals(vocab * W);
    const weights = new MemoryWeightSource('t', [tensorOf('table', table, [vocab, W])]);
    const make = () => new TokenTableLayer({ gpu, layerType: 'token-table', config: { hidden_size: W, vocab_size: vocab }, layerIndex: 0, weights, limits });
    const scratch = new BlockScratch(gpu, 4 * W, limits.maxRows);
    // The token-table layer computes f(x) = x + table[token]; two branches of it: x ← x + f(x),
    // twice, so out = 4x + 3·table[token].
    const b = new DecoderBlock({ gpu, branches: [[make()], [make()]], add: testAdd, scratch });
    const driver = new StepDriver({ gpu, layers: [b], limits });
    const seq = driver.open();
    const x = new SeededRandom(2).normals(W);
    driver.prefill({ seqs: [seq], lengths: [1], input: x, tokens: Int32Array.from([3]) });
    for (let step = 0; step < 3; step++) {
      const token = 5 + step;
      const out = driver.readOutputF32(driver.decode({ seqs: [seq], input: x, tokens: Int32Array.from([token]) }));
      const want = Array.from(x, (v, j) => 4 * v + 3 * table[token * W + j]!);
      out.forEach((v, j) => expect(v).toBeCloseTo(want[j]!, 5));
    }
    expect(Object.values(driver.graphs.describe()).some((g) => g.kind === 'graph' && g.replays > 0)).toBe(true);
    driver.dispose();
    b.dispose();
    scratch.dispose();
    gpu.dispose();
  });

  describe('adds taken into the next part (AddsResidual) and passed on between blocks (pairIn, pairOut)', () => {
    const limits = { maxSeqs: 2, maxSeqLen: 32, maxBatch: 2, maxK: 2, maxRows: 8 };
    const vocab = 12;
    /** A stack of three blocks; the decode rows of three steps and the adds one forward of the stack launches. */
    const run = (gpu: CpuBackend, branches: () => TransformerLayer[][], fuseAdds: boolean, pairs: boolean) => {
      let adds = 0;
      const add: ResidualAdd = { add: (...a) => (adds++, testAdd.add(...a)) };
      const scratch = new BlockScratch(gpu, 4 * W, limits.maxRows);
      const blocks = [0, 1, 2].map((i) => new DecoderBlock({ gpu, branches: branches(), add, scratch, fuseAdds, ...(pairs ? { pairIn: i > 0, pairOut: i < 2 } : {}) }));
      const driver = new StepDriver({ gpu, layers: blocks, limits });
      const seq = driver.open();
      const x = new SeededRandom(2).normals(W);
      driver.prefill({ seqs: [seq], lengths: [1], input: x, tokens: Int32Array.from([3]) });
      // Adds a forward launches (decode steps replay a graph, which calls nothing).
      const perForward = adds;
      const out = Array.from({ length: 3 }, (_, step) => Array.from(driver.readOutputF32(driver.decode({ seqs: [seq], input: x, tokens: Int32Array.from([5 + step]) }))));
      driver.dispose();
      for (const b of blocks) b.dispose();
      scratch.dispose();
      return { out, perForward, rowBytes: blocks.map((b) => [b.inputRowBytes, b.outputRowBytes]) };
    };
    const table = (gpu: CpuBackend) =>
      new TokenTableLayer({
        gpu, layerType: 'token-table', config: { hidden_size: W, vocab_size: vocab }, layerIndex: 0, limits,
        weights: new MemoryWeightSource('t', [tensorOf('table', new SeededRandom(1).normals(vocab * W), [vocab, W])]),
      });

    it('gives the same rows with one add a stack instead of two a block, branches of odd and even length', () => {
      const gpu = new CpuBackend();
      const branches = () => [[doubler(gpu), table(gpu)], [doubler(gpu), table(gpu), table(gpu)]];
      const plain = run(gpu, branches, false, false);
      const fused = run(gpu, branches, true, false);
      const passed = run(gpu, branches, true, true);
      const passedUnfused = run(gpu, branches, false, true);
      expect(fused.out).toEqual(plain.out);
      expect(passed.out).toEqual(plain.out);
      expect(passedUnfused.out).toEqual(plain.out);
      expect([plain.perForward, fused.perForward, passed.perForward, passedUnfused.perForward]).toEqual([6, 3, 1, 6]);
      expect(passed.rowBytes).toEqual([[4 * W, 8 * W], [8 * W, 8 * W], [8 * W, 4 * W]]);
      gpu.dispose();
    });

    it('passes pairs through blocks of one branch that cannot take an add (the add apart, the stream copied out)', () => {
      const gpu = new CpuBackend();
      const branches = () => [[table(gpu)]];
      const plain = run(gpu, branches, true, false);
      const passed = run(gpu, branches, true, true);
      expect(passed.out).toEqual(plain.out);
      expect([plain.perForward, passed.perForward]).toEqual([3, 3]);
      gpu.dispose();
    });
  });

  it('passes the conformance kit with a prestaging sub-layer (prestage and re-arm forwarded)', () => {
    const vocab = 24;
    const weights = new MemoryWeightSource('t', [tensorOf('table', new SeededRandom(7).normals(vocab * W), [vocab, W])]);
    const scratches: BlockScratch[] = [];
    const plugin = definePlugin({
      name: 'block-of-token-tables', version: '0.0.0', specificationVersion: '1.0.0', layerTypes: ['block'],
      create: (ctx) => {
        const sub = () => new TokenTableLayer({ ...ctx, layerType: 'token-table' });
        const scratch = new BlockScratch(ctx.gpu, 4 * W, ctx.limits.maxRows);
        scratches.push(scratch);
        return new DecoderBlock({ gpu: ctx.gpu, branches: [[sub(), sub()], [sub()]], add: testAdd, scratch });
      },
    });
    const report = runLayerConformance(plugin, { backend: () => new CpuBackend(), config: { hidden_size: W, vocab_size: vocab }, weights });
    const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(report.passed).toBe(true);
    expect(status['failed-capture-rearm']).toBe('pass');
    expect(status['default-hooks']).toBe('pass');
  });
});

export type { LayerState };
