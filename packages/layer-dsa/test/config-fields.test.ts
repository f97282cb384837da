// Every config field the layer reads, with the fields that are easy to take one for another set
// apart (GLM-5: qk_nope_head_dim 192, qk_rope_head_dim 64, v_head_dim 256, index_head_dim 128,
// 64 attention heads, 32 index heads; HF also writes head_dim = qk_rope_head_dim and
// qk_head_dim = nope + rope, which the layer must not read in their place).
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkLayerFixture } from '@metrale/core/testing';
import { CpuBackend } from '@metrale/cpu-backend';
import plugin, { dsaGeometry, dsaWeightShapes, readDsaConfig } from '@metrale/layer-dsa';
import { afterAll, describe, expect, it } from 'vitest';

/** GLM-5's fields, scaled down, no two equal that HF keeps apart. */
const APART = {
  model_type: 'glm_moe_dsa', hidden_size: 96, num_hidden_layers: 2, num_attention_heads: 6, num_key_value_heads: 6,
  q_lora_rank: 56, kv_lora_rank: 40, qk_nope_head_dim: 24, qk_rope_head_dim: 8, v_head_dim: 36,
  index_n_heads: 4, index_head_dim: 20, index_topk: 12, indexer_types: ['full', 'shared'],
  rope_parameters: { rope_type: 'default', rope_theta: 10000 },
  // What HF derives: the layer reads nope and rope, never these.
  head_dim: 8, qk_head_dim: 32,
};

describe('DSA config fields are read each for itself', () => {
  const cfg = readDsaConfig(APART, 0);

  it('maps every field to its own quantity', () => {
    expect({ hidden: cfg.hidden, heads: cfg.heads, qLora: cfg.qLora, kvLora: cfg.kvLora, nope: cfg.nope, rope: cfg.rope, v: cfg.v, idxHeads: cfg.idxHeads, dI: cfg.dI, topk: cfg.topk })
      .toEqual({ hidden: 96, heads: 6, qLora: 56, kvLora: 40, nope: 24, rope: 8, v: 36, idxHeads: 4, dI: 20, topk: 12 });
    // The softmax scale is (nope + rope)^−0.5, the indexer's d_I^−0.5 · H_I^−0.5.
    expect(cfg.softmaxScale).toBeCloseTo(32 ** -0.5, 12);
    expect(cfg.indexScale).toBeCloseTo(20 ** -0.5 * 4 ** -0.5, 12);
  });

  it('sizes each tensor from the fields HF sizes it from', () => {
    const shapes = Object.fromEntries(dsaWeightShapes(cfg));
    expect(shapes).toMatchObject({
      'q_a_proj.weight': [56, 96],
      'q_b_proj.weight': [6 * (24 + 8), 56], // heads × (nope + rope)
      'kv_a_proj_with_mqa.weight': [40 + 8, 96], // kv_lora + rope
      'kv_b_proj.weight': [6 * (24 + 36), 40], // heads × (nope + v)
      'o_proj.weight': [96, 6 * 36], // heads × v
      'indexer.wq_b.weight': [4 * 20, 56], // index heads × index dim
      'indexer.wk.weight': [20, 96],
      'indexer.weights_proj.weight': [4, 96],
      'indexer.k_norm.weight': [20],
    });
  });

  it('lays out its rows from the same fields', () => {
    const geo = dsaGeometry(cfg);
    expect(geo.latWidth).toBe(40 + 8);
    expect(geo.qIOff).toBe(6 * 32);
    expect(geo.qbWidth).toBe(6 * 32 + 4 * 20);
    expect(geo.kOff).toBe(56 + 40 + 8);
    expect(geo.xaWidth).toBe(56 + 40 + 8 + 20 + 4);
  });

  it('ignores head_dim and qk_head_dim (HF derives them from rope and nope)', () => {
    const other = readDsaConfig({ ...APART, head_dim: 999, qk_head_dim: 7 }, 0);
    expect(other).toEqual(cfg);
  });

  it('refuses KV heads apart from attention heads: MLA expands keys and values per attention head', () => {
    expect(() => readDsaConfig({ ...APART, num_key_value_heads: 2 }, 0)).toThrow(/num_key_value_heads \(2\) must equal num_attention_heads \(6\)/);
  });
});

describe('a fixture at GLM-5 proportions does not read head_dim or qk_head_dim', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'metrale-dsa-fields-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('glm5-dsa-real passes with head_dim and qk_head_dim changed in its config.json', () => {
    const dir = join(tmp, 'glm5-dsa-real');
    cpSync(new URL('../fixtures/glm5-dsa-real', import.meta.url), dir, { recursive: true });
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    expect(config.qk_nope_head_dim).not.toBe(config.qk_rope_head_dim);
    expect(config.v_head_dim).not.toBe(config.qk_nope_head_dim);
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, head_dim: 3, qk_head_dim: 5 }));
    const { runs } = checkLayerFixture(dir, { plugins: [plugin], backend: () => new CpuBackend() });
    for (const { report } of runs) expect(report.pass).toBe(true);
  });
});
