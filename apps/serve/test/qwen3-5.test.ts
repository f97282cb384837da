import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CpuBackend } from '@metrale/cpu-backend';
import { Checkpoint, ArchitectureRegistry, F32_PRECISION, WeightsError, checkModelFits, loadModel, type LayerLimits, type WeightSource } from '@metrale/core';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveModel, type EngineSetup } from '../src/engine/build-engine.js';
import { qwen35LayerTypes, qwen35TextConfig, qwen35UnreadTensor, registerModels, textConfigOf } from '../src/models/index.js';
import { qwen35ShardRule } from '../src/models/qwen3-5-sharding.js';
import { loadRegistry } from '../src/plugins/load-registry.js';
import { metrale } from './support/run-cli.js';
import { readModelFixture, readPromptLogits, worstRowRel } from './support/model-fixtures.js';
import { writeTinyQwen35, type TinyQwen35Options } from './support/tiny-qwen3-5.js';

// The Qwen3.5 adapters (qwen3_5, qwen3_5_moe as published; qwen3_5_text, qwen3_5_moe_text) on tiny
// random checkpoints converted from qwen3_next ones with the same math (support/tiny-qwen3-5.ts):
// each must give the qwen3_next twin's tokens and logits, read its config from text_config, and
// never touch the vision tower or the MTP layer (written as NaN). HF's own tokens and logits:
// the fixtures of tools/fixtures/models.py, through model-fixtures.test.ts and model-precision.
const tmp = mkdtempSync(join(tmpdir(), 'metrale-qwen35-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const registry = registerModels(new ArchitectureRegistry());
const LIMITS: LayerLimits = { maxSeqs: 2, maxBatch: 2, maxK: 1, maxSeqLen: 64, maxRows: 16 };

let made = 0;
/** A Qwen3.5 checkpoint and its qwen3_next twin, in fresh directories. */
function model(options: TinyQwen35Options): { dir: string; reference: string; config: Record<string, unknown> } {
  const dir = join(tmp, `qwen35-${made}`);
  const reference = join(tmp, `next-${made++}`);
  return { dir, reference, config: writeTinyQwen35(dir, reference, options) };
}

/** A view of `source` that records every tensor read and refuses the ones the model must never read. */
function spying(source: WeightSource): { weights: WeightSource; read: Set<string> } {
  const read = new Set<string>();
  const touch = (name: string) => {
    if (qwen35UnreadTensor(name)) throw new Error(`the model read '${name}', which it must skip`);
    read.add(name);
  };
  return {
    read,
    weights: {
      origin: source.origin,
      names: () => source.names(),
      has: (n) => source.has(n),
      get: (n) => (touch(n), source.get(n)),
      fileOf: (n) => source.fileOf?.(n),
      info: (n) => (touch(n), source.info!(n)),
      readRange: (n, offset, bytes, into) => (touch(n), source.readRange!(n, offset, bytes, into)),
    },
  };
}

function build(dir: string) {
  const checkpoint = Checkpoint.open(dir);
  const adapter = registry.forConfig(checkpoint.config);
  const gpu = new CpuBackend();
  const spy = spying(checkpoint.weights);
  try {
    const stack = adapter.build({ gpu, config: checkpoint.config, weights: spy.weights, limits: LIMITS, precision: F32_PRECISION });
    stack.dispose();
    return { read: spy.read, names: checkpoint.weights.names(), checkpoint, adapter };
  } finally {
    gpu.dispose();
    checkpoint.close();
  }
}

interface Line { tokens: number[]; notice?: string; stats: { speculative: { accepted: number; drafted: number } | null } }

const PROMPT = [5, 17, 9, 3, 5, 17, 9, 3, 42, 7, 5, 17, 9];

function generate(dir: string, extra: string[] = []): Line & { logits: Float32Array } {
  const file = join(tmp, `logits-${Math.random().toString(36).slice(2)}.safetensors`);
  const r = metrale(['generate', '--model', dir, '--prompt-ids', PROMPT.join(','), '--max-tokens', '16', '--greedy', '--ignore-eos', '--backend', 'cpu',
    '--dtype', 'f32', '--json', '--prompt-logits', file, ...extra]);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return { ...(JSON.parse(r.lines.at(-1)!) as Line), logits: readPromptLogits(file) };
}

describe('qwen3_5 configs: the text model from text_config, checked', () => {
  const vl = { model_type: 'qwen3_5', tie_word_embeddings: true, text_config: { model_type: 'qwen3_5_text', hidden_size: 8, vocab_size: 10, eos_token_id: 3, tie_word_embeddings: false, max_position_embeddings: 99 }, vision_config: {} };

  it('flattens a vision-language config: text fields from text_config, tie_word_embeddings from the top level', () => {
    expect(textConfigOf(vl)).toMatchObject({ model_type: 'qwen3_5_text', hidden_size: 8, vocab_size: 10, eos_token_id: 3, tie_word_embeddings: true, max_position_embeddings: 99 });
    // HF's Qwen3_5Config default: untied, whatever text_config says.
    expect(textConfigOf({ ...vl, tie_word_embeddings: undefined }).tie_word_embeddings).toBe(false);
    const flat = { model_type: 'qwen3_5_text', hidden_size: 8 };
    expect(textConfigOf(flat)).toBe(flat);
  });

  it('takes layer_types, else every full_attention_interval-th layer (default 4) full attention', () => {
    expect(qwen35LayerTypes({ num_hidden_layers: 8 })).toEqual(['linear_attention', 'linear_attention', 'linear_attention', 'full_attention', 'linear_attention', 'linear_attention', 'linear_attention', 'full_attention']);
    expect(qwen35LayerTypes({ num_hidden_layers: 4, full_attention_interval: 2 })).toEqual(['linear_attention', 'full_attention', 'linear_attention', 'full_attention']);
    expect(qwen35LayerTypes({ num_hidden_layers: 2, layer_types: ['full_attention', 'linear_attention'] })).toEqual(['full_attention', 'linear_attention']);
    expect(() => qwen35LayerTypes({ num_hidden_layers: 2, layer_types: ['full_attention', 'sliding_attention'] }, 'config.text_config')).toThrow(/config\.text_config\.layer_types\[1\] is "sliding_attention"/);
    expect(() => qwen35LayerTypes({ num_hidden_layers: 3, layer_types: ['full_attention'] })).toThrow(/one of .* per layer \(num_hidden_layers 3\)/);
  });

  it('refuses a config missing a size, naming the field where it belongs (text_config for the published layout)', () => {
    const dense = model({ family: 'dense', layout: 'vision-language' }).config;
    expect(qwen35TextConfig(dense, 'dense')).toMatchObject({ hidden_size: 32, layer_types: ['linear_attention', 'full_attention', 'linear_attention', 'full_attention'] });
    const without = (c: Record<string, unknown>, field: string) => ({ ...c, text_config: { ...(c.text_config as object), [field]: undefined } });
    expect(() => qwen35TextConfig(without(dense, 'hidden_size'), 'dense')).toThrow(WeightsError);
    expect(() => qwen35TextConfig(without(dense, 'hidden_size'), 'dense')).toThrow(/^config\.text_config\.hidden_size is missing; a qwen3_5 checkpoint's config\.json must give it/);
    expect(() => qwen35TextConfig(without(dense, 'intermediate_size'), 'dense')).toThrow(/config\.text_config\.intermediate_size is missing/);
    expect(() => qwen35TextConfig(without(dense, 'linear_num_value_heads'), 'dense')).toThrow(/config\.text_config\.linear_num_value_heads is missing/);
    expect(() => qwen35TextConfig({ ...dense, text_config: { ...(dense.text_config as object), head_dim: 0 } }, 'dense')).toThrow(/config\.text_config\.head_dim must be a positive integer, got 0/);
    expect(() => qwen35TextConfig({ ...dense, text_config: { ...(dense.text_config as object), hidden_act: 'gelu' } }, 'dense')).toThrow(/config\.text_config\.hidden_act is "gelu"/);
    const moe = model({ family: 'moe', layout: 'text' }).config;
    expect(qwen35TextConfig(moe, 'moe').norm_topk_prob).toBe(true);
    expect(() => qwen35TextConfig({ ...moe, shared_expert_intermediate_size: undefined }, 'moe')).toThrow(/^config\.shared_expert_intermediate_size is missing; a qwen3_5_moe_text checkpoint/);
    expect(() => qwen35TextConfig({ ...moe, num_experts_per_tok: undefined }, 'moe')).toThrow(/config\.num_experts_per_tok is missing/);
  });

  it('refuses loading a checkpoint whose text_config lacks a field, before any tensor is read', () => {
    const { dir } = model({ family: 'moe', layout: 'vision-language', textConfig: { moe_intermediate_size: undefined } });
    const r = metrale(['generate', '--model', dir, '--prompt-ids', '1,2,3', '--max-tokens', '2', '--backend', 'cpu']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/config\.text_config\.moe_intermediate_size is missing; a qwen3_5_moe checkpoint's config\.json must give it/);
  });
});

describe('qwen3_5 checkpoints: the vision tower and the MTP layer are never read', () => {
  for (const family of ['dense', 'moe'] as const) {
    it(`${family}: building reads every text tensor and none of model.visual.* / mtp.*`, () => {
      const { dir } = model({ family, layout: 'vision-language' });
      const { read, names } = build(dir);
      const unread = names.filter(qwen35UnreadTensor);
      expect(unread.some((n) => n.startsWith('model.visual.'))).toBe(true);
      expect(unread.some((n) => n.startsWith('mtp.'))).toBe(true);
      // Every other tensor is consumed: nothing of the text model is silently left out.
      expect([...read].sort()).toEqual(names.filter((n) => !qwen35UnreadTensor(n)).sort());
      expect([...read].every((n) => n.startsWith('model.language_model.') || n === 'lm_head.weight')).toBe(true);
    });
  }

  for (const name of ['qwen3-5-tiny', 'qwen3-5-moe-tiny']) {
    it(`the Hugging Face fixture ${name} (published layout): every text tensor read, none of its model.visual.* / mtp.*`, () => {
      const { read, names } = build(readModelFixture(name).dir);
      const unread = names.filter(qwen35UnreadTensor);
      expect(unread.filter((n) => n.startsWith('model.visual.')).length).toBeGreaterThan(0);
      expect(unread.filter((n) => n.startsWith('mtp.')).length).toBeGreaterThan(0);
      expect([...read].sort()).toEqual(names.filter((n) => !qwen35UnreadTensor(n)).sort());
    });
  }

  it('leaves the unread tensors out of the device-size check', () => {
    const { dir } = model({ family: 'moe', layout: 'vision-language' });
    const checkpoint = Checkpoint.open(dir);
    const gpu = new CpuBackend();
    try {
      const adapter = registry.forConfig(checkpoint.config);
      const all = checkModelFits(checkpoint, gpu, F32_PRECISION);
      const text = checkModelFits(checkpoint, gpu, F32_PRECISION, undefined, adapter.unreadTensors!(checkpoint.config));
      const unread = checkpoint.weights.names().filter(qwen35UnreadTensor).reduce((a, n) => a + checkpoint.weights.info(n).byteLength, 0);
      expect(unread).toBeGreaterThan(0);
      expect(text.total).toBe(all.total - unread);
      // loadModel (generate's path) checks the same.
      const loaded = loadModel(checkpoint, { gpu, limits: LIMITS, architectures: registry });
      expect(loaded.weightBytes.total).toBe(text.total);
      loaded.stack.dispose();
    } finally {
      gpu.dispose();
      checkpoint.close();
    }
  });

  it('ties lm_head to the text embedding by the top-level tie_word_embeddings only', () => {
    // text_config says untied, the top level tied: the embedding is the head.
    const tied = model({ family: 'dense', layout: 'vision-language', tied: true });
    expect(build(tied.dir).read.has('model.language_model.embed_tokens.weight')).toBe(true);
    // The top level says nothing (HF: untied), text_config says tied: the missing lm_head is an error.
    const untied = model({ family: 'dense', layout: 'vision-language', tied: true, topConfig: { tie_word_embeddings: undefined }, textConfig: { tie_word_embeddings: true } });
    expect(() => build(untied.dir)).toThrow(/missing tensor 'lm_head\.weight'/);
  });

  it('names a missing text tensor by its name in the checkpoint', () => {
    const { dir } = model({ family: 'dense', layout: 'vision-language' });
    const checkpoint = Checkpoint.open(dir);
    const gpu = new CpuBackend();
    const source = checkpoint.weights;
    const dropped: WeightSource = { ...spying(source).weights, has: (n) => n !== 'model.language_model.layers.1.self_attn.k_norm.weight' && source.has(n) };
    try {
      expect(() => registry.forConfig(checkpoint.config).build({ gpu, config: checkpoint.config, weights: dropped, limits: LIMITS })).toThrow(/model\.language_model\.layers\.1\.self_attn\.k_norm\.weight/);
    } finally {
      gpu.dispose();
      checkpoint.close();
    }
  });

  it('serve reads vocab_size, max_position_embeddings and eos from text_config, and says it serves text only', async () => {
    const { dir } = model({ family: 'moe', layout: 'vision-language' });
    const setup = { modelDir: dir, backend: 'cpu', maxBatch: 2, prefillChunk: 16, graphs: false, plugins: { cwd: process.cwd(), packageDir: process.cwd(), plugins: [], preferPlugins: [] } } as EngineSetup;
    const { info, checkpoint } = resolveModel(setup, await loadRegistry(setup.plugins));
    checkpoint.close();
    expect(info).toMatchObject({ modelType: 'qwen3_5_moe', vocabSize: 64, maxModelLen: 4096, eosTokenIds: [1], dtype: 'f32' });
    expect(info.notice).toMatch(/^qwen3_5_moe is a multimodal checkpoint: metrale serves its text model only \(prompts are text; images and video are not accepted/);
  });
});

describe('qwen3_5 adapters against their qwen3_next twins (CPU, f32)', () => {
  const cases: [string, TinyQwen35Options][] = [
    ['qwen3_5 (published layout, dense)', { family: 'dense', layout: 'vision-language' }],
    ['qwen3_5_moe (published layout, fused experts)', { family: 'moe', layout: 'vision-language' }],
    ['qwen3_5_text (tied embeddings)', { family: 'dense', layout: 'text', tied: true }],
    ['qwen3_5_moe_text (per-expert tensors)', { family: 'moe', layout: 'text', fusedExperts: false }],
  ];
  for (const [name, options] of cases) {
    it(`${name}: the twin's greedy tokens and prompt logits, with and without --spec ngram`, () => {
      const { dir, reference } = model(options);
      const twin = generate(reference);
      const ours = generate(dir);
      expect(ours.tokens).toEqual(twin.tokens);
      const rel = worstRowRel(ours.logits, twin.logits, 64);
      console.log(`${name}: prompt logits vs qwen3_next twin, worst row rel ${rel.toExponential(2)}`);
      expect(rel).toBeLessThanOrEqual(1e-6);
      expect(generate(dir, ['--spec', 'ngram:k=3,adaptive=0']).tokens).toEqual(twin.tokens);
      if (options.layout === 'vision-language') expect(ours.notice).toMatch(/serves its text model only/);
      else expect(ours.notice).toBeUndefined();
    });
  }

  it('generate without --json says on stderr that a published checkpoint is served as text only', () => {
    const { dir } = model({ family: 'dense', layout: 'vision-language' });
    const r = metrale(['generate', '--model', dir, '--prompt-ids', '5,6,7', '--max-tokens', '2', '--backend', 'cpu']);
    expect(r.code).toBe(0);
    expect(r.stderr.split('\n')[0]).toMatch(/^note: qwen3_5 is a multimodal checkpoint: metrale serves its text model only .*vision tower is not loaded\)$/);
  });
});

describe('qwen3_5 under tensor and expert parallelism (CPU ranks)', () => {
  it('the split GDN projections and fused experts shard as qwen3_next\'s', () => {
    const rule = qwen35ShardRule(model({ family: 'moe', layout: 'vision-language' }).config, 'moe');
    const at = 'model.language_model.layers.0.';
    expect(rule(`${at}linear_attn.in_proj_qkv.weight`)).toEqual({ axis: 0, segments: [16, 16, 32] });
    for (const p of ['in_proj_z', 'in_proj_b', 'in_proj_a']) expect(rule(`${at}linear_attn.${p}.weight`)).toEqual({ axis: 0 });
    expect(rule(`${at}mlp.experts.gate_up_proj`)).toEqual({ axis: 1, runs: 2 });
    expect(rule(`${at}mlp.experts.down_proj`)).toEqual({ axis: 2 });
  });

  it("the qwen3-5-tiny fixture: TP = 2 gives HF's greedy tokens", () => {
    const fx = readModelFixture('qwen3-5-tiny');
    const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', fx.expected.prompt_ids.join(','), '--max-tokens', String(fx.expected.max_new_tokens),
      '--greedy', '--ignore-eos', '--backend', 'cpu', '--dtype', 'f32', '--json', '--tensor-parallel-size', '2']);
    expect(r.stderr).toBe('');
    expect((JSON.parse(r.lines.at(-1)!) as Line).tokens).toEqual(fx.expected.greedy_tokens);
  });

  it('refuses a size that does not divide a head count, naming the field in text_config; its one KV head is kept by every rank', () => {
    const fx = readModelFixture('qwen3-5-moe-tiny');
    const r = metrale(['generate', '--model', fx.dir, '--prompt-ids', '1,2,3', '--max-tokens', '2', '--backend', 'cpu', '--tensor-parallel-size', '3']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/--tensor-parallel-size 3 does not divide config\.text_config\.num_attention_heads \(4\)/);
    // One KV head over 2 ranks: both keep it, and the tokens are HF's.
    const two = metrale(['generate', '--model', fx.dir, '--prompt-ids', fx.expected.prompt_ids.join(','), '--max-tokens', String(fx.expected.max_new_tokens),
      '--greedy', '--ignore-eos', '--backend', 'cpu', '--dtype', 'f32', '--json', '--tensor-parallel-size', '2']);
    expect(two.code, two.stderr).toBe(0);
    expect((JSON.parse(two.lines.at(-1)!) as { tokens: number[] }).tokens).toEqual(fx.expected.greedy_tokens);
  });

  for (const family of ['dense', 'moe'] as const) {
    it(`${family} (published layout): TP = 2${family === 'moe' ? ' and EP = 2' : ''} give TP = 1's tokens, logits within 1e-4`, () => {
      const { dir } = model({ family, layout: 'vision-language' });
      const one = generate(dir);
      for (const extra of [['--tensor-parallel-size', '2'], ...(family === 'moe' ? [['--tensor-parallel-size', '2', '--enable-expert-parallel']] : [])]) {
        const run = generate(dir, extra);
        expect(run.tokens, extra.join(' ')).toEqual(one.tokens);
        const rel = worstRowRel(run.logits, one.logits, 64);
        console.log(`qwen3.5 ${family} ${extra.join(' ')}: prompt logits vs TP = 1, worst row rel ${rel.toExponential(2)}`);
        expect(rel).toBeLessThanOrEqual(1e-4);
      }
    });
  }
});
