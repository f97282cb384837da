import {
  WeightsError,
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  toF32,
  type DType,
} from '@metrale/core';
import type { PleConfig } from './ple-config.js';
import type { TensorDescription, TensorReader } from './tensor-reader.js';

/** Tensor names, as in Hugging Face's `Gemma3nTextModel` with the model's prefix removed. */
export const PLE_TENSORS = Object.freeze({
  /** [vocab_size, D]: the token embedding, scaled by sqrt(D) on lookup. */
  embed: 'embed_tokens.weight',
  /** [vocab_size_per_layer_input, L·P]: the per-layer table, scaled by sqrt(P) on lookup. Stays on the host. */
  table: 'embed_tokens_per_layer.weight',
  /** [L·P, D]: projection of the scaled embedding to every layer's P values. */
  projection: 'per_layer_model_projection.weight',
  /** [P]: RMSNorm weight of the projection (x/rms · w). */
  projectionNorm: 'per_layer_projection_norm.weight',
  /** [P, D] of decoder layer l. */
  gate: (l: number) => `layers.${l}.per_layer_input_gate.weight`,
  /** [D, P] of decoder layer l. */
  projectionOut: (l: number) => `layers.${l}.per_layer_projection.weight`,
  /** [D] of decoder layer l. */
  postNorm: (l: number) => `layers.${l}.post_per_layer_input_norm.weight`,
});

/** Element types the kernels read in place (embedding and table rows): f32, bf16, f16. */
export type StorageDtype = 'f32' | 'bf16' | 'f16';

/** How the kernels number storage dtypes (kernels/ple-project.cu `load_elem`). */
export const DTYPE_CODE: Readonly<Record<StorageDtype, number>> = { f32: 0, bf16: 1, f16: 2 };

export const STORAGE_BYTES: Readonly<Record<StorageDtype, number>> = { f32: 4, bf16: 2, f16: 2 };

/** One element of a storage dtype, from raw little-endian bytes at element index `i`. */
export function loadElem(bytes: DataView, i: number, dtype: StorageDtype): number {
  switch (dtype) {
    case 'f32':
      return bytes.getFloat32(i * 4, true);
    case 'bf16':
      return bf16BitsToF32(bytes.getUint16(i * 2, true));
    case 'f16':
      return f16BitsToF32(bytes.getUint16(i * 2, true));
  }
}

/**
 * A scalar as Hugging Face holds it: built as a float32 tensor (`torch.tensor(x)`), then cast to
 * the dtype it multiplies (`embed_scale.to(weight.dtype)`, `per_layer_projection_scale.to(inputs_embeds.dtype)`).
 */
export function scalarAs(x: number, dtype: StorageDtype): number {
  const f = Math.fround(x);
  if (dtype === 'bf16') return bf16BitsToF32(f32ToBf16Bits(f));
  if (dtype === 'f16') return f16BitsToF32(f32ToF16Bits(f));
  return f;
}

const f32Box = new Float32Array(1);
const u32Box = new Uint32Array(f32Box.buffer);

/** f32 → f16 bits, rounding to nearest even (subnormals, overflow to infinity, NaN kept). */
export function f32ToF16Bits(x: number): number {
  f32Box[0] = x;
  const b = u32Box[0]!;
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rem > halfway || (rem === halfway && (half & 1) === 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1)) half++; // a carry into the exponent is right
  return sign | half;
}

/** The model-level tensors, described (the table and the embedding are not read here). */
export interface PleModelTensors {
  readonly embed: TensorDescription & { readonly dtype: StorageDtype };
  readonly table: TensorDescription & { readonly dtype: StorageDtype };
  readonly projection: TensorDescription;
  readonly projectionNorm: TensorDescription;
}

/** Layer l's own weights, as f32. */
export interface PleLayerWeights {
  /** [P, D]: rows l·P .. (l+1)·P − 1 of `per_layer_model_projection.weight`. */
  readonly projection: Float32Array;
  /** [P, D]. */
  readonly gate: Float32Array;
  /** [D, P]. */
  readonly projectionOut: Float32Array;
  /** [D]. */
  readonly postNorm: Float32Array;
}

const STORAGE = new Set<DType>(['f32', 'bf16', 'f16']);
const FLOATS = new Set<DType>(['f32', 'bf16', 'f16', 'f64']);

/**
 * Checks every tensor the layer reads against the config before anything is read or allocated:
 * present, floating point, and of the shape the config implies. Each error names the tensor, its
 * shape and the config fields the expected shape comes from.
 */
