// Drives a PLE layer through the step driver and checks every step against the float64 reference.
import { CpuBackend } from '@metrale/cpu-backend';
import { F32_PRECISION, SeededRandom, StepDriver, type GpuBackend, type LayerLimits, type Precision, type Sequence, type StepPath, type TransformerLayer, type WeightSource, relativeL2Error } from '@metrale/core';
import { decodeRows, encodeRows } from '@metrale/core/testing';
import { plePlugin, type PleLayer, type PleLayerOptions } from '@metrale/layer-ple';
import { referenceRows } from './ple-reference.js';
import { LIMITS, type PleSetup } from './ple-setup.js';

export type Op =
  | { readonly op: 'prefill'; readonly seqs: readonly number[]; readonly lengths: readonly number[] }
  | { readonly op: 'decode'; readonly seqs: readonly number[] }
  | { readonly op: 'verify'; readonly seqs: readonly number[]; readonly k: number; readonly accepted: readonly number[] };

export interface StepOutcome {
  readonly op: Op['op'];
  readonly path: StepPath;
  readonly rel: number;
  readonly tokens: Int32Array;
}

export interface RunOptions {
  readonly gpu?: () => GpuBackend;
  readonly layerOptions?: PleLayerOptions;
  readonly limits?: LayerLimits;
  readonly graphs?: boolean;
  /** Token ids are drawn from this pool (repeats on purpose); default [0, vocab). */
  readonly pool?: readonly number[];
  readonly seed?: number;
  /** The weights the layer reads (default: the setup's, which the reference always reads). */
  readonly layerWeights?: WeightSource;
  /** Called after each step with the layer. */
  readonly after?: (layer: PleLayer, index: number) => void;
  /**
   * The layer's data path (default f32). With 16-bit rows the input rows are random values of that
   * type, and the reference is HF's model held in that type (referenceRows' `rows`).
   */
  readonly precision?: Precision;
}

/** Runs `ops` on `sequences` sequences; returns per-step errors against the reference. */
export function runAgainstReference(setup: PleSetup, sequences: number, ops: readonly Op[], options: RunOptions = {}): StepOutcome[] {
  const gpu = (options.gpu ?? (() => new CpuBackend()))();
  const limits = options.limits ?? LIMITS;
  const plugin = plePlugin(options.layerOptions ?? {});
  const precision = options.precision ?? F32_PRECISION;
  const rowType = precision.rows;
  const layer = plugin.create({
    gpu, layerType: 'ple', config: setup.config, layerIndex: setup.layerIndex, weights: options.layerWeights ?? setup.weights, limits, precision,
  }) as PleLayer;
  const driver = new StepDriver({ gpu, layers: [layer as TransformerLayer], limits, graphs: options.graphs ?? true });
  const random = new SeededRandom(options.seed ?? 5);
  const pool = options.pool ?? Array.from({ length: setup.dims.vocab }, (_, i) => i);
  const D = setup.dims.hidden;
  const seqs: Sequence[] = Array.from({ length: sequences }, () => driver.open());
  const out: StepOutcome[] = [];
  try {
    ops.forEach((op, index) => {
      const rows = op.op === 'prefill' ? op.lengths.reduce((a, b) => a + b, 0) : op.op === 'decode' ? op.seqs.length : op.seqs.length * op.k;
      const stored = encodeRows(random.normals(rows * D), rowType);
      // The values the layer reads: the random rows as stored in the row type.
      const input = decodeRows(new Uint8Array(stored.buffer, stored.byteOffset, stored.byteLength), rowType);
      const tokens = Int32Array.from({ length: rows }, () => pool[random.int(0, pool.length - 1)]!);
      const base = { seqs: op.seqs.map((s) => seqs[s]!), input: stored, tokens };
      const result = op.op === 'prefill' ? driver.prefill({ ...base, lengths: op.lengths }) : op.op === 'decode' ? driver.decode(base) : driver.verify({ ...base, k: op.k });
      const got = decodeRows(driver.readOutput(result), rowType);
      if (op.op === 'verify') driver.accept(op.accepted);
      const expected = referenceRows(setup.weights, setup.dims, input, tokens, '', rowType);
      out.push({ op: op.op, path: result.path, rel: relativeL2Error(got, expected), tokens });
      options.after?.(layer, index);
    });
  } finally {
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  }
  return out;
}

/** Prefill, decodes over changing batches, verifies with partial acceptance: graph keys repeat. */
export const SCENARIO: readonly Op[] = [
  { op: 'prefill', seqs: [0, 1, 2], lengths: [5, 9, 1] },
  { op: 'decode', seqs: [0, 1, 2] },
  { op: 'decode', seqs: [0, 1, 2] },
  { op: 'decode', seqs: [2, 0] },
  { op: 'verify', seqs: [0, 1, 2], k: 3, accepted: [3, 0, 1] },
  { op: 'decode', seqs: [1, 0, 2] },
  { op: 'verify', seqs: [1, 2, 0], k: 3, accepted: [1, 3, 2] },
  { op: 'decode', seqs: [0, 1, 2] },
  { op: 'decode', seqs: [0, 1, 2] },
  { op: 'verify', seqs: [0, 1, 2], k: 3, accepted: [2, 2, 2] },
];
