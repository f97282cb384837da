import type { DType } from '../device/dtype.js';
import { WeightsError } from '../errors.js';
import type { HostTensor } from './host-tensor.js';

/** Named tensors a layer is built from (a safetensors file, a shard set, or a prefix view of one). */
export interface WeightSource {
  /** Where the tensors come from, for error messages (a file or directory path). */
  readonly origin: string;
  names(): readonly string[];
  has(name: string): boolean;
  /** Throws `WeightsError` naming the tensor and the origin when absent. */
  get(name: string): HostTensor;
  /** The file a tensor lives in (a shard of a checkpoint), for error messages; `origin` when absent. */
  fileOf?(name: string): string | undefined;
  /** A tensor's full name in its file, for a view that removed a prefix; the name itself when absent. */
  qualifiedName?(name: string): string;
  /** A tensor's type and shape without reading its data, where the source can. */
  info?(name: string): { readonly dtype: DType; readonly shape: readonly number[] };
  /**
   * `byteLength` bytes of the tensor from `byteOffset`, into `into` (a view of them is returned),
   * where the source can read part of a tensor (a file); the rest of the tensor is not read.
   */
  readRange?(name: string, byteOffset: number, byteLength: number, into?: Uint8Array): Uint8Array;
}

/** Tensors held in memory, keyed by name. */
export class MemoryWeightSource implements WeightSource {
  readonly #tensors: ReadonlyMap<string, HostTensor>;
  constructor(readonly origin: string, tensors: Iterable<HostTensor>) {
    this.#tensors = new Map([...tensors].map((t) => [t.name, t]));
  }
  names(): readonly string[] {
    return [...this.#tensors.keys()];
  }
  has(name: string): boolean {
    return this.#tensors.has(name);
  }
  get(name: string): HostTensor {
    const t = this.#tensors.get(name);
    if (!t) throw new WeightsError(`missing tensor '${name}'`, this.origin);
    return t;
  }
}

/** The tensors of `source` under `prefix`, with the prefix removed from their names. */
export function prefixedWeights(source: WeightSource, prefix: string): WeightSource {
  return {
    origin: source.origin,
    names: () => source.names().filter((n) => n.startsWith(prefix)).map((n) => n.slice(prefix.length)),
    has: (name) => source.has(prefix + name),
    get: (name) => {
      if (!source.has(prefix + name)) throw new WeightsError(`missing tensor '${prefix}${name}'`, source.origin);
      const t = source.get(prefix + name);
      return { ...t, name };
    },
    fileOf: (name) => source.fileOf?.(prefix + name) ?? source.origin,
    qualifiedName: (name) => source.qualifiedName?.(prefix + name) ?? prefix + name,
  };
}
