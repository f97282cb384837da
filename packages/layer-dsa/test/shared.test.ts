// 'shared' indexer layers: a shared layer reuses the selection its model's previous full layer
// computed in the same step (HF: prev_topk_indices), read from that layer's selection buffers.
import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, SeededRandom, StepDriver, type Sequence, relativeL2Error } from '@metrale/core';
import plugin, { DsaLayer } from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { DsaReference } from './dsa-reference.js';
import { configOf, GLM5, GLM53, pack, randomRows, randomWeights, Rig, weightsOf, type Shape } from './dsa-setup.js';

const limits = { maxSeqs: 2, maxSeqLen: 40, maxBatch: 2, maxK: 3, maxRows: 40 };

function chainScenario(shape: Shape, mlaEps: number) {
  const l0 = randomWeights(shape, 31);
  const l1 = randomWeights(shape, 32, false); // a shared layer has no indexer weights
  const ref0 = new DsaReference(shape, l0.ref, { mlaEps });
  const ref1 = new DsaReference(shape, l1.ref, { mlaEps });
  const rig = new Rig(configOf(shape), [l0.tensors, l1.tensors], limits);
  const shared = rig.layers[1] as DsaLayer;
  expect(shared.geometry.full).toBe(false);
  expect(shared.selection).toEqual((rig.layers[0] as DsaLayer).selection);
  const rnd = new SeededRandom(8);
  const seqs: Sequence[] = [rig.driver.open(), rig.driver.open()];
  const history: Float64Array[][] = [[], []];
  let worst = 0;
  let sparse = 0;
  const expectStep = (out: Float32Array, rows: Float64Array[][], keep: number[]) => {
    const expected: Float64Array[] = [];
    rows.forEach((r, s) => {
      const r0 = ref0.run([...history[s]!, ...r]);
      sparse += r0.sparseRows;
      const r1 = ref1.run(r0.out, r0.selections);
      expected.push(...r1.out.slice(-r.length));
      history[s]!.push(...r.slice(0, keep[s]!));
    });
    worst = Math.max(worst, relativeL2Error(out, pack(expected)));
  };
  try {
    let rows = [randomRows(rnd, 15, shape.hidden), randomRows(rnd, 6, shape.hidden)];
    expectStep(rig.prefill(seqs, [15, 6], pack(rows.flat())), rows, [15, 6]);
    for (let i = 0; i < 3; i++) {
      rows = [randomRows(rnd, 1, shape.hidden), randomRows(rnd, 1, shape.hidden)];
      expectStep(rig.decode(seqs, pack(rows.flat())).out, rows, [1, 1]);
    }
    rows = [randomRows(rnd, 3, shape.hidden), randomRows(rnd, 3, shape.hidden)];
    expectStep(rig.verify(seqs, 3, pack(rows.flat()), [2, 0]).out, rows, [2, 0]);
    for (let i = 0; i < 2; i++) {
      rows = [randomRows(rnd, 1, shape.hidden), randomRows(rnd, 1, shape.hidden)];
      const r = rig.decode(seqs, pack(rows.flat()));
      expect(r.path).toBe('replay');
      expectStep(r.out, rows, [1, 1]);
    }
  } finally {
    rig.dispose();
  }
  return { worst, sparse };
}

describe('a shared layer reuses its full layer’s selection within the step', () => {
  it('GLM-5: full layer 0 then shared layer 1 match the reference chain (layer 1 masked by layer 0’s top-k)', () => {
    const r = chainScenario(GLM5, 1e-6);
    expect(r.sparse).toBeGreaterThan(20);
    expect(r.worst).toBeLessThan(1e-5);
  });

  it('GLM-5.3: the pooled selection with its tail is shared too', () => {
    const r = chainScenario(GLM53, 1e-6);
    expect(r.sparse).toBeGreaterThan(10);
    expect(r.worst).toBeLessThan(1e-5);
  });
});

describe('linking shared layers', () => {
  const config = configOf(GLM5);
  const w0 = weightsOf(randomWeights(GLM5, 1).tensors);
  const w1 = weightsOf(randomWeights(GLM5, 2, false).tensors);
  const create = (gpu: CpuBackend, layerIndex: number, c = config, l = limits) => plugin.create({ gpu, layerType: 'dsa', config: c, layerIndex, weights: layerIndex === 0 ? w0 : w1, limits: l });

  it('a shared layer created before its full layer is refused, naming the source layer', () => {
    const gpu = new CpuBackend();
    expect(() => create(gpu, 1)).toThrow(InvalidArgumentError);
    expect(() => create(gpu, 1)).toThrow(/layer 1 is 'shared' .* layer 0, the previous 'full' DSA layer, which has not been created/);
    expect(() => create(gpu, 1, { ...config })).toThrow(/has not been created/);
    gpu.dispose();
  });

  it('links by gpu and config object: another config object or another gpu does not see the full layer', () => {
    const gpu = new CpuBackend();
    const other = new CpuBackend();
    create(gpu, 0);
    expect(create(gpu, 1)).toBeInstanceOf(DsaLayer);
    expect(() => create(gpu, 1, { ...config })).toThrow(/has not been created/);
    expect(() => create(other, 1)).toThrow(/has not been created/);
    gpu.dispose();
    other.dispose();
  });

  it('refuses different limits, a disposed source, and a stack without the source layer', () => {
    const gpu = new CpuBackend();
    const full = create(gpu, 0) as DsaLayer;
    expect(() => new DsaLayer({ gpu, layerType: 'dsa', config, layerIndex: 1, weights: w1, limits: { ...limits, maxRows: 20 } }, { selectionSource: full }))
      .toThrow(/limits\.maxRows is 20 here but 40 there/);
    const shared = create(gpu, 1);
    const driver = new StepDriver({ gpu, layers: [shared], limits });
    const seq = driver.open();
    expect(() => driver.prefill({ seqs: [seq], lengths: [2], input: new Float32Array(2 * GLM5.hidden) })).toThrow(/did not run first/);
    full.dispose();
    expect(() => create(gpu, 1)).toThrow(/was disposed/);
    expect(() => driver.prefill({ seqs: [seq], lengths: [2], input: new Float32Array(2 * GLM5.hidden) })).toThrow(/which was disposed/);
    driver.dispose();
    gpu.dispose();
  });

  it('a full layer takes no selection source', () => {
    const gpu = new CpuBackend();
    const full = create(gpu, 0) as DsaLayer;
    expect(() => new DsaLayer({ gpu, layerType: 'dsa', config, layerIndex: 0, weights: w0, limits }, { selectionSource: full })).toThrow(/'full' indexer layer/);
    gpu.dispose();
  });
});
