// Builds `metrale-layer-fixture/1` directories for tests: random inputs, expected outputs from a
// float64 reference that sees each sequence's committed history exactly as docs/fixtures.md says.
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeSafetensors, SeededRandom, tensorOf, type HostTensor } from '../../src/index.js';

export interface ScenarioStep {
  readonly op: 'prefill' | 'decode' | 'verify';
  readonly seqs: readonly number[];
  readonly lengths?: readonly number[];
  readonly k?: number;
  readonly accepted?: readonly number[];
}

export interface Row {
  readonly x: Float32Array;
  readonly token: number;
}

/** The expected output of `row`, given every earlier row of its sequence (committed ones, then this step's). */
export type Reference = (row: Row, history: readonly Row[]) => ArrayLike<number>;

export interface Scenario {
  readonly family: string;
  readonly config: Record<string, unknown>;
  readonly weights: readonly HostTensor[];
  readonly sequences: number;
  readonly steps: readonly ScenarioStep[];
  readonly inputWidth: number;
  readonly outputWidth: number;
  readonly reference: Reference;
  /** Write a `tokens` tensor per step (named in case.json). */
  readonly tokens?: boolean;
  readonly tolerance?: number;
  readonly seed?: number;
}

/** The four files' contents, editable before writing (tests corrupt them). */
export interface FixtureFiles {
  caseJson: Record<string, unknown>;
  config: Record<string, unknown>;
  weights: HostTensor[];
  tensors: HostTensor[];
}

export function scenarioFiles(s: Scenario): FixtureFiles {
  const rng = new SeededRandom(s.seed ?? 7);
  const history: Row[][] = Array.from({ length: s.sequences }, () => []);
  const tensors: HostTensor[] = [];
  const steps = s.steps.map((step, i) => {
    const perSeq = step.op === 'prefill' ? step.lengths! : step.seqs.map(() => (step.op === 'decode' ? 1 : step.k!));
    const rows = perSeq.reduce((a, b) => a + b, 0);
    const input = new Float32Array(rows * s.inputWidth);
    const expected = new Float32Array(rows * s.outputWidth);
    const tokens = new Int32Array(rows);
    let r = 0;
    step.seqs.forEach((seq, j) => {
      const seen = [...history[seq]!];
      const stepRows: Row[] = [];
      for (let t = 0; t < perSeq[j]!; t++, r++) {
        const x = rng.normals(s.inputWidth);
        const token = rng.int(0, 50);
        input.set(x, r * s.inputWidth);
        tokens[r] = token;
        const row = { x, token };
        expected.set(Float32Array.from(s.reference(row, seen)), r * s.outputWidth);
        seen.push(row);
        stepRows.push(row);
      }
      const keep = step.op === 'verify' ? step.accepted![j]! : stepRows.length;
      history[seq]!.push(...stepRows.slice(0, keep));
    });
    tensors.push(tensorOf(`step${i}.input`, input, [rows, s.inputWidth]), tensorOf(`step${i}.output`, expected, [rows, s.outputWidth]));
    if (s.tokens) tensors.push(tensorOf(`step${i}.tokens`, tokens, [rows]));
    return {
      ...step,
      input: `step${i}.input`,
      output: `step${i}.output`,
      ...(s.tokens ? { tokens: `step${i}.tokens` } : {}),
    };
  });
  return {
    caseJson: {
      format: 'metrale-layer-fixture/1',
      family: s.family,
      model_type: 'test_model',
      hf_module: 'TestModule',
      layer_index: 0,
      weights_prefix: 'model.layers.0.test.',
      sequences: s.sequences,
      steps,
      tolerance: { rel: s.tolerance ?? 1e-5 },
    },
    config: s.config,
    weights: [...s.weights],
    tensors,
  };
}

export function writeFixture(dir: string, files: FixtureFiles): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'case.json'), JSON.stringify(files.caseJson, null, 1));
  writeFileSync(join(dir, 'config.json'), JSON.stringify(files.config, null, 1));
  writeFileSync(join(dir, 'weights.safetensors'), encodeSafetensors(files.weights));
  writeFileSync(join(dir, 'case.safetensors'), encodeSafetensors(files.tensors));
  return dir;
}

const made: string[] = [];

export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), `metrale-${prefix}-`));
  made.push(dir);
  return dir;
}

/** Removes every directory `tempDir` made (call from afterAll). */
export function removeTempDirs(): void {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
}

// ---- the two test layers' scenarios ----

export const MIXED_STEPS: readonly ScenarioStep[] = [
  { op: 'prefill', seqs: [0, 1, 2], lengths: [5, 9, 1] },
  { op: 'decode', seqs: [0, 1, 2] },
  { op: 'verify', seqs: [0, 1, 2], k: 4, accepted: [0, 4, 2] },
  { op: 'decode', seqs: [2, 0] },
  { op: 'verify', seqs: [1, 2], k: 3, accepted: [1, 3] },
  { op: 'decode', seqs: [0, 1, 2] },
  { op: 'prefill', seqs: [1], lengths: [3] },
  { op: 'decode', seqs: [0, 1, 2] },
];

export function affineScenario(options: { inDim?: number; outDim?: number; tokenScale?: number; rowDtype?: 'bf16'; steps?: readonly ScenarioStep[] } = {}): Scenario {
  const inDim = options.inDim ?? 6;
  const outDim = options.outDim ?? 5;
  const rng = new SeededRandom(11);
  const weight = rng.normals(outDim * inDim, 0.5);
  const bias = rng.normals(outDim, 0.1);
  const tokenScale = options.tokenScale ?? 0;
  return {
    family: 'affine',
    config: { model_type: 'test_model', hidden_size: inDim, token_scale: tokenScale, ...(options.rowDtype ? { row_dtype: options.rowDtype } : {}) },
    weights: [tensorOf('weight', weight, [outDim, inDim]), tensorOf('bias', bias, [outDim])],
    sequences: 3,
    steps: options.steps ?? MIXED_STEPS,
    inputWidth: inDim,
    outputWidth: outDim,
    tokens: tokenScale !== 0,
    reference: ({ x, token }) => {
      const out = new Float64Array(outDim);
      for (let j = 0; j < outDim; j++) {
        let acc = bias[j]! + tokenScale * token;
        for (let i = 0; i < inDim; i++) acc += weight[j * inDim + i]! * x[i]!;
        out[j] = acc;
      }
      return out;
    },
  };
}

export function runningSumScenario(options: { width?: number; leaky?: boolean; sequences?: number; steps?: readonly ScenarioStep[] } = {}): Scenario {
  const width = options.width ?? 4;
  return {
    family: 'running-sum',
    config: { model_type: 'test_model', hidden_size: width, ...(options.leaky ? { leaky: true } : {}) },
    weights: [tensorOf('unused', new Float32Array([0]), [1])],
    sequences: options.sequences ?? 3,
    steps: options.steps ?? MIXED_STEPS,
    inputWidth: width,
    outputWidth: width,
    reference: (row, history) => {
      const out = new Float64Array(width);
      for (const h of [...history, row]) for (let c = 0; c < width; c++) out[c]! += h.x[c]!;
      return out;
    },
  };
}
