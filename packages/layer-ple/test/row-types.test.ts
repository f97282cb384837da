// The PLE layer on the model's 16-bit data path (precision.rows bf16 / f16): rows in and out of the
// row type, its GEMM weights on the device in that type, f32 accumulation. Against Hugging Face's
// model held in that dtype (test/ple-reference.ts with `rows`) through the driver with graphs;
// against the f32 path at Gemma 3n E4B's widths (D 2048, P 256); bad precisions and rows refused.
import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, SeededRandom, StepDriver, type FloatDtype, type GemmArgs, type Precision, relativeL2Error } from '@metrale/core';
import { decodeRows, encodeRows } from '@metrale/core/testing';
import { PleLayer } from '@metrale/layer-ple';
import { beforeAll, describe, expect, it } from 'vitest';
import { referenceRows, SAME_DTYPE } from './ple-reference.js';
import { runAgainstReference, SCENARIO } from './run-steps.js';
import { LIMITS, pleSetup, SMALL, type PleDims } from './ple-setup.js';

const precision = (rows: FloatDtype): Precision => ({ rows, fp8Weights: false });

describe('PLE layer with 16-bit rows against Hugging Face held in that dtype (CPU backend)', () => {
  for (const rows of ['bf16', 'f16'] as const) {
    it(`${rows}: every step of prefill, decode and verify, graphs captured and replayed`, () => {
      const setup = pleSetup(3, SMALL, { table: 'bf16', embed: 'bf16', weights: 'bf16' });
      const steps = runAgainstReference(setup, 3, SCENARIO, { precision: precision(rows) });
      console.log(`[layer-ple] ${rows} rows against HF held in ${rows}: worst step ${Math.max(...steps.map((s) => s.rel)).toExponential(2)}`);
      for (const s of steps) expect(s.rel, `${s.op} (${s.path})`).toBeLessThan(SAME_DTYPE[rows]);
      expect(steps.filter((s) => s.path === 'replay').length).toBeGreaterThanOrEqual(4);
    });
  }

  it('bf16 with an f32 checkpoint: weights, table and embedding rounded as HF rounds them in model.to(bfloat16)', () => {
    const dims = { hidden: 40, perLayer: 12, layers: 5, vocab: 30, tableVocab: 30, layerIndex: 4, eps: 1e-5 };
    const steps = runAgainstReference(pleSetup(9, dims), 3, SCENARIO, { precision: precision('bf16') });
    for (const s of steps) expect(s.rel, `${s.op} (${s.path})`).toBeLessThan(SAME_DTYPE.bf16);
  });
});

/** E4B's widths with a small vocabulary and two layers (the table's size does not matter here). */
const E4B: PleDims = { hidden: 2048, perLayer: 256, layers: 2, vocab: 64, tableVocab: 60, layerIndex: 1 };

/** Prefill then decode steps of two sequences on a fresh backend; the output rows as values, and every GEMM's arguments. */
function runLayer(rows: FloatDtype, input: (n: number) => Float32Array, tokens: (n: number) => Int32Array) {
  const setup = pleSetup(17, E4B, { table: 'bf16', embed: 'bf16', weights: 'bf16' });
  const gpu = new CpuBackend();
  const gemms: GemmArgs[] = [];
  const gemm = gpu.gemm.bind(gpu);
  gpu.gemm = (args) => (gemms.push(args), gemm(args));
  const layer = new PleLayer({ gpu, layerType: 'ple', config: setup.config, layerIndex: E4B.layerIndex, weights: setup.weights, limits: LIMITS, precision: precision(rows) });
  const liveBytes = gpu.stats().liveBytes;
  const driver = new StepDriver({ gpu, layers: [layer], limits: LIMITS });
  const seqs = [driver.open(), driver.open()];
  const outputs: Float32Array[] = [];
  const step = (r: ReturnType<StepDriver['decode']>) => outputs.push(decodeRows(driver.readOutput(r), rows));
  try {
    step(driver.prefill({ seqs, lengths: [5, 3], tokens: tokens(8), input: encodeRows(input(8), rows) }));
    for (let i = 0; i < 3; i++) step(driver.decode({ seqs, tokens: tokens(2), input: encodeRows(input(2), rows) }));
    return { outputs, gemms, liveBytes, rowBytes: [layer.inputRowBytes, layer.outputRowBytes], setup };
  } finally {
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  }
}

