import type { FloatDtype } from '../device/dtype.js';
import { WeightsError } from '../errors.js';

/**
 * The data path a model runs in. Weights live on the device in `rows`'s type, except the
 * checkpoint's block-FP8 weights, which stay FP8 when `fp8Weights` is set (the kernels read them
 * and their block scales). Rows between layers, the residual stream, KV caches and the MLP / MoE
 * intermediates are `rows`; accumulations, norms' sums, softmax, router and lm-head logits and
 * recurrent states are f32 whatever `rows` is.
 */
export interface Precision {
  readonly rows: FloatDtype;
  readonly fp8Weights: boolean;
}

/** The reference path: every weight and row in f32 (what the fixtures check at 1e-4). */
export const F32_PRECISION: Precision = Object.freeze({ rows: 'f32', fp8Weights: false });

/** What `--dtype` asks for: the checkpoint's own types (`auto`), or every weight and row in one type. */
export type DtypeChoice = 'auto' | 'bf16' | 'f16' | 'f32';

export const DTYPE_CHOICES: readonly DtypeChoice[] = ['auto', 'bf16', 'f16', 'f32'];

/** The one block size of block-FP8 checkpoints the kernels read (DeepSeek-V3, Qwen3-Next-FP8, GLM-5-FP8). */
export const FP8_BLOCK = 128;

/** A checkpoint's block-FP8 quantization, as its config's `quantization_config` states it. */
export interface Fp8Quantization {
  /** Rows and columns of one scaled block (128 × 128). */
  readonly block: number;
  /** Module names the checkpoint left unquantized (informational: each tensor's own dtype decides). */
  readonly modulesToNotConvert: readonly string[];
}

const HF_DTYPES: Readonly<Record<string, FloatDtype>> = { bfloat16: 'bf16', float16: 'f16', float32: 'f32', half: 'f16', float: 'f32' };

/**
 * The checkpoint's `quantization_config`, or undefined when it has none. Only what the kernels
 * handle is accepted: `quant_method` "fp8", `fmt` "e4m3", `activation_scheme` "dynamic",
 * `weight_block_size` [128, 128]; anything else throws `WeightsError` naming the field.
 */
export function readFp8Quantization(config: Readonly<Record<string, unknown>>, where = 'config.json'): Fp8Quantization | undefined {
  const q = config.quantization_config;
  if (q === undefined || q === null) return undefined;
  if (typeof q !== 'object' || Array.isArray(q)) throw new WeightsError(`quantization_config must be an object, got ${JSON.stringify(q)}`, where);
  const c = q as Record<string, unknown>;
  const method = c.quant_method;
  if (method !== 'fp8') {
    throw new WeightsError(
      `quantization_config.quant_method is ${JSON.stringify(method)}; metrale reads block-FP8 checkpoints ("fp8", as Qwen3-Next-FP8 and GLM-5-FP8 ship) ` +
        `and unquantized ones; use a bf16 release of the model`,
      where,
    );
  }
  const fmt = c.fmt ?? 'e4m3';
  if (fmt !== 'e4m3') throw new WeightsError(`quantization_config.fmt is ${JSON.stringify(fmt)}; the FP8 kernels read "e4m3" weights only`, where);
  const scheme = c.activation_scheme ?? 'dynamic';
  if (scheme !== 'dynamic') {
    throw new WeightsError(`quantization_config.activation_scheme is ${JSON.stringify(scheme)}; only "dynamic" is supported (static activation scales are not read)`, where);
  }
  const block = c.weight_block_size;
  if (!Array.isArray(block) || block.length !== 2 || block[0] !== FP8_BLOCK || block[1] !== FP8_BLOCK) {
    throw new WeightsError(
      `quantization_config.weight_block_size is ${JSON.stringify(block)}; the FP8 kernels read [${FP8_BLOCK}, ${FP8_BLOCK}] blocks ` +
        `(per-tensor and other block sizes are not supported)`,
      where,
    );
  }
  const skip = c.modules_to_not_convert ?? [];
  if (!Array.isArray(skip) || !skip.every((m) => typeof m === 'string')) {
    throw new WeightsError(`quantization_config.modules_to_not_convert must be a list of module names, got ${JSON.stringify(skip)}`, where);
  }
  return { block: FP8_BLOCK, modulesToNotConvert: skip as string[] };
}

/** The float type a config's `dtype` (transformers 5) or `torch_dtype` names; f32 when it names none, as transformers loads it. */
export function checkpointDtype(config: Readonly<Record<string, unknown>>, where = 'config.json'): FloatDtype {
  const text = (typeof config.text_config === 'object' && config.text_config !== null ? config.text_config : {}) as Record<string, unknown>;
  const named = config.dtype ?? config.torch_dtype ?? text.dtype ?? text.torch_dtype;
  if (named === undefined || named === null) return 'f32';
  const dtype = typeof named === 'string' ? HF_DTYPES[named.replace(/^torch\./, '')] : undefined;
  if (!dtype) throw new WeightsError(`dtype is ${JSON.stringify(named)}; checkpoints in bfloat16, float16 or float32 are supported`, where);
  return dtype;
}

/**
 * The precision a model runs in. `auto`: the checkpoint's dtype (a block-FP8 checkpoint keeps its
 * FP8 weights, with bf16 rows); `bf16` / `f16` / `f32`: every weight and row in that type (FP8
 * weights dequantized). A bad `quantization_config` throws `WeightsError` naming the field, whatever
 * the choice.
 */
export function resolvePrecision(choice: DtypeChoice, config: Readonly<Record<string, unknown>>, where = 'config.json'): Precision {
  if (!DTYPE_CHOICES.includes(choice)) throw new WeightsError(`--dtype ${JSON.stringify(choice)}: use one of ${DTYPE_CHOICES.join(', ')}`, where);
  const fp8 = readFp8Quantization(config, where);
  if (choice !== 'auto') return { rows: choice, fp8Weights: false };
  if (fp8) return { rows: 'bf16', fp8Weights: true };
  return { rows: checkpointDtype(config, where), fp8Weights: false };
}

/** `bf16`, `f32`, or `fp8 + bf16`: how a precision reads in logs. */
export function describePrecision(p: Precision): string {
  return p.fp8Weights ? `fp8 weights, ${p.rows} rows` : p.rows;
}
