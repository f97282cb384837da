// Test helpers for the layer's data paths: checkpoints as the published block-FP8 ones store them
// (a Linear's `weight` as F8_E4M3 codes plus `weight_scale_inv`, f32 per 128 × 128 block) and
// bf16 ones, and the plugin created with a precision (the conformance kit and the fixture runner
// create layers without one).
import {
  FP8_BLOCK, WeightsError, quantizeFp8, toBf16, toF32,
  type CreateLayerContext, type HostTensor, type MetralePlugin, type Precision, type WeightSource,
} from '@metrale/core';

export const BF16: Precision = Object.freeze({ rows: 'bf16', fp8Weights: false });
export const F16: Precision = Object.freeze({ rows: 'f16', fp8Weights: false });
export const FP8: Precision = Object.freeze({ rows: 'bf16', fp8Weights: true });

/**
 * Bounds of the golden fixtures against their f32 (Hugging Face, float32) outputs, on CPU and CUDA
 * (measured figures: docs/layers/gdn.md, "Tolerances"). bf16: the weights and rows rounded to bf16.
 * FP8: the checkpoint's own quantization error (E4M3 keeps 3 mantissa bits) dominates; the data
 * path itself is held to the bf16 bound against the reference with the dequantized weights
 * (reference.test.ts). The fixture runner encodes 2-byte rows as bf16, so f16 rows are checked
 * against the reference only.
 */
export const FIXTURE_BOUNDS = { bf16: 2e-2, fp8: 1.5e-1 } as const;

/** The Linears the published FP8 checkpoints quantize (in_proj_ba / in_proj_b / in_proj_a stay bf16). */
export const FP8_LINEARS = ['in_proj_qkvz.weight', 'in_proj_qkv.weight', 'in_proj_z.weight', 'out_proj.weight'] as const;

/** A 2-D tensor `name` as F8_E4M3 codes plus its `<name>_scale_inv`, as a block-FP8 checkpoint holds it. */
export function fp8Tensors(t: HostTensor): HostTensor[] {
  if (t.shape.length !== 2) throw new WeightsError(`fp8Tensors: '${t.name}' is not a 2-D weight`);
  const [rows, cols] = t.shape as [number, number];
  const { codes, scales } = quantizeFp8(toF32(t), rows, cols);
  return [
    { name: t.name, dtype: 'f8e4m3', shape: [rows, cols], data: codes },
    { name: `${t.name}_scale_inv`, dtype: 'f32', shape: [Math.ceil(rows / FP8_BLOCK), Math.ceil(cols / FP8_BLOCK)], data: new Uint8Array(scales.buffer) },
  ];
}

/** A float tensor as bf16 (what a bf16 checkpoint holds). */
export function bf16Tensor(t: HostTensor): HostTensor {
  const bits = toBf16(toF32(t));
  return { name: t.name, dtype: 'bf16', shape: t.shape, data: new Uint8Array(bits.buffer) };
}

/**
 * The tensors of a block-FP8 checkpoint made from `tensors`: the Linears of FP8_LINEARS quantized,
 * every other tensor in bf16 (the published checkpoints' types).
 */
export function fp8Checkpoint(tensors: readonly HostTensor[]): HostTensor[] {
  return tensors.flatMap((t) => ((FP8_LINEARS as readonly string[]).includes(t.name) ? fp8Tensors(t) : [bf16Tensor(t)]));
}

/** `source` with the FP8_LINEARS quantized and the rest in bf16 (the fixtures' weights as an FP8 checkpoint). */
export function fp8Source(source: WeightSource): WeightSource {
  const tensors = new Map<string, HostTensor>();
  for (const name of source.names()) for (const t of fp8Checkpoint([{ ...source.get(name), name }])) tensors.set(t.name, t);
  return {
    origin: `${source.origin} (as block-FP8)`,
    names: () => [...tensors.keys()],
    has: (name) => tensors.has(name),
    get: (name) => {
      const t = tensors.get(name);
      if (!t) throw new WeightsError(`missing tensor '${name}'`, source.origin);
      return t;
    },
  };
}

/**
 * The plugin, creating its layers with `precision` (and, with `weights`, a view of their tensors),
 * for the conformance kit and the fixture runner, which pass none.
 */
export function withPrecision(plugin: MetralePlugin, precision: Precision, weights?: (w: WeightSource) => WeightSource): MetralePlugin {
  return Object.freeze({
    ...plugin,
    create: (context: CreateLayerContext) => plugin.create({ ...context, precision, ...(weights ? { weights: weights(context.weights) } : {}) }),
  });
}
