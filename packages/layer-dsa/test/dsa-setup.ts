import { CpuBackend } from '@metrale/cpu-backend';
import {
  F32_PRECISION, MemoryWeightSource, SeededRandom, StepDriver, definePlugin, fromBf16, tensorOf, toBf16,
  type GpuBackend, type HostTensor, type LayerLimits, type MetralePlugin, type Precision, type Sequence, type StepResult, type TransformerLayer,
} from '@metrale/core';
import plugin from '@metrale/layer-dsa';
import type { RefShape } from './dsa-reference.js';

export type Shape = RefShape;

/** GLM-5 in miniature: MLA with RoPE, a per-token indexer, top-6. */
export const GLM5: Shape = {
  variant: 'glm_moe_dsa', hidden: 24, heads: 2, qLora: 12, kvLora: 10, nope: 6, rope: 4, v: 5, idxHeads: 8, dI: 8, topk: 6, kpool: 1,
};

/** GLM-5.3 in miniature: NoPE MLA, pools of 4 tokens, top-8 (2 pools + a tail of up to 3). */
export const GLM53: Shape = {
  variant: 'glm5_next', hidden: 24, heads: 2, qLora: 12, kvLora: 10, nope: 8, rope: 0, v: 5, idxHeads: 8, dI: 8, topk: 8, kpool: 4,
};

/**
 * GLM-5 at a size where FP8 blocks stack and split: q_a_proj is one whole 128-row block (it stacks
 * with kv_a_proj_with_mqa), kv_a (48 rows) and q_b_proj (48) end inside a block (the next part is
 * a GEMM of its own), hidden 160 is one whole and one partial column block.
 */
export const GLM5_MID: Shape = {
  variant: 'glm_moe_dsa', hidden: 160, heads: 2, qLora: 128, kvLora: 40, nope: 16, rope: 8, v: 12, idxHeads: 4, dI: 16, topk: 8, kpool: 1,
};

/** The plugin with every layer created in `precision` (what a model adapter passes as context.precision). */
export function pluginIn(precision: Precision): MetralePlugin {
  return definePlugin({ ...plugin, create: (context) => plugin.create({ ...context, precision }) });
}

/** A Hugging Face config of the given shape (two layers: 'full' then 'shared'), as config.to_dict() writes the fields DSA reads. */
export function configOf(s: Shape, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const common = {
    hidden_size: s.hidden, num_attention_heads: s.heads, num_key_value_heads: s.heads, q_lora_rank: s.qLora, kv_lora_rank: s.kvLora,
    qk_nope_head_dim: s.nope, qk_rope_head_dim: s.rope, v_head_dim: s.v, index_n_heads: s.idxHeads, index_head_dim: s.dI,
    index_topk: s.topk, num_hidden_layers: 2, indexer_types: ['full', 'shared'], attention_bias: false, vocab_size: 64,
    metrale_indexer_cache_dtype: 'f32',
  };
  if (s.variant === 'glm_moe_dsa') {
    return { model_type: 'glm_moe_dsa', ...common, rms_norm_eps: 1e-5, rope_parameters: { rope_theta: 10000, rope_type: 'default' }, ...extra };
  }
  return {
    model_type: 'glm5_next_text', ...common, rms_norm_eps: 1e-6, index_kpool: s.kpool, index_kpool_always_select_tail: true,
    layer_types: ['deepseek_sparse_attention', 'deepseek_sparse_attention'], ...extra,
  };
}

