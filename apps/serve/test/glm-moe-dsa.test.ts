import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '@metrale/cpu-backend';
import { BlockScratch, Checkpoint, DecoderBlock, SafetensorsFile, WeightsError, definePlugin, encodeSafetensors, scopeWeights, type HostTensor } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import { plugin as dsa } from '@metrale/layer-dsa';
import { MoeLayer, RmsNormLayer, glmMoeOptions, residualAdd } from '@metrale/layer-std';
import { afterAll, describe, expect, it } from 'vitest';
import { glmMlpLayerTypes } from '../src/models/index.js';
import { metrale } from './support/run-cli.js';
import { MODEL_FIXTURES, readModelFixture } from './support/model-fixtures.js';

// The glm_moe_dsa adapter (GLM-5: DSA sparse attention + MoE) over the Hugging Face fixture that
// tools/fixtures/models.py writes (HF's tokens and logits themselves: model-fixtures.test.ts).
const NAME = 'glm-moe-dsa-tiny';
const fx = readModelFixture(NAME);
const tmp = mkdtempSync(join(tmpdir(), 'metrale-glm-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface GenerateLine {
  tokens: number[];
  text: string | null;
  stats: {
    backend: string; prompt_tokens: number; generated_tokens: number; finish_reason: string;
    steps: { prefill: number; decode: number; verify: number };
    speculative: { k: number; verify_steps: number; drafted: number; accepted: number; acceptance_rate: number } | null;
  };
}

/** A copy of the fixture whose model.safetensors went through `edit` (drop or replace tensors). */
function editedCopy(name: string, edit: (tensors: HostTensor[]) => HostTensor[]): string {
  const dir = join(tmp, name);
  cpSync(fx.dir, dir, { recursive: true });
  const file = SafetensorsFile.open(join(fx.dir, 'model.safetensors'));
  const tensors = file.names().map((n) => ({ ...file.get(n), name: n }));
  file.close();
  writeFileSync(join(dir, 'model.safetensors'), encodeSafetensors(edit(tensors), { format: 'pt' }));
  return dir;
}

function refusal(dir: string): string {
  const r = metrale(['generate', '--model', dir, '--prompt-ids', '5,6,7', '--max-tokens', '2', '--backend', 'cpu', '--json']);
  expect(r.code).not.toBe(0);
  return r.stderr;
}

describe('glm_moe_dsa: which layers are dense', () => {
  it('follows mlp_layer_types, else first_k_dense_replace (HF default 3)', () => {
    expect(glmMlpLayerTypes({ num_hidden_layers: 3, mlp_layer_types: ['dense', 'sparse', 'sparse'], first_k_dense_replace: 3 })).toEqual(['dense', 'sparse', 'sparse']);
    expect(glmMlpLayerTypes({ num_hidden_layers: 4, first_k_dense_replace: 1 })).toEqual(['dense', 'sparse', 'sparse', 'sparse']);
    expect(glmMlpLayerTypes({ num_hidden_layers: 5 })).toEqual(['dense', 'dense', 'dense', 'sparse', 'sparse']);
    expect(glmMlpLayerTypes({ num_hidden_layers: 2, first_k_dense_replace: 0 })).toEqual(['sparse', 'sparse']);
  });

  it('refuses a bad field, naming it', () => {
    expect(() => glmMlpLayerTypes({ num_hidden_layers: 3, mlp_layer_types: ['dense', 'moe', 'sparse'] })).toThrow(/config\.mlp_layer_types\[1\] is "moe"/);
    expect(() => glmMlpLayerTypes({ num_hidden_layers: 3, mlp_layer_types: ['dense'] })).toThrow(WeightsError);
    expect(() => glmMlpLayerTypes({ num_hidden_layers: 3, first_k_dense_replace: -1 })).toThrow(/config\.first_k_dense_replace/);
  });
});

describe(`metrale generate --model ${NAME} (CPU)`, () => {
  it('prints one JSON line with HF\'s greedy tokens and the run\'s stats', () => {
    const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', fx.expected.prompt_ids.join(','), '--max-tokens', String(fx.expected.max_new_tokens),
      '--greedy', '--ignore-eos', '--backend', 'cpu', '--dtype', 'f32', '--json']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.lines).toHaveLength(1);
    const out = JSON.parse(r.lines[0]!) as GenerateLine;
    expect(out.tokens).toEqual(fx.expected.greedy_tokens);
    expect(out.text).toBeNull(); // the fixture has no tokenizer.json
    expect(out.stats).toMatchObject({ backend: 'cpu', prompt_tokens: 17, generated_tokens: 24, finish_reason: 'length', speculative: null });
    expect(out.stats.steps).toEqual({ prefill: 1, decode: 23, verify: 0 });
  });

  it('runs a context shorter than index_topk (every key is selected there)', () => {
    const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', '5,6,7', '--max-tokens', '3', '--greedy', '--ignore-eos', '--backend', 'cpu', '--dtype', 'f32', '--json']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect((JSON.parse(r.lines.at(-1)!) as GenerateLine).tokens).toHaveLength(3);
  });

  it('gives the same tokens with every n-gram setting, verify steps included', () => {
    for (const spec of ['ngram:k=2,min=1,adaptive=0', 'ngram:k=5,min=1,max=3,adaptive=0']) {
      const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', fx.expected.prompt_ids.join(','), '--max-tokens', String(fx.expected.max_new_tokens),
        '--greedy', '--ignore-eos', '--backend', 'cpu', '--dtype', 'f32', '--json', '--spec', spec]);
      expect(r.stderr).toBe('');
      const out = JSON.parse(r.lines.at(-1)!) as GenerateLine;
      expect(out.tokens, spec).toEqual(fx.expected.greedy_tokens);
      expect(out.stats.steps.verify, spec).toBeGreaterThan(0);
    }
  });
});

