// Bad input gets a clear, typed error before anything reaches the device: bad weights and
// configs, inconsistent indexer_types, a top-k larger than the cache, positions past the cache.
import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, ReplayRoomError, SeededRandom, StepDriver, WeightsError, prefixedWeights, tensorOf, type HostTensor } from '@metrale/core';
import plugin, { type DsaLayer } from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';
import { configOf, GLM5, GLM53, pack, randomRows, randomWeights, weightsOf } from './dsa-setup.js';

const limits = { maxSeqs: 2, maxSeqLen: 24, maxBatch: 2, maxK: 3, maxRows: 24 };

/** Creating layer `layerIndex` throws `kind` matching `message`, and the device is untouched. */
function expectRefused(
  config: Record<string, unknown>, tensors: HostTensor[], message: RegExp,
  kind: new (...a: never[]) => Error = WeightsError, layerIndex = 0, l = limits,
): void {
  const gpu = new CpuBackend();
  try {
    const before = { digest: gpu.memoryDigest(), stats: gpu.stats() };
    let error: unknown;
    try {
      plugin.create({ gpu, layerType: 'dsa', config, layerIndex, weights: weightsOf(tensors, 'bad.safetensors'), limits: l });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(kind);
    expect((error as Error).message).toMatch(message);
    expect(gpu.memoryDigest()).toBe(before.digest);
    expect(gpu.stats().liveAllocations).toBe(before.stats.liveAllocations);
    expect(gpu.stats().hostToDeviceCopies).toBe(before.stats.hostToDeviceCopies);
  } finally {
    gpu.dispose();
  }
}

const good = randomWeights(GLM5, 1).tensors;
const good53 = randomWeights(GLM53, 1).tensors;
const without = (ts: HostTensor[], name: string) => ts.filter((t) => t.name !== name);
const replaced = (ts: HostTensor[], t: HostTensor) => [...without(ts, t.name), t];

describe('bad weights are refused before any device allocation, naming the tensor and the file', () => {
  it('a missing tensor', () => {
    expectRefused(configOf(GLM5), without(good, 'kv_b_proj.weight'), /bad\.safetensors: missing tensor 'kv_b_proj\.weight'/);
    expectRefused(configOf(GLM5), without(good, 'indexer.k_norm.bias'), /missing tensor 'indexer\.k_norm\.bias' .*'full' indexer layer/);
    expectRefused(configOf(GLM53), without(good53, 'indexer.index_kpool_compress_ape'), /missing tensor 'indexer\.index_kpool_compress_ape'/);
  });

  it('a misshapen tensor', () => {
    const wk = tensorOf('indexer.wk.weight', new Float32Array(GLM5.dI * GLM5.hidden), [GLM5.hidden, GLM5.dI]);
    expectRefused(configOf(GLM5), replaced(good, wk), /bad\.safetensors: tensor 'indexer\.wk\.weight' has shape \[24, 8\], expected \[8, 24\]/);
    const q = tensorOf('q_b_proj.weight', new Float32Array(10 * GLM5.qLora), [10, GLM5.qLora]);
    expectRefused(configOf(GLM5), replaced(good, q), /tensor 'q_b_proj\.weight' has shape \[10, 12\], expected \[20, 12\]/);
  });

  it('a layer scoped out of a whole checkpoint names the tensor as the checkpoint does', () => {
    const prefix = 'model.layers.0.self_attn.';
    const scoped = (ts: HostTensor[]) => prefixedWeights(weightsOf(ts.map((t) => ({ ...t, name: prefix + t.name })), 'model.safetensors'), prefix);
    const create = (ts: HostTensor[]) => () => {
      const gpu = new CpuBackend();
      try {
        plugin.create({ gpu, layerType: 'dsa', config: configOf(GLM5), layerIndex: 0, weights: scoped(ts), limits });
      } finally {
        gpu.dispose();
      }
    };
    expect(create(without(good, 'kv_b_proj.weight'))).toThrow(/model\.safetensors: missing tensor 'model\.layers\.0\.self_attn\.kv_b_proj\.weight' of the DSA attention layer/);
    const q = tensorOf('q_b_proj.weight', new Float32Array(10 * GLM5.qLora), [10, GLM5.qLora]);
    expect(create(replaced(good, q))).toThrow(/model\.safetensors: tensor 'model\.layers\.0\.self_attn\.q_b_proj\.weight' has shape \[10, 12\], expected \[20, 12\]/);
  });

  it('a non-finite value', () => {
    const n = tensorOf('kv_a_layernorm.weight', Float32Array.from({ length: GLM5.kvLora }, (_, i) => (i === 3 ? Infinity : 1)), [GLM5.kvLora]);
    expectRefused(configOf(GLM5), replaced(good, n), /tensor 'kv_a_layernorm\.weight' holds a non-finite value \(Infinity\) at element 3/);
  });
});

describe('bad configs are refused, naming the field', () => {
  it('an unknown or missing model_type, and missing fields', () => {
    expectRefused(configOf(GLM5, { model_type: 'deepseek_v3' }), good, /config\.model_type is "deepseek_v3"; DSA layers come from glm_moe_dsa, glm5_next, glm5_next_text/);
    const c = configOf(GLM5);
    delete c.index_topk;
    expectRefused(c, good, /config\.index_topk is missing/);
    expectRefused(configOf(GLM5, { q_lora_rank: null }), good, /q_lora_rank is null/);
    expectRefused(configOf(GLM5, { qk_rope_head_dim: 3 }), good, /qk_rope_head_dim must be even/);
  });

  it('unsupported features', () => {
    expectRefused(configOf(GLM5, { rope_parameters: { rope_type: 'yarn', rope_theta: 10000, factor: 4 } }), good, /rope_type is "yarn"; this version supports 'default' RoPE only/);
    expectRefused(configOf(GLM5, { attention_bias: true }), good, /attention_bias is true/);
    expectRefused(configOf(GLM53, { qk_rope_head_dim: 4 }), good53, /glm5_next attention is NoPE/);
    expectRefused(configOf(GLM53, { index_topk: 10 }), good53, /index_topk \(10\) must be a multiple of index_kpool \(4\)/);
    expectRefused(configOf(GLM5, { metrale_indexer_cache_dtype: 'int8' }), good, /metrale_indexer_cache_dtype is "int8"; use one of 'bf16', 'f32', 'fp8'/);
  });

  it('inconsistent indexer_types: a shared layer before any full layer', () => {
    expectRefused(configOf(GLM5, { indexer_types: ['shared', 'full'] }), good, /indexer_types is inconsistent: layer 0 is 'shared' but no DSA layer before it is 'full'/);
    // Checked on every layer's creation, not only the offending one's.
    expectRefused(configOf(GLM5, { indexer_types: ['shared', 'full'] }), good, /layer 0 is 'shared'/, WeightsError, 1);
    expectRefused(configOf(GLM5, { indexer_types: ['full', 'dense'] }), good, /indexer_types\[1\] is "dense"; indexer types are 'full' or 'shared'/);
    expectRefused(configOf(GLM5, { index_topk_pattern: 'SF', indexer_types: undefined }), good, /layer 0 is 'shared'/);
    // glm5_next: linear-attention layers do not count as a full DSA layer before a shared one.
    expectRefused(
      configOf(GLM53, { num_hidden_layers: 3, layer_types: ['linear_attention', 'deepseek_sparse_attention', 'deepseek_sparse_attention'], indexer_types: ['full', 'shared', 'full'] }),
      good53, /layer 1 is 'shared' but no DSA layer before it is 'full'/, WeightsError, 2,
    );
  });

  it('a layer that is not a DSA layer', () => {
    expectRefused(configOf(GLM53, { layer_types: ['linear_attention', 'deepseek_sparse_attention'] }), good53, /layer_types\[0\] is "linear_attention", not 'deepseek_sparse_attention'/);
    expectRefused(configOf(GLM5), good, /layer 5 does not exist: config\.num_hidden_layers is 2/, WeightsError, 5);
  });

  it('a top-k larger than the cache', () => {
    expectRefused(configOf(GLM5, { index_topk: 30 }), good, /index_topk \(30\) is larger than the cache \(limits\.maxSeqLen = 24/, InvalidArgumentError);
  });
});

describe('positions beyond the cache capacity', () => {
  function rig() {
    const gpu = new CpuBackend();
    const layer = plugin.create({ gpu, layerType: 'dsa', config: configOf(GLM5), layerIndex: 0, weights: weightsOf(good), limits }) as DsaLayer;
    const driver = new StepDriver({ gpu, layers: [layer], limits });
    return { gpu, layer, driver };
  }

  it('a prefill past maxSeqLen is refused before any launch, leaving the layer as it was', () => {
    const { gpu, layer, driver } = rig();
    const rnd = new SeededRandom(1);
    const seq = driver.open();
    driver.prefill({ seqs: [seq], lengths: [20], input: pack(randomRows(rnd, 20, GLM5.hidden)) });
    const kernelsBefore = (gpu as CpuBackend).stats().kernelsLaunched;
    expect(() => driver.prefill({ seqs: [seq], lengths: [5], input: pack(randomRows(rnd, 5, GLM5.hidden)) })).toThrow(ReplayRoomError);
    expect(() => driver.prefill({ seqs: [seq], lengths: [5], input: pack(randomRows(rnd, 5, GLM5.hidden)) })).toThrow(/ends at 25, past the cache capacity 24/);
    expect((gpu as CpuBackend).stats().kernelsLaunched).toBe(kernelsBefore);
    expect(layer.occupancy()).toBe(20);
    expect(driver.stateOf(seq, 0)).toMatchObject({ length: 20 });
    driver.dispose();
    gpu.dispose();
  });

  it('a replayed verify past the end is refused by the room check before the replay', () => {
    const { gpu, driver } = rig();
    const rnd = new SeededRandom(2);
    const seq = driver.open();
    driver.prefill({ seqs: [seq], lengths: [16], input: pack(randomRows(rnd, 16, GLM5.hidden)) });
    driver.verify({ seqs: [seq], k: 3, input: pack(randomRows(rnd, 3, GLM5.hidden)) });
    driver.accept([3]);
    driver.verify({ seqs: [seq], k: 3, input: pack(randomRows(rnd, 3, GLM5.hidden)) });
    driver.accept([3]); // length 22: a verify of 3 would end at 25
    const before = { digest: gpu.memoryDigest(), length: seq.length };
    expect(() => driver.verify({ seqs: [seq], k: 3, input: pack(randomRows(rnd, 3, GLM5.hidden)) })).toThrow(ReplayRoomError);
    expect(gpu.memoryDigest()).toBe(before.digest);
    expect(seq.length).toBe(before.length);
    driver.dispose();
    gpu.dispose();
  });
});
