import { CpuBackend } from '@metrale/cpu-backend';
import { describe, expect, it } from 'vitest';
import { BlockScratch, DecoderBlock, LayerTimer, StepDriver, type LayerStep, type TransformerLayer } from '../src/index.js';
import { Inputs, withRig } from './support/driver-rig.js';
import { testAdd } from './support/test-residual-add.js';

const STACK = [
  { name: 'L0', salt: 0.125 },
  { name: 'P', salt: 0.5, plain: true },
  { name: 'L1', salt: -0.375 },
];

const sum = (r: Record<string, number>): number => Object.values(r).reduce((a, b) => a + b, 0);

describe('LayerTimer', () => {
  it('times every layer of prefill and eager steps by type, and nothing of a capture or a replay', () => {
    const gpu = new CpuBackend();
    const timer = new LayerTimer(gpu);
    // The rig disposes the backend; the timer's events go first.
    withRig({ layers: STACK, gpu, timer }, (rig) => {
      try {
        const inputs = new Inputs(3);
        const a = rig.open();
        const b = rig.open();
        rig.prefill([a, b], [3, 2], inputs.rows(5), inputs.tokens(5));
        expect(timer.steps()).toBe(1);
        const prefill = timer.totals('prefill');
        expect(Object.keys(prefill).sort()).toEqual(['test-kernel', 'test-recording']);
        for (const ms of Object.values(prefill)) expect(ms).toBeGreaterThanOrEqual(0);
        expect(rig.step([a, b], undefined, inputs.rows(2), inputs.tokens(2)).result.path).toBe('capture');
        expect(rig.step([a, b], undefined, inputs.rows(2), inputs.tokens(2)).result.path).toBe('replay');
        expect(timer.steps()).toBe(1);
        expect(timer.totals('prefill')).toEqual(prefill);
        expect(timer.totals('decode')).toEqual({});
        timer.reset();
        expect(timer.steps()).toBe(0);
        expect(timer.totals('prefill')).toEqual({});
      } finally {
        timer.dispose();
      }
    });
  });

  it('times decode and verify steps of a driver without graphs', () => {
    const gpu = new CpuBackend();
    const timer = new LayerTimer(gpu);
    withRig({ layers: STACK, gpu, timer, graphs: false }, (rig) => {
      try {
        const inputs = new Inputs(5);
        const a = rig.open();
        rig.prefill([a], [2], inputs.rows(2), inputs.tokens(2));
        expect(rig.step([a], undefined, inputs.rows(1), inputs.tokens(1)).result.path).toBe('eager');
        expect(rig.step([a], 2, inputs.rows(2), inputs.tokens(2)).result.path).toBe('eager');
        expect([timer.steps('prefill'), timer.steps('decode'), timer.steps('verify'), timer.steps()]).toEqual([1, 1, 1, 3]);
        expect(Object.keys(timer.totals('verify')).sort()).toEqual(['test-kernel', 'test-recording']);
      } finally {
        timer.dispose();
      }
    });
  });

  it("splits a decoder block's time by the kinds of its parts, and gives no section to an untimed step", () => {
    const gpu = new CpuBackend();
    const timer = new LayerTimer(gpu);
    const sections: (LayerStep['section'] | undefined)[] = [];
    const part = (type: string): TransformerLayer => ({
      type, inputRowBytes: 32, outputRowBytes: 32,
      openState: (slot: number) => ({ slot }),
      closeState: () => {},
      forward: (step: LayerStep) => void sections.push(step.section),
      dispose: () => {},
    }) as unknown as TransformerLayer;
    const scratch = new BlockScratch(gpu, 32, 16);
    const block = new DecoderBlock({ gpu, branches: [[part('rms-norm'), part('gdn')], [part('rms-norm'), part('moe')]], add: testAdd, scratch });
    const limits = { maxSeqs: 2, maxSeqLen: 16, maxBatch: 2, maxK: 1, maxRows: 4 };
    for (const layerTimer of [timer, undefined]) {
      const driver = new StepDriver({ gpu, layers: [block], limits, ...(layerTimer ? { layerTimer } : {}) });
      const seq = driver.open();
      driver.prefill({ seqs: [seq], lengths: [3], input: new Float32Array(3 * 8) });
      driver.dispose();
    }
    expect(Object.keys(timer.totals('prefill')).sort()).toEqual(['gdn', 'moe', 'residual-add', 'rms-norm']);
    expect(sum(timer.totals('prefill'))).toBeGreaterThanOrEqual(0);
    // Four parts ran timed (a section function each), then four untimed (none).
    expect(sections.map((s) => typeof s)).toEqual([...Array(4).fill('function'), ...Array(4).fill('undefined')]);
    block.dispose();
    scratch.dispose();
    timer.dispose();
    gpu.dispose();
  });
});
