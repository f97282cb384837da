import { DTYPE_BYTES } from '../device/dtype.js';
import { WeightsError } from '../errors.js';
import { elementCount, type HostTensor } from '../weights/host-tensor.js';
import type { WeightSource } from '../weights/weight-source.js';
import { FP8_BLOCK } from '../model/precision.js';

/**
 * How one tensor is split among the ranks: along `axis`, each run of `segments` (consecutive
 * lengths along that axis, default the whole axis as one run) is cut into `size` equal parts and
 * rank r keeps part r of every run. Row-parallel q/k/v or gate/up projections split axis 0; the
 * column-parallel o_proj / down_proj axis 1; a fused [gate; up] is two runs.
 */
export interface ShardSpec {
  readonly axis: number;
  /** Consecutive run lengths along `axis`; they must add up to its length. */
  readonly segments?: readonly number[];
  /** Instead of `segments`: the axis is this many equal runs (2 for a fused [gate; up]). */
  readonly runs?: number;
  /**
   * At most this many parts (default: one per rank). With more ranks than that (a multiple of it),
   * consecutive ranks share a part: rank r keeps part ⌊r · maxParts / size⌋. Attention's K and V
   * projections when the ranks outnumber the KV heads: each KV head is kept whole by size / heads
   * ranks, as vLLM replicates them.
   */
  readonly maxParts?: number;
}

/** How many parts a spec cuts its runs into among `size` ranks, and which one `rank` keeps. */
function partOf(spec: ShardSpec, rank: number, size: number, tensor: string, file: string): { parts: number; part: number } {
  const max = spec.maxParts;
  if (max === undefined || max >= size) return { parts: size, part: rank };
  if (!Number.isInteger(max) || max < 1 || size % max !== 0) {
    throw new WeightsError(`tensor '${tensor}' has ${max} parts to share among ${size} ranks; the tensor-parallel size must be a multiple of ${max}`, file);
  }
  return { parts: max, part: Math.floor((rank * max) / size) };
}

/** A tensor's spec by its checkpoint name; undefined: every rank keeps the whole tensor. */
export type ShardRule = (name: string) => ShardSpec | undefined;

const SCALE_SUFFIX = '_scale_inv';

/**
 * `source` as rank `rank` of `size` reads it: each tensor `rule` splits comes back as this rank's
 * part (its shape with the split axis shortened); the others unchanged. An FP8 weight's
 * `<name>_scale_inv` is split with it, in 128-blocks. A part along the first axis is read as byte
 * ranges of the file where the source can (nothing else of the tensor is read); along another
 * axis the tensor is read once and the part copied out of it.
 */
export function shardWeights(source: WeightSource, rule: ShardRule, rank: number, size: number): WeightSource {
  if (size === 1) return source;
  const where = (name: string) => source.fileOf?.(name) ?? source.origin;
  const full = (name: string) => source.qualifiedName?.(name) ?? name;
  const get = (name: string): HostTensor => {
    const spec = rule(name);
    if (spec) return readPart(source, name, spec, rank, size);
    if (name.endsWith(SCALE_SUFFIX)) {
      const weight = name.slice(0, -SCALE_SUFFIX.length);
      const weightSpec = source.has(weight) ? rule(weight) : undefined;
      if (weightSpec) {
        const shape = source.info?.(weight).shape ?? source.get(weight).shape;
        return readPart(source, name, scaleSpec(weightSpec, shape, full(weight), where(name), size), rank, size);
      }
    }
    return source.get(name);
  };
  return {
    origin: source.origin,
    names: () => source.names(),
    has: (name) => source.has(name),
    get,
    fileOf: (name) => where(name),
    qualifiedName: (name) => full(name),
  };
}