describe('PLE layer at the E4B widths: bf16 against f32 (CPU backend)', () => {
  // The same inputs for both: random rows already bf16 values, tokens on and past the table.
  const draws = (seed: number) => {
    const r = new SeededRandom(seed);
    const inputs: Float32Array[] = [];
    const ids: Int32Array[] = [];
    return {
      input: (n: number) => (inputs.push(decodeRows(new Uint8Array(encodeRows(r.normals(n * E4B.hidden), 'bf16').buffer), 'bf16')), inputs.at(-1)!),
      tokens: (n: number) => (ids.push(Int32Array.from({ length: n }, () => r.int(0, E4B.vocab - 1))), ids.at(-1)!),
      inputs,
      ids,
    };
  };
  const a = draws(23);
  const b = draws(23);
  let f32: ReturnType<typeof runLayer>;
  let bf16: ReturnType<typeof runLayer>;
  beforeAll(() => {
    f32 = runLayer('f32', a.input, a.tokens);
    bf16 = runLayer('bf16', b.input, b.tokens);
  });

  it('reads and writes bf16 rows, and runs every GEMM on bf16 rows and weights (f32 accumulation), none in f32', () => {
    expect(bf16.rowBytes).toEqual([2 * E4B.hidden, 2 * E4B.hidden]);
    expect(f32.rowBytes).toEqual([4 * E4B.hidden, 4 * E4B.hidden]);
    // Three per forward (the model projection, the gate, the projection): the prefill's and the decode graph's capture (replays call none).
    expect(bf16.gemms.length).toBe(6);
    for (const g of bf16.gemms) expect([g.dtype, g.outDtype ?? g.dtype, g.bDtype]).toEqual(['bf16', 'bf16', undefined]);
    for (const g of f32.gemms) expect([g.dtype, g.outDtype ?? g.dtype]).toEqual(['f32', 'f32']);
    // Three [P, D]-sized weights and the scratch in half the bytes (the embedding and the table are shared as stored).
    const P = E4B.perLayer, D = E4B.hidden;
    expect(f32.liveBytes - bf16.liveBytes).toBe(3 * P * D * 2 + LIMITS.maxRows * (D + 4 * P) * 2);
  });

  it('gives every row within bf16 tolerance of the f32 path; each path matches its reference', () => {
    expect(b.ids).toEqual(a.ids);
    let worst = 0;
    f32.outputs.forEach((want, s) => {
      const got = bf16.outputs[s]!;
      expect(relativeL2Error(want, referenceRows(f32.setup.weights, E4B, a.inputs[s]!, a.ids[s]!)), `f32 step ${s}`).toBeLessThan(1e-5);
      expect(relativeL2Error(got, referenceRows(bf16.setup.weights, E4B, b.inputs[s]!, b.ids[s]!, '', 'bf16')), `bf16 step ${s}`).toBeLessThan(SAME_DTYPE.bf16);
      expect(got.every(Number.isFinite)).toBe(true);
      for (let r = 0; r < want.length / E4B.hidden; r++) {
        const row = (x: Float32Array) => x.subarray(r * E4B.hidden, (r + 1) * E4B.hidden);
        worst = Math.max(worst, relativeL2Error(row(got), row(want)));
      }
    });
    console.log(`[layer-ple] E4B widths, bf16 against f32: worst row relative error ${worst.toExponential(2)}`);
    // About one bf16 step (2^−8 relative) over the values the path holds in bf16 (e, q, ple, g, h, y, v), not compounding.
    expect(worst).toBeLessThan(1e-2);
  });
});

describe('bad precisions and rows', () => {
  const setup = pleSetup(31);
  const create = (p: Precision) => {
    const gpu = new CpuBackend();
    try {
      return new PleLayer({ gpu, layerType: 'ple', config: setup.config, layerIndex: 1, weights: setup.weights, limits: LIMITS, precision: p });
    } finally {
      gpu.dispose();
    }
  };

  it('refuses FP8 weights and a row type other than f32, bf16 and f16, before anything is allocated', () => {
    expect(() => create({ rows: 'bf16', fp8Weights: true })).toThrow(InvalidArgumentError);
    expect(() => create({ rows: 'bf16', fp8Weights: true })).toThrow(/ple: FP8 weights are not supported for Gemma 3n's layers; load the checkpoint in bf16 \(--dtype bf16\) or f32/);
    expect(() => create({ rows: 'f64' as FloatDtype, fp8Weights: false })).toThrow(/ple: precision.rows must be f32, bf16 or f16, got f64/);
  });

  it('refuses f32 input rows for a bf16 layer, naming the row size', () => {
    const gpu = new CpuBackend();
    const layer = new PleLayer({ gpu, layerType: 'ple', config: setup.config, layerIndex: 1, weights: setup.weights, limits: LIMITS, precision: precision('bf16') });
    const driver = new StepDriver({ gpu, layers: [layer], limits: LIMITS });
    try {
      const seq = driver.open();
      expect(() => driver.decode({ seqs: [seq], tokens: Int32Array.of(3), input: new Float32Array(SMALL.hidden) })).toThrow(
        new RegExp(`1 input rows of ${2 * SMALL.hidden} bytes need ${2 * SMALL.hidden} bytes, got ${4 * SMALL.hidden}`),
      );
    } finally {
      driver.dispose();
      layer.dispose();
      gpu.dispose();
    }
  });
});