describe('glm_moe_dsa: a bad checkpoint is refused, naming the tensor and the file', () => {
  const cases: [string, (ts: HostTensor[]) => HostTensor[], RegExp][] = [
    ['missing-mla', (ts) => ts.filter((t) => t.name !== 'model.layers.1.self_attn.kv_b_proj.weight'), /missing tensor 'model\.layers\.1\.self_attn\.kv_b_proj\.weight'/],
    ['missing-indexer', (ts) => ts.filter((t) => t.name !== 'model.layers.2.self_attn.indexer.wk.weight'), /missing tensor 'model\.layers\.2\.self_attn\.indexer\.wk\.weight' .*'full' indexer layer/],
    ['missing-bias', (ts) => ts.filter((t) => t.name !== 'model.layers.1.mlp.gate.e_score_correction_bias'), /missing tensor 'model\.layers\.1\.mlp\.gate\.e_score_correction_bias'/],
    ['missing-expert', (ts) => ts.filter((t) => t.name !== 'model.layers.2.mlp.experts.3.up_proj.weight'), /missing tensor 'model\.layers\.2\.mlp\.experts\.3\.up_proj\.weight'/],
    ['missing-shared', (ts) => ts.filter((t) => t.name !== 'model.layers.2.mlp.shared_experts.down_proj.weight'), /missing tensor 'model\.layers\.2\.mlp\.shared_experts\.down_proj\.weight'/],
    ['missing-dense', (ts) => ts.filter((t) => t.name !== 'model.layers.0.mlp.up_proj.weight'), /missing tensor 'model\.layers\.0\.mlp\.up_proj\.weight'/],
    ['misshapen-mla', (ts) => ts.map((t) => (t.name === 'model.layers.1.self_attn.q_b_proj.weight' ? { ...t, shape: [t.shape[1]!, t.shape[0]!] } : t)),
      /tensor 'model\.layers\.1\.self_attn\.q_b_proj\.weight' has shape \[32, 96\], expected \[96, 32\]/],
    ['misshapen-router', (ts) => ts.map((t) => (t.name === 'model.layers.2.mlp.gate.weight' ? { ...t, shape: [t.shape[1]!, t.shape[0]!] } : t)),
      /tensor 'model\.layers\.2\.mlp\.gate\.weight' has shape \[64, 8\], expected \[8, 64\]/],
  ];
  for (const [name, edit, message] of cases) {
    it(name, () => {
      const dir = editedCopy(name, edit);
      const stderr = refusal(dir);
      expect(stderr).toMatch(message);
      expect(stderr).toContain(join(dir, 'model.safetensors'));
    });
  }
});

describe('a glm_moe_dsa decoder block (DSA attention + MoE) as one layer', () => {
  it('passes the conformance kit on the CPU backend', () => {
    const checkpoint = Checkpoint.open(join(MODEL_FIXTURES, NAME));
    const config = checkpoint.config;
    const blockPlugin = definePlugin({
      name: 'glm-moe-dsa-block', version: '0.0.0', specificationVersion: '1.0.0', layerTypes: ['block'],
      create: ({ gpu, limits }) => {
        const w = (p: string) => scopeWeights(checkpoint.weights, `model.layers.2.${p}`);
        const hidden = config.hidden_size as number;
        const eps = config.rms_norm_eps as number;
        const norm = (p: string) => new RmsNormLayer(gpu, w(p), limits, { hidden, eps, offset: 0 });
        // Layer 2 runs its own indexer (indexer_types[2] = 'full'); the kit's maxSeqLen (40) is above index_topk (12).
        const attention = dsa.create({ gpu, layerType: 'dsa', config, layerIndex: 2, weights: w('self_attn.'), limits });
        const moe = new MoeLayer(gpu, w('mlp.'), limits, glmMoeOptions(config));
        const scratch = new BlockScratch(gpu, 4 * hidden, limits.maxRows);
        return new DecoderBlock({ gpu, branches: [[norm('input_layernorm.'), attention], [norm('post_attention_layernorm.'), moe]], add: residualAdd, scratch });
      },
    });
    const report = runLayerConformance(blockPlugin, { backend: () => new CpuBackend(), config, weights: checkpoint.weights, k: 3 });
    const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(report.passed, JSON.stringify(report.checks.filter((c) => c.status === 'fail'))).toBe(true);
    for (const check of ['replay-equals-eager', 'verify-accept-equals-decode', 'rejected-rows-leave-no-trace', 'slot-reuse-starts-clean']) {
      expect(status[check], check).toBe('pass');
    }
  });
});
