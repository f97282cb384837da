import { openSync, readSync, closeSync, fstatSync } from 'node:fs';
import { DTYPE_BYTES, type DType } from '../device/dtype.js';
import { WeightsError } from '../errors.js';
import { elementCount, type HostTensor } from './host-tensor.js';
import type { WeightSource } from './weight-source.js';

const DTYPES: Readonly<Record<string, DType>> = {
  F64: 'f64', F32: 'f32', BF16: 'bf16', F16: 'f16', I64: 'i64', I32: 'i32', U32: 'u32', I16: 'i16', U16: 'u16', I8: 'i8', U8: 'u8', BOOL: 'bool',
};
const NAMES: Readonly<Record<DType, string>> = Object.fromEntries(Object.entries(DTYPES).map(([k, v]) => [v, k])) as Record<DType, string>;

/** Largest header we accept; the format allows 100 MB, real checkpoints stay far below. */
const MAX_HEADER = 100 * 1024 * 1024;

interface Entry {
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly begin: number;
  readonly end: number;
}

/**
 * A safetensors file: an 8-byte little-endian header length, a JSON header naming each tensor's
 * dtype, shape and byte range, then the data. The header is read and checked when the file is
 * opened; tensor bytes are read when asked for.
 */
export class SafetensorsFile implements WeightSource {
  readonly origin: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly #entries: ReadonlyMap<string, Entry>;
  readonly #read: (begin: number, end: number) => Uint8Array;

  private constructor(origin: string, entries: Map<string, Entry>, metadata: Record<string, string>, read: (b: number, e: number) => Uint8Array) {
    this.origin = origin;
    this.#entries = entries;
    this.metadata = metadata;
    this.#read = read;
  }

