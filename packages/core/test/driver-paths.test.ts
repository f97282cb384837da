import { describe, expect, it } from 'vitest';
import { resolveHooks, type Sequence, type StepPath } from '../src/index.js';
import { faultInjectingBackend } from '../src/testing/capture-fault.js';
import { cpuBackend } from './support/cpu.js';
import { Inputs, Rig, withRig, type LayerSpec, type RigOptions } from './support/driver-rig.js';
import { CallLog, KernelLayer, RecordingLayer } from './support/recording-layer.js';
import { LIMITS } from './support/driver-rig.js';

// Two recording layers around one with no hooks at all: the driver must run the hookless one in
// every path and call nothing on it.
const STACK: readonly LayerSpec[] = [
  { name: 'L0', salt: 0.125 },
  { name: 'P', salt: 0.5, plain: true },
  { name: 'L1', salt: -0.375 },
];

/** Opens a and b, prefills them (3 and 2 rows) and clears the log. */
function twoPrefilled(rig: Rig, inputs: Inputs): [Sequence, Sequence] {
  const a = rig.open();
  const b = rig.open();
  rig.prefill([a, b], [3, 2], inputs.rows(5), inputs.tokens(5));
  rig.log.clear();
  return [a, b];
}

const prestages = (seqs: readonly Sequence[]) => seqs.flatMap((s) => [`decodePrestage L0 s${s.slot}`, `decodePrestage L1 s${s.slot}`]);
const forwards = (phase: string, batch: number, k: number, mode: 'capturing' | 'eager') =>
  ['L0', 'P', 'L1'].map((l) => `forward ${l} ${phase} b${batch} k${k} ${mode}`);

interface ScenarioRecord {
  readonly paths: StepPath[];
  readonly outputs: Float32Array[];
  readonly lengths: number[];
  readonly states: unknown[];
}

/**
 * A run exercising several graph keys, orders and verify/accept; every step's output is also
 * checked against the host model of the layers.
 */
function scenario(rig: Rig, seed: number): ScenarioRecord {
  const inputs = new Inputs(seed);
  const a = rig.open();
  const b = rig.open();
  const c = rig.open();
  rig.prefill([a, b, c], [3, 2, 4], inputs.rows(9), inputs.tokens(9));
  const paths: StepPath[] = [];
  const outputs: Float32Array[] = [];
  const run = (seqs: Sequence[], k?: number, accepted?: number[]) => {
    const rows = seqs.length * (k ?? 1);
    const { result, output, expected } = rig.step(seqs, k, inputs.rows(rows), inputs.tokens(rows));
    expect(output).toEqual(expected);
    paths.push(result.path);
    outputs.push(output);
    if (accepted) rig.driver.accept(accepted);
  };
  run([a, b]);
  run([a, b]);
  run([a, b]);
  run([a, b, c]);
  run([c, a, b]);
  run([a, b], 2, [2, 1]);
  run([b, a], 2, [0, 2]);
  run([a]);
  run([b]);
  run([c, b, a], 3, [3, 1, 2]);
  run([a, b, c]);
  const seqs = [a, b, c];
  return {
    paths,
    outputs,
    lengths: seqs.map((s) => s.length),
    // The hookless layer keeps no sync, so only the recording layers' host states must agree.
    states: seqs.flatMap((s) => [0, 2].map((l) => rig.layers[l]!.inspectState(rig.driver.stateOf(s, l) as never))),
  };
}

