import { WeightsError } from '../errors.js';
import { elementCount, toF32, type HostTensor } from '../weights/host-tensor.js';
import type { WeightSource } from '../weights/weight-source.js';

const FLOAT_TYPES = new Set(['bf16', 'f16', 'f32']);

/** Where a tensor lives, for messages: its shard file when the source knows it. */
export function fileOfTensor(source: WeightSource, name: string): string {
  return source.fileOf?.(name) ?? source.origin;
}

/**
 * Tensor `name` of `source` as f32, checked: present, of shape `shape`, stored as bf16, f16 or f32
 * (converted exactly), every value finite. Each failure throws `WeightsError` naming the tensor
 * and the file it is in (or would be in).
 */
export function readF32(source: WeightSource, name: string, shape: readonly number[]): Float32Array {
  const full = source.qualifiedName?.(name) ?? name;
  if (!source.has(name)) throw new WeightsError(`missing tensor '${full}' (expected shape [${shape.join(', ')}])`, fileOfTensor(source, name));
  const t = source.get(name);
  checkTensor(source, name, full, t, shape);
  const v = toF32(t);
  for (let i = 0; i < v.length; i++) {
    if (!Number.isFinite(v[i]!)) throw new WeightsError(`tensor '${full}' holds a non-finite value (${v[i]}) at element ${i}`, fileOfTensor(source, name));
  }
  return v;
}

/** Like `readF32`, or undefined when the tensor is absent (optional biases, tied heads). */
export function readOptionalF32(source: WeightSource, name: string, shape: readonly number[]): Float32Array | undefined {
  return source.has(name) ? readF32(source, name, shape) : undefined;
}

function checkTensor(source: WeightSource, name: string, full: string, t: HostTensor, shape: readonly number[]): void {
  const same = t.shape.length === shape.length && t.shape.every((d, i) => d === shape[i]);
  // A [n] tensor stored as [n, 1] or [1, n] (HF Linear with one output) is the same data.
  const squeezable = !same && elementCount(t.shape) === elementCount(shape) && t.shape.filter((d) => d !== 1).join() === shape.filter((d) => d !== 1).join();
  if (!same && !squeezable) {
    throw new WeightsError(`tensor '${full}' has shape [${t.shape.join(', ')}], expected [${shape.join(', ')}]`, fileOfTensor(source, name));
  }
  if (!FLOAT_TYPES.has(t.dtype)) {
    throw new WeightsError(`tensor '${full}' is ${t.dtype}; expected bf16, f16 or f32`, fileOfTensor(source, name));
  }
}