  /** Opens a file; throws `WeightsError` naming the file when the header is corrupt. */
  static open(path: string): SafetensorsFile {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (cause) {
      throw new WeightsError(`cannot open: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, path, { cause });
    }
    try {
      const size = fstatSync(fd).size;
      const head = Buffer.alloc(8);
      if (size < 8 || readSync(fd, head, 0, 8, 0) !== 8) throw new WeightsError(`corrupt safetensors header: file is ${size} bytes, shorter than the 8-byte header length`, path);
      const headerLen = Number(head.readBigUInt64LE(0));
      if (headerLen > MAX_HEADER || 8 + headerLen > size) {
        throw new WeightsError(`corrupt safetensors header: header length ${headerLen} does not fit in a ${size}-byte file`, path);
      }
      const header = Buffer.alloc(headerLen);
      readSync(fd, header, 0, headerLen, 8);
      const dataStart = 8 + headerLen;
      const { entries, metadata } = parseHeader(header, size - dataStart, path);
      const data = Buffer.alloc(size - dataStart);
      let got = 0;
      while (got < data.length) {
        const n = readSync(fd, data, got, data.length - got, dataStart + got);
        if (n === 0) break;
        got += n;
      }
      const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      return new SafetensorsFile(path, entries, metadata, (b, e) => bytes.subarray(b, e));
    } finally {
      closeSync(fd);
    }
  }

  /** Parses a whole file already in memory. */
  static fromBytes(bytes: Uint8Array, origin = '<memory>'): SafetensorsFile {
    if (bytes.byteLength < 8) throw new WeightsError(`corrupt safetensors header: ${bytes.byteLength} bytes, shorter than the 8-byte header length`, origin);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const headerLen = Number(view.getBigUint64(0, true));
    if (headerLen > MAX_HEADER || 8 + headerLen > bytes.byteLength) {
      throw new WeightsError(`corrupt safetensors header: header length ${headerLen} does not fit in a ${bytes.byteLength}-byte file`, origin);
    }
    const dataStart = 8 + headerLen;
    const { entries, metadata } = parseHeader(bytes.subarray(8, dataStart), bytes.byteLength - dataStart, origin);
    const data = bytes.subarray(dataStart);
    return new SafetensorsFile(origin, entries, metadata, (b, e) => data.subarray(b, e));
  }

  names(): readonly string[] {
    return [...this.#entries.keys()];
  }

  has(name: string): boolean {
    return this.#entries.has(name);
  }

  get(name: string): HostTensor {
    const e = this.#entries.get(name);
    if (!e) throw new WeightsError(`missing tensor '${name}'`, this.origin);
    return { name, dtype: e.dtype, shape: e.shape, data: this.#read(e.begin, e.end) };
  }
}

function parseHeader(raw: Uint8Array, dataBytes: number, origin: string): { entries: Map<string, Entry>; metadata: Record<string, string> } {
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(raw));
  } catch (cause) {
    throw new WeightsError(`corrupt safetensors header: not valid JSON (${(cause as Error).message})`, origin, { cause });
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new WeightsError('corrupt safetensors header: expected a JSON object', origin);
  const entries = new Map<string, Entry>();
  let metadata: Record<string, string> = {};
  for (const [name, value] of Object.entries(json as Record<string, unknown>)) {
    if (name === '__metadata__') {
      metadata = (value ?? {}) as Record<string, string>;
      continue;
    }
    const v = value as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    const dtype = typeof v?.dtype === 'string' ? DTYPES[v.dtype] : undefined;
    if (!dtype) throw new WeightsError(`corrupt safetensors header: tensor '${name}' has unsupported dtype ${JSON.stringify(v?.dtype)}`, origin);
    if (!Array.isArray(v.shape) || !v.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new WeightsError(`corrupt safetensors header: tensor '${name}' has an invalid shape ${JSON.stringify(v.shape)}`, origin);
    }
    const offs = v.data_offsets;
    if (!Array.isArray(offs) || offs.length !== 2 || !offs.every((d) => Number.isSafeInteger(d) && d >= 0) || offs[0] > offs[1] || offs[1] > dataBytes) {
      throw new WeightsError(`corrupt safetensors header: tensor '${name}' has data_offsets ${JSON.stringify(offs)} outside the ${dataBytes}-byte data section`, origin);
    }
    const shape = v.shape as number[];
    const expected = elementCount(shape) * DTYPE_BYTES[dtype];
    if (offs[1] - offs[0] !== expected) {
      throw new WeightsError(`corrupt safetensors header: tensor '${name}' spans ${offs[1] - offs[0]} bytes, but ${dtype}[${shape.join(', ')}] needs ${expected}`, origin);
    }
    entries.set(name, { dtype, shape, begin: offs[0], end: offs[1] });
  }
  return { entries, metadata };
}

/** Serialises tensors into safetensors bytes (header padded to 8 bytes, tensors in the given order). */
export function encodeSafetensors(tensors: readonly HostTensor[], metadata?: Record<string, string>): Uint8Array {
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of tensors) {
    const bytes = elementCount(t.shape) * DTYPE_BYTES[t.dtype];
    if (bytes !== t.data.byteLength) throw new WeightsError(`tensor '${t.name}': ${t.data.byteLength} data bytes for ${t.dtype}[${t.shape.join(', ')}] (needs ${bytes})`);
    header[t.name] = { dtype: NAMES[t.dtype], shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  while ((8 + Buffer.byteLength(json)) % 8 !== 0) json += ' ';
  const head = Buffer.from(json, 'utf8');
  const out = new Uint8Array(8 + head.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(head.length), true);
  out.set(head, 8);
  let at = 8 + head.length;
  for (const t of tensors) {
    out.set(t.data, at);
    at += t.data.byteLength;
  }
  return out;
}

/** A HostTensor from a typed array, for writing fixtures and tests. */
export function tensorOf(name: string, values: Float32Array | Int32Array | Uint16Array | Float64Array, shape: readonly number[], dtype?: DType): HostTensor {
  const inferred: DType = dtype ?? (values instanceof Float32Array ? 'f32' : values instanceof Int32Array ? 'i32' : values instanceof Float64Array ? 'f64' : 'bf16');
  return { name, dtype: inferred, shape, data: new Uint8Array(values.buffer, values.byteOffset, values.byteLength) };
}