describe('step driver: capture path', () => {
  it('prestages every (sequence, layer), then captures each layer in order, with no room check or sync', () => {
    withRig({ layers: STACK, speculation: 'none' }, (rig) => {
      const inputs = new Inputs(11);
      const [a, b] = twoPrefilled(rig, inputs);
      const tokens = inputs.tokens(2);
      const { result, output, expected } = rig.step([a, b], undefined, inputs.rows(2), tokens);
      expect(result.path).toBe('capture');
      expect(result.captureError).toBeUndefined();
      expect(output).toEqual(expected);
      expect(rig.log.lines()).toEqual([...prestages([a, b]), ...forwards('decode', 2, 1, 'capturing')]);
      const pre = rig.log.of('decodePrestage');
      expect(pre.map((e) => e.args[0])).toEqual([[tokens[0]], [tokens[0]], [tokens[1]], [tokens[1]]]);
      expect(pre.every((e) => e.capturing === false)).toBe(true);
      expect(rig.driver.graphs.describe()).toEqual({ 'decode:2:1': { kind: 'graph', replays: 0 } });
      expect([a.length, b.length]).toEqual([4, 3]);
    });
  });

  it('captures a verify key with k rows per sequence and the step tables of the bucket', () => {
    withRig({ layers: STACK, speculation: 'none' }, (rig) => {
      const inputs = new Inputs(12);
      const [a, b] = twoPrefilled(rig, inputs);
      const tokens = inputs.tokens(6);
      const { result, output, expected } = rig.step([a, b], 3, inputs.rows(6), tokens);
      expect(result.path).toBe('capture');
      expect(output).toEqual(expected);
      expect(rig.log.lines()).toEqual([...prestages([a, b]), ...forwards('verify', 2, 3, 'capturing')]);
      expect(rig.log.of('decodePrestage').map((e) => e.args[0])).toEqual([
        Array.from(tokens.subarray(0, 3)), Array.from(tokens.subarray(0, 3)), Array.from(tokens.subarray(3)), Array.from(tokens.subarray(3)),
      ]);
      const f = rig.log.forwards()[0]!;
      expect(f.hostSeqLens).toEqual([3, 2]);
      expect(f.hostRowStarts).toEqual([0, 3, 6]);
      expect(f.stateSlots).toEqual([a.slot, b.slot]);
      // Verify does not commit: lengths move only at accept.
      expect([a.length, b.length]).toEqual([3, 2]);
      rig.driver.accept([1, 3]);
      expect([a.length, b.length]).toEqual([4, 5]);
    });
  });
});

describe('step driver: replay path', () => {
  it('room-checks every (layer, sequence) before any prestage, runs the graph, then syncs with the length before the step', () => {
    withRig({ layers: STACK, speculation: 'none' }, (rig) => {
      const inputs = new Inputs(21);
      const [a, b] = twoPrefilled(rig, inputs);
      rig.step([a, b], undefined, inputs.rows(2), inputs.tokens(2));
      rig.log.clear();
      const tokens = inputs.tokens(2);
      const { result, output, expected } = rig.step([a, b], undefined, inputs.rows(2), tokens);
      expect(result.path).toBe('replay');
      expect(output).toEqual(expected);
      expect(rig.log.lines()).toEqual([
        `checkReplayRoom L0 s${a.slot} len=4 k=1`,
        `checkReplayRoom L0 s${b.slot} len=3 k=1`,
        `checkReplayRoom L1 s${a.slot} len=4 k=1`,
        `checkReplayRoom L1 s${b.slot} len=3 k=1`,
        ...prestages([a, b]),
        `syncReplayedStep L0 s${a.slot} len=4 k=1`,
        `syncReplayedStep L0 s${b.slot} len=3 k=1`,
        `syncReplayedStep L1 s${a.slot} len=4 k=1`,
        `syncReplayedStep L1 s${b.slot} len=3 k=1`,
      ]);
      expect(rig.log.of('decodePrestage').map((e) => e.args[0])).toEqual([[tokens[0]], [tokens[0]], [tokens[1]], [tokens[1]]]);
      expect([a.length, b.length]).toEqual([5, 4]);
      // The sync brought host bookkeeping to where an eager forward would have.
      expect(rig.layers[0]!.inspectState(rig.driver.stateOf(a, 0) as never)).toMatchObject({ length: 5 });
      expect(rig.driver.graphs.describe()['decode:2:1']).toEqual({ kind: 'graph', replays: 1 });
    });
  });

  it('syncs a replayed verify with (length before the step, k), after a different accept than at capture', () => {
    withRig({ layers: STACK, speculation: 'none' }, (rig) => {
      const inputs = new Inputs(22);
      const [a, b] = twoPrefilled(rig, inputs);
      rig.step([a, b], 2, inputs.rows(4), inputs.tokens(4));
      rig.driver.accept([2, 0]);
      rig.log.clear();
      const { result, output, expected } = rig.step([b, a], 2, inputs.rows(4), inputs.tokens(4));
      expect(result.path).toBe('replay');
      expect(output).toEqual(expected);
      expect(rig.log.lines('checkReplayRoom', 'syncReplayedStep')).toEqual([
        `checkReplayRoom L0 s${b.slot} len=2 k=2`,
        `checkReplayRoom L0 s${a.slot} len=5 k=2`,
        `checkReplayRoom L1 s${b.slot} len=2 k=2`,
        `checkReplayRoom L1 s${a.slot} len=5 k=2`,
        `syncReplayedStep L0 s${b.slot} len=2 k=2`,
        `syncReplayedStep L0 s${a.slot} len=5 k=2`,
        `syncReplayedStep L1 s${b.slot} len=2 k=2`,
        `syncReplayedStep L1 s${a.slot} len=5 k=2`,
      ]);
      expect(rig.log.of('forward')).toEqual([]);
    });
  });

  it('replays give the outputs, lengths and host states of an eager driver over many steps', () => {
    const replayed = withRig({ layers: STACK }, (rig) => scenario(rig, 23));
    const eager = withRig({ layers: STACK, graphs: false }, (rig) => scenario(rig, 23));
    expect(replayed.paths).toEqual([
      'capture', 'replay', 'replay', 'capture', 'replay', 'capture', 'replay', 'capture', 'replay', 'capture', 'replay',
    ]);
    expect(eager.paths.every((p) => p === 'eager')).toBe(true);
    expect(replayed.outputs).toEqual(eager.outputs);
    expect(replayed.lengths).toEqual(eager.lengths);
    expect(replayed.states).toEqual(eager.states);
  });
});

