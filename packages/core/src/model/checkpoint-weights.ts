import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { WeightsError } from '../errors.js';
import type { HostTensor } from '../weights/host-tensor.js';
import { SafetensorsFile, type TensorInfo } from '../weights/safetensors.js';
import type { WeightSource } from '../weights/weight-source.js';

/**
 * A checkpoint's tensors: one safetensors file, or the shards a `model.safetensors.index.json`
 * lists. Only headers are read up front (a shard's when one of its tensors is first asked for);
 * each `get` reads that tensor's bytes, so a layer holds one tensor at a time on the host.
 */
export class CheckpointWeights implements WeightSource {
  readonly origin: string;
  readonly #where: ReadonlyMap<string, string>;
  readonly #files = new Map<string, SafetensorsFile>();
  readonly #dir: string;

  private constructor(origin: string, dir: string, where: Map<string, string>, opened?: SafetensorsFile) {
    this.origin = origin;
    this.#dir = dir;
    this.#where = where;
    if (opened) this.#files.set(opened.origin, opened);
  }

  /** One file: every tensor lives in it. */
  static single(path: string, dir: string): CheckpointWeights {
    const file = SafetensorsFile.open(path);
    return new CheckpointWeights(path, dir, new Map(file.names().map((n) => [n, path])), file);
  }

  /** Shards from `model.safetensors.index.json` (`weight_map`: tensor → shard file name). */
  static sharded(indexPath: string, dir: string, index: unknown): CheckpointWeights {
    const map = (index as { weight_map?: unknown } | null)?.weight_map;
    if (typeof map !== 'object' || map === null || Array.isArray(map)) throw new WeightsError(`no 'weight_map' object`, indexPath);
    const where = new Map<string, string>();
    const missing = new Set<string>();
    for (const [name, shard] of Object.entries(map as Record<string, unknown>)) {
      if (typeof shard !== 'string' || !shard || shard.includes('/') || shard.includes('\\')) {
        throw new WeightsError(`weight_map['${name}'] must be a file name in the checkpoint directory, got ${JSON.stringify(shard)}`, indexPath);
      }
      const path = join(dir, shard);
      if (!existsSync(path)) missing.add(shard);
      where.set(name, path);
    }
    if (missing.size) throw new WeightsError(`lists shard(s) ${[...missing].map((m) => `'${m}'`).join(', ')} that are not in ${dir}`, indexPath);
    return new CheckpointWeights(indexPath, dir, where);
  }

  names(): readonly string[] {
    return [...this.#where.keys()];
  }

  has(name: string): boolean {
    return this.#where.has(name);
  }

  fileOf(name: string): string | undefined {
    return this.#where.get(name);
  }

  /** The shard files, in the order they were first listed. */
  files(): readonly string[] {
    return [...new Set(this.#where.values())];
  }

  /** A tensor's dtype and shape from its shard's header, without reading its data. */
  info(name: string): TensorInfo {
    return this.#shard(name).info(name);
  }

  get(name: string): HostTensor {
    return this.#shard(name).get(name);
  }

  /** Part of a tensor's bytes (see `SafetensorsFile.readRange`); the rest is not read. */
  readRange(name: string, byteOffset: number, byteLength: number, into?: Uint8Array): Uint8Array {
    return this.#shard(name).readRange(name, byteOffset, byteLength, into);
  }

  #shard(name: string): SafetensorsFile {
    const path = this.#where.get(name);
    if (!path) throw new WeightsError(`missing tensor '${name}'`, this.origin);
    const file = this.#open(path);
    if (!file.has(name)) throw new WeightsError(`tensor '${name}' is listed in ${this.origin} but missing from this shard`, path);
    return file;
  }

  #open(path: string): SafetensorsFile {
    let file = this.#files.get(path);
    if (!file) {
      file = SafetensorsFile.open(path);
      this.#files.set(path, file);
    }
    return file;
  }

  /** Closes every open shard (a later read reopens it). */
  close(): void {
    for (const f of this.#files.values()) f.close();
  }

  get directory(): string {
    return this.#dir;
  }
}

/**
 * The tensors under `prefix` with the prefix removed, keeping `fileOf`; its `origin` is the file
 * that holds them when they all live in one, so a layer's own error messages name that file.
 */
export function scopeWeights(source: WeightSource, prefix: string): WeightSource {
  let origin: string | undefined;
  const originOf = (): string => {
    if (origin === undefined) {
      const files = new Set<string>();
      for (const n of source.names()) if (n.startsWith(prefix)) files.add(source.fileOf?.(n) ?? source.origin);
      origin = files.size === 1 ? [...files][0]! : source.origin;
    }
    return origin;
  };
  return {
    get origin() {
      return originOf();
    },
    names: () => source.names().filter((n) => n.startsWith(prefix)).map((n) => n.slice(prefix.length)),
    has: (name) => source.has(prefix + name),
    get: (name) => {
      if (!source.has(prefix + name)) throw new WeightsError(`missing tensor '${prefix}${name}'`, source.fileOf?.(prefix + name) ?? originOf());
      return { ...source.get(prefix + name), name };
    },
    fileOf: (name) => source.fileOf?.(prefix + name) ?? source.origin,
    qualifiedName: (name) => source.qualifiedName?.(prefix + name) ?? prefix + name,
  };
}