export function describePleTensors(reader: TensorReader, cfg: PleConfig): PleModelTensors {
  const { hidden: D, perLayer: P, layers: L, vocab: V, tableVocab: Vp, layerIndex: l } = cfg;
  const check = (name: string, shape: readonly number[], fields: string, storage = false): TensorDescription => {
    let d: TensorDescription;
    try {
      d = reader.describe(name);
    } catch (error) {
      if (!(error instanceof WeightsError) || reader.ranged || name !== PLE_TENSORS.table || !reader.has(name)) throw error;
      throw new WeightsError(
        `${error.message}; the per-layer table is read one row at a time from a source with ranged reads ` +
          `(info and readRange: core's SafetensorsFile, or rangedPrefix(file, prefix) from @metrale/layer-ple)`,
        undefined,
        { cause: error },
      );
    }
    const same = d.shape.length === shape.length && d.shape.every((x, i) => x === shape[i]);
    if (!same) {
      throw new WeightsError(
        `tensor '${name}' has shape [${d.shape.join(', ')}], but the config needs [${shape.join(', ')}] (${fields}); the weights do not belong to this config`,
        reader.origin,
      );
    }
    if (storage && !STORAGE.has(d.dtype)) {
      throw new WeightsError(`tensor '${name}' is ${d.dtype}; the layer reads it in place as bf16, f16 or f32`, reader.origin);
    }
    if (!FLOATS.has(d.dtype)) throw new WeightsError(`tensor '${name}' is ${d.dtype}; expected a floating-point type`, reader.origin);
    return d;
  };
  const table = check(PLE_TENSORS.table, [Vp, L * P], `[vocab_size_per_layer_input ${Vp}, num_hidden_layers ${L} × hidden_size_per_layer_input ${P}]`, true);
  const embed = check(PLE_TENSORS.embed, [V, D], `[vocab_size ${V}, hidden_size ${D}]`, true);
  const projection = check(PLE_TENSORS.projection, [L * P, D], `[num_hidden_layers ${L} × hidden_size_per_layer_input ${P}, hidden_size ${D}]`);
  const projectionNorm = check(PLE_TENSORS.projectionNorm, [P], `[hidden_size_per_layer_input ${P}]`);
  check(PLE_TENSORS.gate(l), [P, D], `[hidden_size_per_layer_input ${P}, hidden_size ${D}]`);
  check(PLE_TENSORS.projectionOut(l), [D, P], `[hidden_size ${D}, hidden_size_per_layer_input ${P}]`);
  check(PLE_TENSORS.postNorm(l), [D], `[hidden_size ${D}]`);
  return {
    embed: embed as PleModelTensors['embed'],
    table: table as PleModelTensors['table'],
    projection,
    projectionNorm,
  };
}

/** Reads a tensor (or rows of it) as f32, refusing non-finite values. */
function f32Rows(reader: TensorReader, d: TensorDescription, first: number, count: number): Float32Array {
  const rowElems = d.shape.slice(1).reduce((a, b) => a * b, 1);
  const data = d.shape.length === 0 || (first === 0 && count === (d.shape[0] ?? 1)) ? reader.whole(d.name).data : reader.rows(d.name, first, count);
  const values = toF32({ name: d.name, dtype: d.dtype, shape: [count, rowElems], data });
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i]!)) {
      throw new WeightsError(`tensor '${d.name}' holds ${values[i]} at element ${first * rowElems + i}`, reader.origin);
    }
  }
  return values;
}

/** Layer l's own weights (its slice of the model projection included), as f32. */
export function readLayerWeights(reader: TensorReader, cfg: PleConfig, model: PleModelTensors): PleLayerWeights {
  const l = cfg.layerIndex;
  const P = cfg.perLayer;
  return {
    projection: f32Rows(reader, model.projection, l * P, P),
    gate: f32Rows(reader, reader.describe(PLE_TENSORS.gate(l)), 0, P),
    projectionOut: f32Rows(reader, reader.describe(PLE_TENSORS.projectionOut(l)), 0, cfg.hidden),
    postNorm: f32Rows(reader, reader.describe(PLE_TENSORS.postNorm(l)), 0, cfg.hidden),
  };
}

/** `per_layer_projection_norm.weight` as f32. */
export function readProjectionNorm(reader: TensorReader, model: PleModelTensors): Float32Array {
  return f32Rows(reader, model.projectionNorm, 0, model.projectionNorm.shape[0]!);
}
