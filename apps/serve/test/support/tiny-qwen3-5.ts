import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SafetensorsFile, encodeSafetensors, toF32, type HostTensor } from '@metrale/core';
import type { Qwen3NextShape } from '../../src/embedded/qwen3-next-tensor-plan.js';
import { TINY_CONFIG, writeTinyQwen3Next } from './tiny-qwen3-next.js';

/**
 * A tiny random Qwen3.5 checkpoint and the `qwen3_next` checkpoint with the same math and the same
 * weights, so the Qwen3.5 adapters can be checked against the qwen3_next one before the Hugging
 * Face fixtures of tools/fixtures/models.py exist. Qwen3.5's text model is Qwen3-Next's with
 * GDN input projections split (`in_proj_qkv` = q of every key head | k | v of every value head,
 * `in_proj_z`, `in_proj_b`, `in_proj_a`), every layer dense (`qwen3_5`) or every layer MoE with its
 * top-k renormalised (`qwen3_5_moe`), and the published layout's `text_config`,
 * `model.language_model.*`, `model.visual.*` and `mtp.*`. The reference is written by
 * `writeTinyQwen3Next` (f32) with `mlp_only_layers` every layer (dense) or none (MoE); the Qwen3.5
 * one is converted from it, row for row, so both give bit-identical projections.
 */
export interface TinyQwen35Options {
  readonly family: 'dense' | 'moe';
  /** 'vision-language': the published layout (model_type `qwen3_5` / `qwen3_5_moe`); 'text': `qwen3_5_text` / `qwen3_5_moe_text`, flat. */
  readonly layout: 'vision-language' | 'text';
  /** No lm_head.weight; `tie_word_embeddings` true (top-level for the vision-language layout). The reference's lm head is the embedding. */
  readonly tied?: boolean;
  /** The MoE's experts fused as published (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`; default) or per expert. */
  readonly fusedExperts?: boolean;
  readonly seed?: number;
  /** Other sizes in place of TINY_CONFIG's (head counts for tensor parallelism). */
  readonly config?: Partial<Qwen3NextShape>;
  /** Text-config fields to drop or replace (undefined drops), for the config-error tests. */
  readonly textConfig?: Readonly<Record<string, unknown>>;
  /** Top-level config fields of the vision-language layout to replace (undefined drops). */
  readonly topConfig?: Readonly<Record<string, unknown>>;
}

/** The vision tower's tensors the published layout carries (a token of them: never read, so NaN). */
const VISION_SHAPES = (hidden: number): Record<string, number[]> => ({
  'model.visual.patch_embed.proj.weight': [16, 3, 2, 4, 4],
  'model.visual.patch_embed.proj.bias': [16],
  'model.visual.pos_embed.weight': [16, 16],
  'model.visual.blocks.0.norm1.weight': [16],
  'model.visual.blocks.0.attn.qkv.weight': [48, 16],
  'model.visual.blocks.0.attn.proj.weight': [16, 16],
  'model.visual.blocks.0.mlp.linear_fc1.weight': [32, 16],
  'model.visual.merger.linear_fc2.weight': [hidden, 64],
});

/** The MTP layer's tensors (also never read: NaN), per expert as published. */
function mtpShapes(c: Qwen3NextShape & { readonly hidden_size: number }, family: 'dense' | 'moe'): Record<string, number[]> {
  const D = c.hidden_size, H = c.num_attention_heads, d = c.head_dim;
  const shapes: Record<string, number[]> = {
    'mtp.fc.weight': [D, 2 * D],
    'mtp.pre_fc_norm_embedding.weight': [D],
    'mtp.pre_fc_norm_hidden.weight': [D],
    'mtp.norm.weight': [D],
    'mtp.layers.0.input_layernorm.weight': [D],
    'mtp.layers.0.self_attn.q_proj.weight': [2 * H * d, D],
    'mtp.layers.0.self_attn.o_proj.weight': [D, H * d],
  };
  if (family === 'moe') {
    shapes['mtp.layers.0.mlp.gate.weight'] = [c.num_experts, D];
    shapes['mtp.layers.0.mlp.experts.0.gate_proj.weight'] = [c.moe_intermediate_size, D];
    shapes['mtp.layers.0.mlp.experts.0.down_proj.weight'] = [D, c.moe_intermediate_size];
  } else {
    shapes['mtp.layers.0.mlp.gate_proj.weight'] = [c.intermediate_size, D];
  }
  return shapes;
}

