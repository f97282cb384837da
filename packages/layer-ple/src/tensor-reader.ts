import { DTYPE_BYTES, WeightsError, elementCount, type DType, type HostTensor, type WeightSource } from '@metrale/core';

/** A tensor's description, read without its data where the source allows it. */
export interface TensorDescription {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly byteLength: number;
}

/**
 * A weight source that can describe a tensor and read part of it without reading the rest, as
 * core's `SafetensorsFile` does (`info`, `readRange`). The per-layer table is read this way, one
 * row per cache miss; a source without these methods has its tensors read whole.
 */
export interface RangedWeightSource extends WeightSource {
  info(name: string): TensorDescription;
  readRange(name: string, byteOffset: number, byteLength: number, into?: Uint8Array): Uint8Array;
}

/** True when `source` reads ranges (a `SafetensorsFile`, or a view made by `rangedPrefix`). */
export function isRanged(source: WeightSource): source is RangedWeightSource {
  const s = source as Partial<RangedWeightSource>;
  return typeof s.info === 'function' && typeof s.readRange === 'function';
}

/**
 * The tensors of `source` under `prefix`, with the prefix removed from their names, keeping ranged
 * reads (core's `prefixedWeights` keeps only `get`). Use it to hand the layer a checkpoint's
 * `model.language_model.` tensors without reading the per-layer table whole.
 */
export function rangedPrefix(source: RangedWeightSource, prefix: string): RangedWeightSource {
  const full = (name: string): string => {
    if (!source.has(prefix + name)) throw new WeightsError(`missing tensor '${prefix}${name}'`, source.origin);
    return prefix + name;
  };
  return {
    origin: source.origin,
    names: () => source.names().filter((n) => n.startsWith(prefix)).map((n) => n.slice(prefix.length)),
    has: (name) => source.has(prefix + name),
    get: (name) => ({ ...source.get(full(name)), name }),
    info: (name) => ({ ...source.info(full(name)), name }),
    readRange: (name, byteOffset, byteLength, into) => source.readRange(full(name), byteOffset, byteLength, into),
  };
}

/** Reads whole tensors or row ranges from any weight source, ranged where it can be. */
export class TensorReader {
  readonly #source: WeightSource;
  readonly #ranged: RangedWeightSource | undefined;
  /** Whole tensors already read from a source without ranged reads. */
  readonly #whole = new Map<string, HostTensor>();

  constructor(source: WeightSource) {
    this.#source = source;
    this.#ranged = isRanged(source) ? source : undefined;
  }

  get origin(): string {
    return this.#source.origin;
  }

  /** Whether rows are read from the source on demand (true) or from a tensor held whole (false). */
  get ranged(): boolean {
    return this.#ranged !== undefined;
  }

  has(name: string): boolean {
    return this.#source.has(name);
  }

  describe(name: string): TensorDescription {
    if (!this.#source.has(name)) throw new WeightsError(`missing tensor '${name}'`, this.#source.origin);
    if (this.#ranged) return this.#ranged.info(name);
    const t = this.whole(name);
    return { name, dtype: t.dtype, shape: t.shape, byteLength: t.data.byteLength };
  }

  whole(name: string): HostTensor {
    const held = this.#whole.get(name);
    if (held) return held;
    const t = this.#source.get(name);
    const expected = elementCount(t.shape) * DTYPE_BYTES[t.dtype];
    if (t.data.byteLength !== expected) {
      throw new WeightsError(`tensor '${name}' holds ${t.data.byteLength} bytes, but ${t.dtype}[${t.shape.join(', ')}] needs ${expected}`, this.#source.origin);
    }
    if (!this.#ranged) this.#whole.set(name, t);
    return t;
  }

  /**
   * A reader of single rows of `name` into a caller's buffer (the hot path of a cache miss): one
   * positional read of exactly one row for a ranged source, a copy from the held tensor otherwise.
   */
  rowReader(name: string): (row: number, into: Uint8Array) => void {
    const d = this.describe(name);
    const rows = d.shape[0] ?? 1;
    const rowBytes = rows === 0 ? 0 : d.byteLength / rows;
    const ranged = this.#ranged;
    if (ranged) return (row, into) => void ranged.readRange(name, row * rowBytes, rowBytes, into);
    const data = this.whole(name).data;
    return (row, into) => into.set(data.subarray(row * rowBytes, (row + 1) * rowBytes));
  }

  /** Rows `first .. first + count - 1` along dimension 0, as raw bytes (into `into` when given). */
  rows(name: string, first: number, count: number, into?: Uint8Array): Uint8Array {
    const d = this.describe(name);
    const rows = d.shape[0] ?? 1;
    const rowBytes = rows === 0 ? 0 : d.byteLength / rows;
    if (this.#ranged) return this.#ranged.readRange(name, first * rowBytes, count * rowBytes, into);
    const src = this.whole(name).data.subarray(first * rowBytes, (first + count) * rowBytes);
    if (!into) return src.slice();
    into.set(src);
    return into.subarray(0, src.byteLength);
  }
}