/** Random f32 weights of one layer (HF names), and the same values as float64 for the reference. */
export function randomWeights(s: Shape, seed: number, full = true): { tensors: HostTensor[]; ref: Map<string, Float64Array> } {
  const rnd = new SeededRandom(seed);
  const tensors: HostTensor[] = [];
  const ref = new Map<string, Float64Array>();
  const add = (name: string, shape: number[], make: () => number) => {
    const values = Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, make);
    tensors.push(tensorOf(name, values, shape));
    ref.set(name, Float64Array.from(values));
  };
  const linear = (name: string, out: number, inp: number) => add(name, [out, inp], () => rnd.normal() / Math.sqrt(inp));
  const norm = (name: string, n: number) => add(name, [n], () => 0.5 + rnd.float());
  const { hidden: D, heads: H, qLora, kvLora, nope, rope, v, idxHeads, dI, kpool } = s;
  linear('q_a_proj.weight', qLora, D);
  norm('q_a_layernorm.weight', qLora);
  linear('q_b_proj.weight', H * (nope + rope), qLora);
  linear('kv_a_proj_with_mqa.weight', kvLora + rope, D);
  norm('kv_a_layernorm.weight', kvLora);
  linear('kv_b_proj.weight', H * (nope + v), kvLora);
  linear('o_proj.weight', D, H * v);
  if (full) {
    linear('indexer.wq_b.weight', idxHeads * dI, qLora);
    linear('indexer.wk.weight', dI, D);
    norm('indexer.k_norm.weight', dI);
    add('indexer.k_norm.bias', [dI], () => 0.2 * rnd.normal());
    linear('indexer.weights_proj.weight', idxHeads, D);
    if (s.variant === 'glm5_next') {
      linear('indexer.index_kpool_compress_gate', dI, D);
      add('indexer.index_kpool_compress_ape', [kpool, dI], () => 0.5 * rnd.normal());
    }
  }
  return { tensors, ref };
}

export function weightsOf(tensors: HostTensor[], origin = 'test weights'): MemoryWeightSource {
  return new MemoryWeightSource(origin, tensors);
}

export const pack = (rows: readonly ArrayLike<number>[]): Float32Array => Float32Array.from(rows.flatMap((r) => Array.from(r)));

/** A stack of layers of the plugin on one CPU backend, driven by a StepDriver. Rows go in and come out as f32 values (bf16 rows converted). */
export class Rig {
  readonly gpu: GpuBackend;
  readonly driver: StepDriver;
  readonly layers: TransformerLayer[];
  readonly width: number;
  readonly #bf16: boolean;
  constructor(
    config: Record<string, unknown>, layerWeights: HostTensor[][], limits: LayerLimits,
    options: { graphs?: boolean; gpu?: GpuBackend; precision?: Precision } = {},
  ) {
    this.gpu = options.gpu ?? new CpuBackend();
    const precision = options.precision ?? F32_PRECISION;
    if (precision.rows === 'f16') throw new Error('Rig: f16 rows are not a row format the tests convert');
    this.#bf16 = precision.rows === 'bf16';
    this.layers = layerWeights.map((tensors, layerIndex) =>
      plugin.create({ gpu: this.gpu, layerType: 'dsa', config, layerIndex, weights: weightsOf(tensors), limits, precision }),
    );
    this.driver = new StepDriver({ gpu: this.gpu, layers: this.layers, limits, graphs: options.graphs ?? true });
    this.width = this.layers[0]!.inputRowBytes / (this.#bf16 ? 2 : 4);
  }

  #in(values: Float32Array): Float32Array | Uint16Array {
    return this.#bf16 ? toBf16(values) : values;
  }

  #out(r: StepResult): Float32Array {
    if (!this.#bf16) return this.driver.readOutputF32(r).slice();
    const bytes = this.driver.readOutput(r).slice();
    return fromBf16(new Uint16Array(bytes.buffer));
  }

  prefill(seqs: Sequence[], lengths: number[], input: Float32Array): Float32Array {
    const out = new Float32Array(input.length);
    this.driver.prefill({ seqs, lengths, input: this.#in(input) }, (r: StepResult, first: number) => out.set(this.#out(r), first * this.width));
    return out;
  }

  decode(seqs: Sequence[], input: Float32Array): { out: Float32Array; path: string } {
    const r = this.driver.decode({ seqs, input: this.#in(input) });
    return { out: this.#out(r), path: r.path };
  }

  verify(seqs: Sequence[], k: number, input: Float32Array, accepted: number[]): { out: Float32Array; path: string } {
    const r = this.driver.verify({ seqs, k, input: this.#in(input) });
    const out = this.#out(r);
    this.driver.accept(accepted);
    return { out, path: r.path };
  }

  dispose(): void {
    this.driver.dispose();
    for (const l of this.layers) l.dispose();
    this.gpu.dispose();
  }
}

export function randomRows(rnd: SeededRandom, n: number, width: number): Float64Array[] {
  return Array.from({ length: n }, () => Float64Array.from(rnd.normals(width)));
}