const f32 = (name: string, shape: readonly number[], values: Float32Array): HostTensor => ({ name, dtype: 'f32', shape, data: new Uint8Array(values.buffer, values.byteOffset, values.byteLength) });

/** Rows [from, from + n) of a [rows, D] matrix. */
const rows = (m: Float32Array, D: number, from: number, n: number) => m.subarray(from * D, (from + n) * D);

function concat(parts: readonly Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function readAll(dir: string): Map<string, { shape: readonly number[]; values: Float32Array }> {
  const file = SafetensorsFile.open(join(dir, 'model.safetensors'));
  const out = new Map<string, { shape: readonly number[]; values: Float32Array }>();
  for (const name of file.names()) {
    const t = file.get(name);
    out.set(name, { shape: t.shape, values: toF32(t) });
  }
  file.close();
  return out;
}

const withFields = (base: Record<string, unknown>, over: Readonly<Record<string, unknown>> | undefined): Record<string, unknown> => {
  const out = { ...base };
  for (const [k, v] of Object.entries(over ?? {})) {
    if (v === undefined) delete out[k];
    else out[k] = v;
  }
  return out;
};

/** Writes the Qwen3.5 checkpoint to `dir` and its qwen3_next twin to `reference`; returns the Qwen3.5 config. */
export function writeTinyQwen35(dir: string, reference: string, options: TinyQwen35Options): Record<string, unknown> {
  const { family, layout } = options;
  const fused = options.fusedExperts ?? true;
  const layers = TINY_CONFIG.layer_types.length;
  const shape = { ...TINY_CONFIG, ...options.config, mlp_only_layers: family === 'dense' ? Array.from({ length: layers }, (_, i) => i) : [] };
  const next = writeTinyQwen3Next(reference, { dtype: 'f32', seed: options.seed ?? 35, config: shape });
  const tensors = readAll(reference);
  const D = shape.hidden_size;
  if (options.tied) {
    // The reference's lm head is the embedding itself: what tying means.
    const embed = tensors.get('model.embed_tokens.weight')!;
    tensors.set('lm_head.weight', { shape: embed.shape, values: embed.values });
    writeFileSync(join(reference, 'model.safetensors'), encodeSafetensors([...tensors].map(([n, t]) => f32(n, t.shape, t.values)), { format: 'pt' }));
  }

  const hk = shape.linear_num_key_heads, hv = shape.linear_num_value_heads, dk = shape.linear_key_head_dim, dv = shape.linear_value_head_dim;
  const r = hv / hk;
  const group = 2 * dk + 2 * r * dv;
  const text = layout === 'vision-language' ? 'model.language_model.' : 'model.';
  const out: HostTensor[] = [];
  const put = (name: string, s: readonly number[], v: Float32Array) => out.push(f32(name.startsWith('model.') ? text + name.slice('model.'.length) : name, s, v));
  const experts = new Map<string, { gate: Float32Array[]; up: Float32Array[]; down: Float32Array[] }>();
  for (const [name, t] of tensors) {
    if (options.tied && name === 'lm_head.weight') continue;
    const expert = /^(.*\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$/.exec(name);
    if (expert && fused) {
      const e = experts.get(expert[1]!) ?? { gate: [], up: [], down: [] };
      e[expert[3] as 'gate' | 'up' | 'down'][Number(expert[2])] = t.values;
      experts.set(expert[1]!, e);
      continue;
    }
    if (name.endsWith('.linear_attn.in_proj_qkvz.weight')) {
      const base = name.slice(0, -'in_proj_qkvz.weight'.length);
      const m = t.values;
      const q = [], k = [], v = [], z = [];
      for (let g = 0; g < hk; g++) {
        q.push(rows(m, D, g * group, dk));
        k.push(rows(m, D, g * group + dk, dk));
        v.push(rows(m, D, g * group + 2 * dk, r * dv));
        z.push(rows(m, D, g * group + 2 * dk + r * dv, r * dv));
      }
      put(`${base}in_proj_qkv.weight`, [2 * hk * dk + hv * dv, D], concat([...q, ...k, ...v]));
      put(`${base}in_proj_z.weight`, [hv * dv, D], concat(z));
      continue;
    }
    if (name.endsWith('.linear_attn.in_proj_ba.weight')) {
      const base = name.slice(0, -'in_proj_ba.weight'.length);
      const b = [], a = [];
      for (let g = 0; g < hk; g++) {
        b.push(rows(t.values, D, g * 2 * r, r));
        a.push(rows(t.values, D, g * 2 * r + r, r));
      }
      put(`${base}in_proj_b.weight`, [hv, D], concat(b));
      put(`${base}in_proj_a.weight`, [hv, D], concat(a));
      continue;
    }
    put(name, t.shape, t.values);
  }
  for (const [base, e] of experts) {
    // Each expert's gate rows, then its up rows: [E, 2·I, D]; down [E, D, I].
    const I = shape.moe_intermediate_size;
    put(`${base}.gate_up_proj`, [e.gate.length, 2 * I, D], concat(e.gate.flatMap((g, i) => [g, e.up[i]!])));
    put(`${base}.down_proj`, [e.down.length, D, I], concat(e.down));
  }

  const textFields: Record<string, unknown> = { ...next };
  for (const k of ['architectures', 'model_type', 'torch_dtype', 'mlp_only_layers', 'decoder_sparse_step', 'norm_topk_prob']) delete textFields[k];
  if (family === 'dense') for (const k of ['num_experts', 'num_experts_per_tok', 'moe_intermediate_size', 'shared_expert_intermediate_size']) delete textFields[k];
  else delete textFields.intermediate_size;
  // Token-only positions are the same in M-RoPE's three sections: the sections change nothing.
  textFields.rope_parameters = { ...(next.rope_parameters as object), mrope_section: [1, 1, 0], mrope_interleaved: true };
  textFields.max_position_embeddings = 4096;
  const textType = family === 'dense' ? 'qwen3_5_text' : 'qwen3_5_moe_text';
  let config: Record<string, unknown>;
  if (layout === 'vision-language') {
    for (const [name, s] of Object.entries({ ...VISION_SHAPES(D), ...mtpShapes(shape, family) })) {
      out.push(f32(name, s, new Float32Array(s.reduce((a, b) => a * b, 1)).fill(Number.NaN)));
    }
    config = withFields({
      architectures: [family === 'dense' ? 'Qwen3_5ForConditionalGeneration' : 'Qwen3_5MoeForConditionalGeneration'],
      model_type: family === 'dense' ? 'qwen3_5' : 'qwen3_5_moe',
      text_config: withFields({
        ...textFields, model_type: textType, dtype: 'float32', mtp_num_hidden_layers: 1, mtp_use_dedicated_embeddings: false,
        // The vision-language model reads the top-level flag, never this one.
        tie_word_embeddings: !options.tied,
      }, options.textConfig),
      vision_config: { model_type: `${family === 'dense' ? 'qwen3_5' : 'qwen3_5_moe'}_vision`, depth: 1, hidden_size: 16, out_hidden_size: D },
      image_token_id: 60, video_token_id: 61, vision_start_token_id: 62, vision_end_token_id: 63,
      tie_word_embeddings: options.tied === true,
      dtype: 'float32',
    }, options.topConfig);
  } else {
    config = withFields({
      architectures: [family === 'dense' ? 'Qwen3_5ForCausalLM' : 'Qwen3_5MoeForCausalLM'],
      ...textFields, model_type: textType, dtype: 'float32', tie_word_embeddings: options.tied === true,
    }, options.textConfig);
  }
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2));
  writeFileSync(join(dir, 'model.safetensors'), encodeSafetensors(out, { format: 'pt' }));
  return config;
}
