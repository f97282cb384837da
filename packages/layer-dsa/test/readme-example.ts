// Generated from README.md's "Run it" section: keep the two identical.
import { CpuBackend } from '@metrale/cpu-backend';
import { MemoryWeightSource, SeededRandom, StepDriver, tensorOf } from '@metrale/core';
import plugin from '@metrale/layer-dsa';

// A miniature GLM-5: 2 heads of (6 + 4) dims, latents of 12 and 10, an indexer of 8 heads × 8, top-6.
const config = {
  model_type: 'glm_moe_dsa', hidden_size: 24, num_attention_heads: 2, num_key_value_heads: 2,
  q_lora_rank: 12, kv_lora_rank: 10, qk_nope_head_dim: 6, qk_rope_head_dim: 4, v_head_dim: 5,
  index_n_heads: 8, index_head_dim: 8, index_topk: 6, num_hidden_layers: 1,
  rope_parameters: { rope_type: 'default', rope_theta: 10000 },
};
const rnd = new SeededRandom(1);
const t = (name: string, shape: number[], scale = 0.3) => tensorOf(name, rnd.normals(shape.reduce((a, b) => a * b, 1), scale), shape);
const ones = (name: string, n: number) => tensorOf(name, new Float32Array(n).fill(1), [n]);
const weights = new MemoryWeightSource('inline', [
  t('q_a_proj.weight', [12, 24]), ones('q_a_layernorm.weight', 12), t('q_b_proj.weight', [20, 12]),
  t('kv_a_proj_with_mqa.weight', [14, 24]), ones('kv_a_layernorm.weight', 10), t('kv_b_proj.weight', [22, 10]),
  t('o_proj.weight', [24, 10]), t('indexer.wq_b.weight', [64, 12]), t('indexer.wk.weight', [8, 24]),
  ones('indexer.k_norm.weight', 8), t('indexer.k_norm.bias', [8], 0.1), t('indexer.weights_proj.weight', [8, 24]),
]);

const gpu = new CpuBackend();
const limits = { maxSeqs: 2, maxSeqLen: 256, maxBatch: 2, maxK: 4, maxRows: 64 };
const layer = plugin.create({ gpu, layerType: 'dsa', config, layerIndex: 0, weights, limits });
const driver = new StepDriver({ gpu, layers: [layer], limits });
const seq = driver.open();
driver.prefill({ seqs: [seq], lengths: [20], input: rnd.normals(20 * 24) }); // rows past 6 attend to 6 keys
const step = driver.decode({ seqs: [seq], input: rnd.normals(24) });
console.log(driver.readOutputF32(step)); // the attention output of the new row
driver.verify({ seqs: [seq], k: 4, input: rnd.normals(4 * 24) });
driver.accept([1]); // row 1 joins the sequence; rows 2–4 are never visible to later steps
console.log(seq.length); // 22
driver.dispose();
layer.dispose();
gpu.dispose();
