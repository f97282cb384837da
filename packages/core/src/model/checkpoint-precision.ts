import { DTYPE_BYTES, floatBytes } from '../device/dtype.js';
import { WeightsError } from '../errors.js';
import { elementCount } from '../weights/host-tensor.js';
import type { CheckpointWeights } from './checkpoint-weights.js';
import { FP8_BLOCK, type Precision } from './precision.js';

const FLOATS = new Set(['f32', 'bf16', 'f16']);
const SCALE_SUFFIX = '_scale_inv';

/**
 * Checks, from the shards' headers alone, every block-FP8 tensor of a checkpoint: each F8_E4M3
 * weight is 2-D and has its `<name>_scale_inv`, F32 (or bf16 / f16) of shape [⌈rows/128⌉,
 * ⌈cols/128⌉], and every `_scale_inv` belongs to an FP8 weight. Throws `WeightsError` naming the
 * tensor and its shard, before anything is read or uploaded.
 */
export function checkFp8Tensors(weights: CheckpointWeights): void {
  for (const name of weights.names()) {
    const info = weights.info(name);
    const file = weights.fileOf(name);
    if (info.dtype === 'f8e4m3') {
      if (info.shape.length !== 2) throw new WeightsError(`FP8 tensor '${name}' has shape [${info.shape.join(', ')}]; block-FP8 weights are 2-D [out, in]`, file);
      const scaleName = name + SCALE_SUFFIX;
      const want = [Math.ceil(info.shape[0]! / FP8_BLOCK), Math.ceil(info.shape[1]! / FP8_BLOCK)];
      if (!weights.has(scaleName)) throw new WeightsError(`missing tensor '${scaleName}': the FP8 weight '${name}' needs its f32 block scales, shape [${want.join(', ')}]`, file);
      const scale = weights.info(scaleName);
      const same = scale.shape.length === 2 && scale.shape[0] === want[0] && scale.shape[1] === want[1];
      if (!same) {
        throw new WeightsError(
          `tensor '${scaleName}' has shape [${scale.shape.join(', ')}], expected [${want.join(', ')}] (one scale per 128 × 128 block of a [${info.shape.join(', ')}] weight)`,
          weights.fileOf(scaleName),
        );
      }
      if (!FLOATS.has(scale.dtype)) throw new WeightsError(`tensor '${scaleName}' is ${scale.dtype}; block scales are f32`, weights.fileOf(scaleName));
    } else if (name.endsWith(SCALE_SUFFIX)) {
      const weight = name.slice(0, -SCALE_SUFFIX.length);
      if (!weights.has(weight)) throw new WeightsError(`tensor '${name}' scales a weight '${weight}' the checkpoint does not have`, file);
      if (weights.info(weight).dtype !== 'f8e4m3') {
        throw new WeightsError(`tensor '${name}' scales '${weight}', which is ${weights.info(weight).dtype}, not F8_E4M3; the checkpoint's quantization is inconsistent`, file);
      }
    }
  }
}

/** Device bytes of a checkpoint's weights in a precision, by kind, estimated from the headers (per rank: see `weightBytes`'s `share`). */
export interface WeightBytes {
  /** Float weights, in `precision.rows`. */
  readonly float: number;
  /** FP8 codes and their block scales (zero unless `precision.fp8Weights`). */
  readonly fp8: number;
  readonly total: number;
}

/**
 * What the checkpoint's tensors take on the device in `precision`: float tensors in the rows
 * type, FP8 ones as codes plus scales (or in the rows type when dequantized), other tensors as
 * stored. An estimate: a layer may keep a small tensor in f32, and `skip` leaves out tensors no
 * layer reads (a vision tower, MTP heads). `share` is the part of a tensor one device holds (1/n
 * for a tensor split over n tensor-parallel ranks; default 1).
 */
export function weightBytes(
  weights: CheckpointWeights, precision: Precision, skip: (name: string) => boolean = () => false, share: (name: string) => number = () => 1,
): WeightBytes {
  let float = 0;
  let fp8 = 0;
  for (const name of weights.names()) {
    if (skip(name)) continue;
    const info = weights.info(name);
    const n = elementCount(info.shape) * share(name);
    if (info.dtype === 'f8e4m3') {
      if (precision.fp8Weights) fp8 += n;
      else float += n * floatBytes(precision.rows);
    } else if (name.endsWith(SCALE_SUFFIX) && weights.has(name.slice(0, -SCALE_SUFFIX.length))) {
      if (precision.fp8Weights) fp8 += n * 4;
    } else if (FLOATS.has(info.dtype)) {
      float += n * floatBytes(precision.rows);
    } else {
      float += n * DTYPE_BYTES[info.dtype];
    }
  }
  return { float, fp8, total: float + fp8 };
}

/** Bytes as GiB with two decimals, for messages. */
export function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}