describe('step driver: failed capture → re-arm → eager', () => {
  const failing = (): RigOptions => {
    const inner = cpuBackend();
    return { layers: STACK, speculation: 'none', gpu: faultInjectingBackend(inner, { failCaptures: true }).gpu, owner: inner };
  };

  it('re-arms every (sequence, layer) after the failed capture and runs the step eagerly, once', () => {
    withRig(failing(), (rig) => {
      const inputs = new Inputs(31);
      const [a, b] = twoPrefilled(rig, inputs);
      const { result, output, expected } = rig.step([a, b], undefined, inputs.rows(2), inputs.tokens(2));
      expect(result.path).toBe('capture-failed');
      expect(result.captureError).toMatch(/invalidat/i);
      expect(output).toEqual(expected);
      expect(rig.log.lines()).toEqual([
        ...prestages([a, b]),
        ...forwards('decode', 2, 1, 'capturing'),
        `decodePrestageRearm L0 s${a.slot}`,
        `decodePrestageRearm L1 s${a.slot}`,
        `decodePrestageRearm L0 s${b.slot}`,
        `decodePrestageRearm L1 s${b.slot}`,
        ...forwards('decode', 2, 1, 'eager'),
      ]);
      expect(rig.driver.graphs.describe()).toEqual({ 'decode:2:1': { kind: 'failed', reason: result.captureError } });
      expect([a.length, b.length]).toEqual([4, 3]);
      // Prestage ran once per (sequence, layer): re-arm is not a second prestage.
      expect(rig.layers[0]!.inspectState(rig.driver.stateOf(a, 0) as never)).toEqual({ length: 4, prestages: 1 });

      // The key is remembered as failed: the next step runs eagerly without a capture attempt.
      rig.log.clear();
      const next = rig.step([a, b], undefined, inputs.rows(2), inputs.tokens(2));
      expect(next.result.path).toBe('eager');
      expect(next.result.captureError).toBeUndefined();
      expect(next.output).toEqual(next.expected);
      expect(rig.log.lines()).toEqual([...prestages([a, b]), ...forwards('decode', 2, 1, 'eager')]);
      expect(rig.driver.graphs.describe()['decode:2:1']).toMatchObject({ kind: 'failed' });
    });
  });

  it('ends, over many steps, exactly where a driver that never captured ends', () => {
    const failed = withRig(failing(), (rig) => scenario(rig, 32));
    const eager = withRig({ layers: STACK, graphs: false }, (rig) => scenario(rig, 32));
    expect(failed.paths).toEqual([
      'capture-failed', 'eager', 'eager', 'capture-failed', 'eager', 'capture-failed', 'eager', 'capture-failed', 'eager', 'capture-failed', 'eager',
    ]);
    expect(failed.outputs).toEqual(eager.outputs);
    expect(failed.lengths).toEqual(eager.lengths);
    expect(failed.states).toEqual(eager.states);
  });
});

describe('hook resolution of the test layers', () => {
  it('sees every hook on the recording layer and none on the kernel layer', () => {
    const gpu = cpuBackend();
    try {
      const log = new CallLog();
      const recording = new RecordingLayer({ name: 'R', log, gpu, limits: LIMITS });
      const plain = new KernelLayer({ name: 'K', log, gpu, limits: LIMITS });
      expect(resolveHooks(recording).implemented.size).toBe(10);
      expect(resolveHooks(plain).implemented.size).toBe(0);
      const broken = Object.assign(new KernelLayer({ name: 'B', log, gpu, limits: LIMITS }), { checkReplayRoom: 5 });
      expect(() => resolveHooks(broken as never)).toThrow(/'checkReplayRoom' must be a method or absent, got number/);
      for (const l of [recording, plain, broken]) l.dispose();
    } finally {
      gpu.dispose();
    }
  });
});
