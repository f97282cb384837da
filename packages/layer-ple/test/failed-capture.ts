// A run of steps with a capture made to fail in the middle (on a step with misses), recording
// outputs, slot-cache counters and host → device bytes after every step; shared by the CPU tests
// (test/prestage.test.ts) and the CUDA lane (test/gpu/conformance.gpu.test.ts).
import { CpuBackend } from '@metrale/cpu-backend';
import { SeededRandom, StepDriver, type GpuBackend, type LayerLimits, type Sequence, type TransformerLayer, relativeL2Error } from '@metrale/core';
import { PleLayer, plePlugin, type PleCacheStats, type PleState } from '@metrale/layer-ple';
import { faultInjectingBackend, type FaultCounts } from '@metrale/core/testing';
import { expect } from 'vitest';
import { referenceRows } from './ple-reference.js';
import { LIMITS, type PleSetup } from './ple-setup.js';

/** Broken on purpose: re-arming stages the sequence's tokens again (a second LRU pass, maybe a second upload). */
export class RearmRestagesLayer extends PleLayer {
  readonly #last = new Map<PleState, Int32Array>();
  override decodePrestage(tokens: Int32Array, state: PleState, gpu: GpuBackend, stream: Parameters<PleLayer['decodePrestage']>[3]): void {
    this.#last.set(state, tokens.slice());
    super.decodePrestage(tokens, state, gpu, stream);
  }
  override decodePrestageRearm(state: PleState): void {
    state.seen = this.cache.roundOf(state.slot); // pretend no layer staged this step yet
    this.cache.prestage(state, this.#last.get(state)!, this.#stream!);
  }
  #stream: Parameters<PleLayer['decodePrestage']>[3] | undefined;
  override forward(step: Parameters<PleLayer['forward']>[0]): void {
    this.#stream = step.stream;
    super.forward(step);
  }
}

export type Step =
  | { op: 'prefill'; seqs: number[]; lengths: number[]; tokens: number[] }
  | { op: 'decode'; seqs: number[]; tokens: number[] }
  | { op: 'verify'; seqs: number[]; k: number; accepted: number[]; tokens: number[] };

export interface Recorded {
  path: string;
  output: Float32Array;
  stats: PleCacheStats;
  bytes: number;
}

/** Runs `steps` with one layer; `failAt` makes the capture of that step fail. */
export function run(setup: PleSetup, steps: Step[], opts: { graphs: boolean; failAt?: number; broken?: boolean; capacity?: number; limits?: LayerLimits; backend?: () => GpuBackend; tolerance?: number }): { records: Recorded[]; counts: FaultCounts } {
  const inner = (opts.backend ?? (() => new CpuBackend()))();
  // Fail the next capture: set before each step, cleared once a capture has failed.
  let failNextCapture = false;
  const { gpu, counts } = faultInjectingBackend(inner, {
    failCaptures: () => {
      const fail = failNextCapture;
      failNextCapture = false;
      return fail;
    },
  });
  const limits = opts.limits ?? LIMITS;
  const layer = opts.broken
    ? new RearmRestagesLayer({ gpu, layerType: 'ple', config: setup.config, layerIndex: setup.layerIndex, weights: setup.weights, limits }, { slotCapacity: opts.capacity })
    : (plePlugin({ slotCapacity: opts.capacity }).create({ gpu, layerType: 'ple', config: setup.config, layerIndex: setup.layerIndex, weights: setup.weights, limits }) as PleLayer);
  const driver = new StepDriver({ gpu, layers: [layer as TransformerLayer], limits, graphs: opts.graphs });
  const random = new SeededRandom(99);
  const seqs: Sequence[] = [driver.open(), driver.open(), driver.open()];
  const records: Recorded[] = [];
  try {
    steps.forEach((step, i) => {
      const tokens = Int32Array.from(step.tokens);
      const input = random.normals(tokens.length * setup.dims.hidden);
      failNextCapture = opts.failAt === i;
      const base = { seqs: step.seqs.map((s) => seqs[s]!), tokens, input };
      const r = step.op === 'prefill' ? driver.prefill({ ...base, lengths: step.lengths }) : step.op === 'decode' ? driver.decode(base) : driver.verify({ ...base, k: step.k });
      const output = driver.readOutputF32(r);
      if (step.op === 'verify') driver.accept(step.accepted);
      const expected = referenceRows(setup.weights, setup.dims, input, tokens);
      expect(relativeL2Error(output, expected), `step ${i}`).toBeLessThan(opts.tolerance ?? 1e-5);
      records.push({ path: r.path, output, stats: layer.stats(), bytes: counts.hostToDeviceBytes });
    });
  } finally {
    driver.dispose();
    layer.dispose();
    inner.dispose();
  }
  return { records, counts };
}

// Three sequences; the verify at index 5 brings 6 tokens never seen before (misses) plus repeats.
export const STEPS: Step[] = [
  { op: 'prefill', seqs: [0, 1, 2], lengths: [3, 4, 2], tokens: [1, 2, 3, 1, 4, 5, 2, 6, 1] },
  { op: 'decode', seqs: [0, 1, 2], tokens: [7, 1, 2] },
  { op: 'decode', seqs: [0, 1, 2], tokens: [3, 8, 7] },
  { op: 'decode', seqs: [0, 1, 2], tokens: [9, 9, 1] },
  { op: 'decode', seqs: [0, 1, 2], tokens: [2, 3, 4] },
  { op: 'verify', seqs: [0, 1, 2], k: 3, accepted: [1, 3, 0], tokens: [20, 21, 1, 22, 20, 23, 24, 25, 2] },
  { op: 'decode', seqs: [0, 1, 2], tokens: [21, 26, 27] },
  { op: 'verify', seqs: [0, 1, 2], k: 3, accepted: [3, 3, 3], tokens: [28, 1, 2, 29, 30, 20, 31, 7, 7] },
  { op: 'decode', seqs: [0, 1, 2], tokens: [32, 33, 1] },
];
export const FAIL_AT = 5;