/** The 128-block spec of an FP8 weight's scale grid, when every rank's part of every run is whole blocks. */
function scaleSpec(spec: ShardSpec, weightShape: readonly number[], weight: string, file: string, size: number): ShardSpec {
  const length = weightShape[spec.axis] ?? 0;
  const runs = spec.runs ?? 1;
  const segments = spec.segments ?? Array.from({ length: runs }, () => length / runs);
  const { parts } = partOf(spec, 0, size, weight, file);
  for (const s of segments) {
    if (s % (FP8_BLOCK * parts) !== 0) {
      throw new WeightsError(
        `FP8 tensor '${weight}': a run of ${s} along dimension ${spec.axis} split ${parts} ways is not whole ${FP8_BLOCK}-blocks, so its block scales cannot be split; ` +
          `use a tensor-parallel size whose parts are multiples of ${FP8_BLOCK}, or a bf16 checkpoint`,
        file,
      );
    }
  }
  return { axis: spec.axis, segments: segments.map((s) => s / FP8_BLOCK), ...(spec.maxParts !== undefined ? { maxParts: spec.maxParts } : {}) };
}

function readPart(source: WeightSource, name: string, spec: ShardSpec, rank: number, size: number): HostTensor {
  const file = source.fileOf?.(name) ?? source.origin;
  const qualified = source.qualifiedName?.(name) ?? name;
  if (!source.has(name)) throw new WeightsError(`missing tensor '${qualified}'`, file);
  const info = source.info?.(name);
  const tensor = info ? undefined : source.get(name);
  const shape = info?.shape ?? tensor!.shape;
  const dtype = info?.dtype ?? tensor!.dtype;
  const { axis } = spec;
  if (!Number.isInteger(axis) || axis < 0 || axis >= shape.length) {
    throw new WeightsError(`tensor '${qualified}' has shape [${shape.join(', ')}]: no dimension ${axis} to split among ranks`, file);
  }
  const length = shape[axis]!;
  const runs = spec.runs ?? 1;
  if (spec.segments === undefined && (!Number.isInteger(runs) || runs < 1 || length % runs !== 0)) {
    throw new WeightsError(`tensor '${qualified}' has ${length} along dimension ${axis}, which is not ${runs} equal runs`, file);
  }
  const segments = spec.segments ?? Array.from({ length: runs }, () => length / runs);
  const { parts, part: share } = partOf(spec, rank, size, qualified, file);
  const total = segments.reduce((a, b) => a + b, 0);
  if (total !== length) {
    throw new WeightsError(`tensor '${qualified}' has ${length} along dimension ${axis}, but its parts for the ranks add up to ${total} (${segments.join(' + ')})`, file);
  }
  for (const s of segments) {
    if (s % parts !== 0) {
      throw new WeightsError(`tensor '${qualified}' (shape [${shape.join(', ')}]): a run of ${s} along dimension ${axis} does not split into ${parts} equal parts for the ranks`, file);
    }
  }
  const outer = elementCount(shape.slice(0, axis));
  const innerBytes = elementCount(shape.slice(axis + 1)) * DTYPE_BYTES[dtype];
  const partLength = segments.reduce((a, s) => a + s / parts, 0);
  const data = new Uint8Array(outer * partLength * innerBytes);
  // Each (outer index, run) contributes one contiguous piece of the part.
  let at = 0;
  const pieces: { from: number; bytes: number }[] = [];
  for (let o = 0; o < outer; o++) {
    let start = 0;
    for (const s of segments) {
      const part = s / parts;
      pieces.push({ from: (o * length + start + share * part) * innerBytes, bytes: part * innerBytes });
      start += s;
    }
  }
  if (tensor === undefined && axis === 0 && source.readRange) {
    for (const p of pieces) {
      source.readRange(name, p.from, p.bytes, data.subarray(at, at + p.bytes));
      at += p.bytes;
    }
  } else {
    const whole = tensor ?? source.get(name);
    for (const p of pieces) {
      data.set(whole.data.subarray(p.from, p.from + p.bytes), at);
      at += p.bytes;
    }
  }
  const partShape = shape.map((d, i) => (i === axis ? partLength : d));
  return { name, dtype, shape: partShape, data };
}
