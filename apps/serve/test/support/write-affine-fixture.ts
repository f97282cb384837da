// Writes a metrale-layer-fixture/1 directory for the 'affine' test plugin, with expected outputs
// computed here in float64. Tests corrupt it afterwards to check the CLI's error reports.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { encodeSafetensors, SeededRandom, tensorOf, type HostTensor } from '@metrale/core';

const IN = 6;
const OUT = 4;

interface Step {
  readonly op: 'prefill' | 'decode' | 'verify';
  readonly seqs: number[];
  readonly lengths?: number[];
  readonly k?: number;
  readonly accepted?: number[];
}

const STEPS: readonly Step[] = [
  { op: 'prefill', seqs: [0, 1], lengths: [4, 2] },
  { op: 'decode', seqs: [0, 1] },
  { op: 'verify', seqs: [0, 1], k: 3, accepted: [1, 3] },
  { op: 'decode', seqs: [1, 0] },
  { op: 'decode', seqs: [0, 1] },
];

export interface AffineFixture {
  readonly dir: string;
  readonly steps: number;
  readonly caseJson: Record<string, unknown>;
  readonly tensors: HostTensor[];
}

const made: string[] = [];

/** Removes every fixture directory written so far (call from afterAll). */
export function removeAffineFixtures(): void {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
}

export function writeAffineFixture(options: { family?: string } = {}): AffineFixture {
  const rng = new SeededRandom(3);
  const weight = rng.normals(OUT * IN, 0.5);
  const bias = rng.normals(OUT, 0.1);
  const tensors: HostTensor[] = [];
  const steps = STEPS.map((s, i) => {
    const rows = s.op === 'prefill' ? s.lengths!.reduce((a, b) => a + b, 0) : s.seqs.length * (s.k ?? 1);
    const x = rng.normals(rows * IN);
    const y = new Float32Array(rows * OUT);
    for (let r = 0; r < rows; r++) {
      for (let j = 0; j < OUT; j++) {
        let acc = bias[j]!;
        for (let c = 0; c < IN; c++) acc += weight[j * IN + c]! * x[r * IN + c]!;
        y[r * OUT + j] = acc;
      }
    }
    tensors.push(tensorOf(`step${i}.input`, x, [rows, IN]), tensorOf(`step${i}.output`, y, [rows, OUT]));
    return { ...s, input: `step${i}.input`, output: `step${i}.output` };
  });
  const caseJson = {
    format: 'metrale-layer-fixture/1',
    family: options.family ?? 'affine',
    model_type: 'test_model',
    hf_module: 'Linear',
    layer_index: 0,
    weights_prefix: 'model.layers.0.proj.',
    sequences: 2,
    steps,
    tolerance: { rel: 1e-5 },
  };
  const dir = mkdtempSync(join(tmpdir(), 'metrale-cli-'));
  made.push(dir);
  writeFileSync(join(dir, 'case.json'), JSON.stringify(caseJson, null, 1));
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ model_type: 'test_model', hidden_size: IN }));
  writeFileSync(join(dir, 'weights.safetensors'), encodeSafetensors([tensorOf('weight', weight, [OUT, IN]), tensorOf('bias', bias, [OUT])]));
  writeFileSync(join(dir, 'case.safetensors'), encodeSafetensors(tensors));
  return { dir, steps: STEPS.length, caseJson, tensors };
}

/** Rewrites case.safetensors with the tensors `edit` returns. */
export function rewriteTensors(fixture: AffineFixture, edit: (tensors: HostTensor[]) => HostTensor[]): void {
  writeFileSync(join(fixture.dir, 'case.safetensors'), encodeSafetensors(edit([...fixture.tensors])));
}
