// The fixture path end to end without PyTorch: a fixture directory laid out exactly as
// tools/fixtures/ple.py writes it (case.json with per-step `tokens`, f32 weights without the
// `model.language_model.` prefix, int32 token tensors), with expected rows from the float64
// reference, read by core's reader and run by core's runner. A wrong expected row must fail it.
// METRALE_PLE_SYNTHETIC_DIR=/dir keeps the written fixtures there (for `metrale check-layer`).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PluginRegistry, SeededRandom, encodeSafetensors, readLayerFixture, runLayerFixture, tensorOf, type HostTensor } from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin from '@metrale/layer-ple';
import { afterAll, describe, expect, it } from 'vitest';
import { referenceRows } from './ple-reference.js';
import { pleSetup } from './ple-setup.js';

const keep = process.env.METRALE_PLE_SYNTHETIC_DIR;
const root = keep ? (mkdirSync(keep, { recursive: true }), mkdtempSync(join(keep, 'synthetic-'))) : mkdtempSync(join(tmpdir(), 'metrale-ple-fixture-'));
afterAll(() => {
  if (!keep) rmSync(root, { recursive: true, force: true });
});

type Step = { op: 'prefill'; seqs: number[]; lengths: number[] } | { op: 'decode'; seqs: number[] } | { op: 'verify'; seqs: number[]; k: number; accepted: number[] };

function writeFixture(name: string, corrupt = false): string {
  const dims = { hidden: 24, perLayer: 8, layers: 3, vocab: 40, tableVocab: 32, layerIndex: 2 };
  const setup = pleSetup(51, dims);
  const steps: Step[] = [
    { op: 'prefill', seqs: [0, 1], lengths: [4, 6] },
    { op: 'decode', seqs: [0, 1] },
    { op: 'verify', seqs: [1, 0], k: 3, accepted: [2, 0] },
    { op: 'decode', seqs: [0, 1] },
    { op: 'decode', seqs: [1, 0] },
  ];
  const random = new SeededRandom(52);
  const pool = [0, 3, 31, 32, 39, 7, 7, 12, 3];
  const tensors: HostTensor[] = [];
  const caseSteps = steps.map((step, i) => {
    const rows = step.op === 'prefill' ? step.lengths.reduce((a, b) => a + b, 0) : step.op === 'decode' ? step.seqs.length : step.seqs.length * step.k;
    const input = random.normals(rows * dims.hidden);
    const tokens = Int32Array.from({ length: rows }, () => pool[random.int(0, pool.length - 1)]!);
    const expected = Float32Array.from(referenceRows(setup.weights, dims, input, tokens));
    if (corrupt && i === 3) expected[5] = expected[5]! + 1;
    tensors.push(tensorOf(`step${i}.input`, input, [rows, dims.hidden]), tensorOf(`step${i}.output`, expected, [rows, dims.hidden]), tensorOf(`step${i}.tokens`, tokens, [rows]));
    return { ...step, input: `step${i}.input`, output: `step${i}.output`, tokens: `step${i}.tokens` };
  });
  const dir = join(root, name);
  mkdirSync(dir);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(setup.config));
  writeFileSync(join(dir, 'weights.safetensors'), encodeSafetensors(setup.tensors));
  writeFileSync(join(dir, 'case.safetensors'), encodeSafetensors(tensors));
  writeFileSync(
    join(dir, 'case.json'),
    JSON.stringify({
      format: 'metrale-layer-fixture/1', family: 'ple', model_type: 'gemma3n_text', hf_module: 'Gemma3nTextModel', layer_index: 2,
      weights_prefix: 'model.language_model.', sequences: 2, steps: caseSteps, tolerance: { rel: 1e-4 },
    }),
  );
  return dir;
}

describe('a fixture in the layout tools/fixtures/ple.py writes', () => {
  it('passes through core\'s reader and runner on the CPU backend, with replays', () => {
    const fixture = readLayerFixture(writeFixture('good'));
    const registry = new PluginRegistry();
    registry.register(plugin);
    const gpu = new CpuBackend();
    const report = runLayerFixture(fixture, { registry, gpu });
    gpu.dispose();
    expect(report.pass).toBe(true);
    expect(report.worstRel).toBeLessThan(1e-6);
    expect(report.steps.map((s) => s.path)).toEqual(['prefill', 'capture', 'capture', 'replay', 'replay']);
  });

  it('fails on a wrong expected row', () => {
    const fixture = readLayerFixture(writeFixture('bad', true));
    const registry = new PluginRegistry();
    registry.register(plugin);
    const gpu = new CpuBackend();
    const report = runLayerFixture(fixture, { registry, gpu });
    gpu.dispose();
    expect(report.pass).toBe(false);
    expect(report.steps.filter((s) => !s.pass).map((s) => s.step)).toEqual([3]);
  });
});
