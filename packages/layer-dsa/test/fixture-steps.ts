// Runs a golden fixture's steps through one DSA layer in a given precision and returns what core's
// runner does not: every step's output rows (f32 values) and each row's selected tokens, so a bf16
// or fp8 run can be compared with the f32 one row by row, telling rows whose top-k selection
// flipped from rows that only carry rounding. Steps run as runLayerFixture runs them (graphs on,
// write-on-accept; rows converted to the layer's row type).
import {
  StepDriver, fixtureLimits, fromBf16, toBf16, type GpuBackend, type LayerFixture, type Precision, type Sequence, type StepResult,
  type WeightSource,
} from '@metrale/core';
import { DsaLayer } from '@metrale/layer-dsa';

export interface FixtureStepRun {
  /** rows × outputWidth. */
  readonly output: Float32Array;
  /** Per row of the step: its selected token positions, ascending. */
  readonly selections: readonly (readonly number[])[];
}

export interface FixtureRunOptions {
  readonly precision: Precision;
  /** The layer's tensors (default: the fixture's). */
  readonly weights?: WeightSource;
  /** Extra config fields (e.g. a cache type). */
  readonly config?: Record<string, unknown>;
}

export function runFixtureSteps(fixture: LayerFixture, gpu: GpuBackend, options: FixtureRunOptions): FixtureStepRun[] {
  const limits = fixtureLimits(fixture);
  const layer = new DsaLayer({
    gpu, layerType: 'dsa', config: { ...fixture.config, ...options.config }, layerIndex: fixture.layerIndex,
    weights: options.weights ?? fixture.weights, limits, precision: options.precision,
  });
  const driver = new StepDriver({ gpu, layers: [layer], limits, graphs: true, speculation: 'write-on-accept' });
  const bf16 = options.precision.rows === 'bf16';
  if (!bf16 && options.precision.rows !== 'f32') throw new Error(`runFixtureSteps: rows of ${options.precision.rows} are not a fixture row format`);
  const encode = (v: Float32Array) => (bf16 ? toBf16(v) : v);
  const decode = (bytes: Uint8Array): Float32Array => {
    const copy = bytes.slice();
    return bf16 ? fromBf16(new Uint16Array(copy.buffer)) : new Float32Array(copy.buffer);
  };
  const { sel, selCount, selWidth } = layer.debugBuffers();
  const readSelections = (rows: number): number[][] => {
    const counts = new Int32Array(gpu.download(selCount, 4 * rows).slice().buffer);
    const all = new Int32Array(gpu.download(sel, 4 * rows * selWidth).slice().buffer);
    return Array.from({ length: rows }, (_, r) => Array.from(all.subarray(r * selWidth, r * selWidth + counts[r]!)));
  };
  const width = fixture.outputWidth;
  const open: Sequence[] = [];
  try {
    for (let i = 0; i < fixture.sequences; i++) open.push(driver.open());
    return fixture.steps.map((step) => {
      const seqs = step.seqs.map((s) => open[s]!);
      const input = encode(step.input);
      const output = new Float32Array(step.rows * width);
      const selections: number[][] = [];
      const take = (result: StepResult, firstRow: number): void => {
        const rows = decode(driver.readOutput(result));
        output.set(rows, firstRow * width);
        selections.push(...readSelections(rows.length / width));
      };
      if (step.op === 'prefill') {
        driver.prefill({ seqs, lengths: step.lengths!, input }, take);
      } else {
        const result = step.op === 'decode' ? driver.decode({ seqs, input }) : driver.verify({ seqs, input, k: step.k! });
        take(result, 0);
        if (step.op === 'verify') driver.accept(step.accepted!);
      }
      return { output, selections };
    });
  } finally {
    for (const seq of open) driver.close(seq);
    driver.dispose();
    layer.dispose();
  }
}
