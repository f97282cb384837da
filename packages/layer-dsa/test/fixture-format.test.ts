// A fixture written in the generator's format from the float64 reference (instead of from
// transformers), run through core's reader and runner: the plugin, the format and the runner's
// limits line up before any real golden fixture exists. The real ones come from tools/fixtures/dsa.py.
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PluginRegistry, SeededRandom, encodeSafetensors, readLayerFixture, runLayerFixture, tensorOf, type HostTensor } from '@metrale/core';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin from '@metrale/layer-dsa';
import { afterAll, describe, expect, it } from 'vitest';
import { DsaReference } from './dsa-reference.js';
import { configOf, GLM5, GLM53, randomRows, randomWeights, type Shape } from './dsa-setup.js';

const work = mkdtempSync(join(tmpdir(), 'dsa-fixture-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

type Step = { op: 'prefill'; seqs: number[]; lengths: number[] } | { op: 'decode'; seqs: number[] } | { op: 'verify'; seqs: number[]; k: number; accepted: number[] };

function writeFixture(name: string, shape: Shape, seed: number, steps: Step[]): string {
  const dir = join(work, name);
  mkdirSync(dir);
  const { tensors, ref } = randomWeights(shape, seed);
  const reference = new DsaReference(shape, ref, { mlaEps: 1e-6 });
  // HF's config as to_dict writes it (no metrale_* keys: the layer's defaults, bf16 indexer keys).
  const config = configOf(shape);
  delete config.metrale_indexer_cache_dtype;
  const rnd = new SeededRandom(seed);
  const history: Float64Array[][] = [[], [], []];
  const caseTensors: HostTensor[] = [];
  let minGap = Infinity;
  const stepsJson = steps.map((step, index) => {
    const counts = step.op === 'prefill' ? step.lengths : step.seqs.map(() => (step.op === 'verify' ? step.k : 1));
    const rows = step.seqs.map((_, i) => randomRows(rnd, counts[i]!, shape.hidden).map((r) => Float64Array.from(r, Math.fround)));
    const out: Float64Array[] = [];
    step.seqs.forEach((s, i) => {
      const r = new DsaReference(shape, ref, { mlaEps: 1e-6, keyStorage: 'bf16' }).run([...history[s]!, ...rows[i]!]);
      minGap = Math.min(minGap, r.minRelGap);
      out.push(...reference.run([...history[s]!, ...rows[i]!]).out.slice(-counts[i]!));
      history[s]!.push(...rows[i]!.slice(0, step.op === 'verify' ? step.accepted[i]! : counts[i]!));
    });
    const n = counts.reduce((a, b) => a + b, 0);
    caseTensors.push(tensorOf(`step${index}.input`, Float32Array.from(rows.flat().flatMap((r) => [...r])), [n, shape.hidden]));
    caseTensors.push(tensorOf(`step${index}.output`, Float32Array.from(out.flatMap((r) => [...r])), [n, shape.hidden]));
    return { ...step, input: `step${index}.input`, output: `step${index}.output` };
  });
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  writeFileSync(join(dir, 'weights.safetensors'), encodeSafetensors(tensors));
  writeFileSync(join(dir, 'case.safetensors'), encodeSafetensors(caseTensors));
  writeFileSync(join(dir, 'case.json'), JSON.stringify({
    format: 'metrale-layer-fixture/1', family: 'dsa', model_type: config.model_type, hf_module: 'reference', layer_index: 0,
    weights_prefix: 'model.layers.0.self_attn.', sequences: 3, steps: stepsJson, tolerance: { rel: 1e-4 }, min_topk_gap: minGap,
  }));
  return dir;
}

const STEPS: Step[] = [
  { op: 'prefill', seqs: [0, 1, 2], lengths: [18, 2, 9] },
  { op: 'decode', seqs: [0, 1, 2] },
  { op: 'verify', seqs: [0, 1, 2], k: 4, accepted: [0, 4, 2] },
  { op: 'decode', seqs: [2, 0, 1] },
  { op: 'verify', seqs: [2, 0], k: 4, accepted: [1, 3] },
  { op: 'decode', seqs: [0, 1, 2] },
];

describe('a fixture in the generator’s format runs through core’s runner', () => {
  for (const [name, shape, seed] of [['glm5-like', GLM5, 51], ['glm53-like', GLM53, 52]] as const) {
    it(`${name}: every step passes at 1e-4, decode and verify replayed`, () => {
      const fixture = readLayerFixture(writeFixture(name, shape, seed, STEPS));
      expect(fixture.minTopkGap).toBeGreaterThan(1e-4);
      const registry = new PluginRegistry();
      registry.register(plugin);
      const gpu = new CpuBackend();
      try {
        const report = runLayerFixture(fixture, { registry, gpu });
        expect(report.pass, JSON.stringify(report.steps)).toBe(true);
        expect(report.worstRel).toBeLessThan(1e-5);
        expect(report.steps.filter((s) => s.path === 'replay').length).toBeGreaterThan(0);
      } finally {
        gpu.dispose();
      }
    });
  }
});
