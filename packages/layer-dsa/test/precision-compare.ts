// Compares a fixture run on the bf16 data path (or with FP8 weights) with its f32 reference row
// by row, telling rows whose top-k selection flipped from rows that only carry rounding (why:
// test/fixtures.test.ts), and runs the comparisons both the CPU and the CUDA lanes make.
import { F32_PRECISION, relativeL2Error, type GpuBackend, type LayerFixture, type Precision } from '@metrale/core';
import { expect } from 'vitest';
import { runFixtureSteps, type FixtureStepRun } from './fixture-steps.js';
import { GLM5_FP8_LINEARS, quantizeTensors, sourceOf, tensorsOf } from './fp8-weights.js';

export const BF16: Precision = { rows: 'bf16', fp8Weights: false };
export const FP8: Precision = { rows: 'bf16', fp8Weights: true };

/** Largest relative L2 error of a row whose selection matches f32's (measured worst: see the printed lines). */
export const ROW_BOUND = 3e-2;
/** Largest relative L2 error of a whole step when no row of it flipped. */
export const STEP_BOUND = 1.5e-2;
/** A flipped row attends over other tokens: only sanity (finite, same scale) is checked. */
export const FLIPPED_ROW_BOUND = 1;

export interface Comparison {
  readonly worstStep: number;
  readonly worstRow: number;
  readonly flipped: number;
  readonly rows: number;
  readonly worstFlippedRow: number;
}

export function compare(fixture: LayerFixture, run: readonly FixtureStepRun[], expected: readonly Float32Array[], reference: readonly FixtureStepRun[]): Comparison {
  const width = fixture.outputWidth;
  let worstStep = 0;
  let worstRow = 0;
  let worstFlippedRow = 0;
  let flipped = 0;
  let rows = 0;
  run.forEach((step, i) => {
    let stepFlipped = false;
    for (let r = 0; r < step.selections.length; r++) {
      const got = step.output.subarray(r * width, (r + 1) * width);
      const want = expected[i]!.subarray(r * width, (r + 1) * width);
      const rel = relativeL2Error(got, want);
      rows++;
      if (step.selections[r]!.join() === reference[i]!.selections[r]!.join()) {
        worstRow = Math.max(worstRow, rel);
      } else {
        flipped++;
        stepFlipped = true;
        worstFlippedRow = Math.max(worstFlippedRow, rel);
      }
    }
    if (!stepFlipped) worstStep = Math.max(worstStep, relativeL2Error(step.output, expected[i]!));
  });
  return { worstStep, worstRow, flipped, rows, worstFlippedRow };
}

export function report(name: string, what: string, c: Comparison): void {
  console.log(JSON.stringify({
    fixture: name, run: what, worst_step_rel: c.worstStep, worst_row_rel: c.worstRow, flipped_rows: c.flipped, rows: c.rows,
    worst_flipped_row_rel: c.worstFlippedRow,
  }));
}

export function expectWithin(c: Comparison): void {
  expect(c.worstRow).toBeLessThanOrEqual(ROW_BOUND);
  expect(c.worstStep).toBeLessThanOrEqual(STEP_BOUND);
  expect(c.worstFlippedRow).toBeLessThanOrEqual(FLIPPED_ROW_BOUND);
  // A flip needs a near-tie that bf16 rounding crosses: a few rows per fixture at most.
  expect(c.flipped).toBeLessThanOrEqual(Math.ceil(0.05 * c.rows));
}

/**
 * The fixture on `backend()` in f32 (checked against HF at its own tolerance), in bf16 (against
 * HF), and with FP8 weights (against f32 on the dequantized weights; and, for information, against
 * HF); every comparison printed, the first two held to the bounds above.
 */
export function checkPrecisions(fixture: LayerFixture, name: string, backend: () => GpuBackend, label: string): void {
  const run = (precision: Precision, tensors?: ReturnType<typeof tensorsOf>) => {
    const gpu = backend();
    try {
      return runFixtureSteps(fixture, gpu, { precision, ...(tensors ? { weights: sourceOf(tensors, `${name} weights`) } : {}) });
    } finally {
      gpu.dispose();
    }
  };
  const f32 = run(F32_PRECISION);
  // The f32 path is the reference path: it matches HF (and so selects as HF does).
  f32.forEach((s, i) => expect(relativeL2Error(s.output, fixture.steps[i]!.expected)).toBeLessThanOrEqual(fixture.tolerance.rel));

  const bf16 = compare(fixture, run(BF16), fixture.steps.map((s) => s.expected), f32);
  report(name, `${label} bf16 rows vs HF f32`, bf16);
  expectWithin(bf16);

  const { fp8, dequantized } = quantizeTensors(tensorsOf(fixture.weights), GLM5_FP8_LINEARS.filter((n) => fixture.weights.has(n)));
  const ref = run(F32_PRECISION, dequantized);
  const fp8Run = run(FP8, fp8);
  const quantized = compare(fixture, fp8Run, ref.map((s) => s.output), ref);
  report(name, `${label} fp8 weights + bf16 rows vs f32 on the dequantized weights`, quantized);
  expectWithin(quantized);
  // What the quantization itself costs against HF's f32 weights (information: the checkpoint decides it, not the layer).
  report(name, `${label} fp8 weights + bf16 rows vs HF f32 (weight quantization included)`, compare(fixture, fp8Run, fixture.steps.map((s) => s.expected), f32));
}
