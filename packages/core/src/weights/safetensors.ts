import { constants } from 'node:buffer';
import { openSync, readSync, closeSync, fstatSync } from 'node:fs';
import { DTYPE_BYTES, type DType } from '../device/dtype.js';
import { WeightsError } from '../errors.js';
import { elementCount, type HostTensor } from './host-tensor.js';
import type { WeightSource } from './weight-source.js';

const DTYPES: Readonly<Record<string, DType>> = {
  F64: 'f64', F32: 'f32', BF16: 'bf16', F16: 'f16', F8_E4M3: 'f8e4m3', I64: 'i64', I32: 'i32', U32: 'u32', I16: 'i16', U16: 'u16', I8: 'i8', U8: 'u8', BOOL: 'bool',
};
const NAMES: Readonly<Record<DType, string>> = Object.fromEntries(Object.entries(DTYPES).map(([k, v]) => [v, k])) as Record<DType, string>;

/** Largest header we accept; the format allows 100 MB, real checkpoints stay far below. */
const MAX_HEADER = 100 * 1024 * 1024;

interface Entry {
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** Byte range of the tensor within the data section. */
  readonly begin: number;
  readonly end: number;
}

/** A tensor's description from the header, without its data. */
export interface TensorInfo {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly byteLength: number;
}

/** Bytes per positional read: `read(2)` moves at most ~2 GiB per call on Linux. */
const READ_CHUNK = 1 << 30;

/** Where the data section lives: a file read with positional reads, or bytes in memory. */
interface DataSource {
  /** Copies `into.byteLength` bytes starting at data-section offset `at` into `into`. */
  read(at: number, into: Uint8Array): void;
  /** A view of the bytes when they are already in memory (fromBytes), else undefined. */
  view?(begin: number, end: number): Uint8Array;
  close(): void;
}

/** File descriptors of files no one closed; closed when their SafetensorsFile is collected. */
const openFiles = new FinalizationRegistry<{ fd: number | undefined }>((held) => {
  if (held.fd !== undefined) {
    try {
      closeSync(held.fd);
    } catch {
      // already closed
    }
    held.fd = undefined;
  }
});

/**
 * The data section of a file on disk, read on demand with positional reads (`pread`): nothing is
 * read at open beyond the header, and each read goes through the page cache, which plays the part
 * of a memory map. The descriptor stays open until `close()` (or until the object is collected);
 * a read after `close()` reopens the file, and refuses it if its size changed.
 */
class FileData implements DataSource {
  readonly #held: { fd: number | undefined };
  constructor(
    readonly path: string,
    fd: number,
    readonly dataStart: number,
    readonly size: number,
    owner: object,
  ) {
    this.#held = { fd };
    openFiles.register(owner, this.#held, this);
  }

  #fd(): number {
    if (this.#held.fd !== undefined) return this.#held.fd;
    let fd: number;
    try {
      fd = openSync(this.path, 'r');
    } catch (cause) {
      throw new WeightsError(`cannot reopen: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, this.path, { cause });
    }
    const size = fstatSync(fd).size;
    if (size !== this.size) {
      closeSync(fd);
      throw new WeightsError(`the file changed since it was opened (${this.size} bytes then, ${size} now); open it again`, this.path);
    }
    this.#held.fd = fd;
    return fd;
  }

  read(at: number, into: Uint8Array): void {
    const fd = this.#fd();
    const position = this.dataStart + at;
    let got = 0;
    while (got < into.byteLength) {
      let n: number;
      try {
        n = readSync(fd, into, got, Math.min(into.byteLength - got, READ_CHUNK), position + got);
      } catch (cause) {
        throw new WeightsError(`read of ${into.byteLength} bytes at offset ${position} failed: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, this.path, { cause });
      }
      if (n === 0) {
        throw new WeightsError(`unexpected end of file: ${into.byteLength} bytes at offset ${position} reach past the end (was the file truncated?)`, this.path);
      }
      got += n;
    }
  }

  close(): void {
    const fd = this.#held.fd;
    this.#held.fd = undefined;
    if (fd !== undefined) closeSync(fd);
  }
}

/** A data section already in memory (`fromBytes`). */
class MemoryData implements DataSource {
  constructor(readonly data: Uint8Array) {}
  read(at: number, into: Uint8Array): void {
    into.set(this.data.subarray(at, at + into.byteLength));
  }
  view(begin: number, end: number): Uint8Array {
    return this.data.subarray(begin, end);
  }
  close(): void {}
}

/**
 * A safetensors file: an 8-byte little-endian header length, a JSON header naming each tensor's
 * dtype, shape and byte range, then the data. The header is read and checked when the file is
 * opened; tensor bytes are read only when asked for: `get` reads one whole tensor, `readRange` and
 * `readRows` read part of one (a row of a large embedding table, say) without touching the rest.
 */
export class SafetensorsFile implements WeightSource {
  readonly origin: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly #entries: ReadonlyMap<string, Entry>;
  readonly #data: DataSource;

  private constructor(origin: string, entries: Map<string, Entry>, metadata: Record<string, string>, data: (owner: object) => DataSource) {
    this.origin = origin;
    this.#entries = entries;
    this.metadata = metadata;
    this.#data = data(this);
  }

  /**
   * Opens a file and reads its header only; throws `WeightsError` naming the file when the header
   * is corrupt. The file stays open for later reads until `close()`.
   */
  static open(path: string): SafetensorsFile {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (cause) {
      throw new WeightsError(`cannot open: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, path, { cause });
    }
    let handedOver = false;
    try {
      const size = fstatSync(fd).size;
      const head = Buffer.alloc(8);
      if (size < 8 || readSync(fd, head, 0, 8, 0) !== 8) throw new WeightsError(`corrupt safetensors header: file is ${size} bytes, shorter than the 8-byte header length`, path);
      const headerLen = Number(head.readBigUInt64LE(0));
      if (headerLen > MAX_HEADER || 8 + headerLen > size) {
        throw new WeightsError(`corrupt safetensors header: header length ${headerLen} does not fit in a ${size}-byte file`, path);
      }
      const header = Buffer.alloc(headerLen);
      let got = 0;
      while (got < headerLen) {
        const n = readSync(fd, header, got, headerLen - got, 8 + got);
        if (n === 0) throw new WeightsError(`corrupt safetensors header: the file ends inside its ${headerLen}-byte header`, path);
        got += n;
      }
      const dataStart = 8 + headerLen;
      const { entries, metadata } = parseHeader(header, size - dataStart, path);
      const file = new SafetensorsFile(path, entries, metadata, (owner) => new FileData(path, fd, dataStart, size, owner));
      handedOver = true;
      return file;
    } finally {
      if (!handedOver) closeSync(fd);
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
    return new SafetensorsFile(origin, entries, metadata, () => new MemoryData(data));
  }

  names(): readonly string[] {
    return [...this.#entries.keys()];
  }

  has(name: string): boolean {
    return this.#entries.has(name);
  }

  /** dtype, shape and size of a tensor, from the header: no data is read. */
  info(name: string): TensorInfo {
    const e = this.#entry(name);
    return { name, dtype: e.dtype, shape: e.shape, byteLength: e.end - e.begin };
  }

  /** The whole tensor, read now (a file's bytes are read on each call; nothing is cached). */
  get(name: string): HostTensor {
    const e = this.#entry(name);
    const bytes = e.end - e.begin;
    const inMemory = this.#data.view?.(e.begin, e.end);
    if (inMemory) return { name, dtype: e.dtype, shape: e.shape, data: inMemory };
    if (bytes > MAX_BUFFER) {
      throw new WeightsError(
        `tensor '${name}' (${e.dtype}[${e.shape.join(', ')}], ${bytes} bytes) is larger than one buffer can hold (${MAX_BUFFER} bytes); read it in parts with readRange or readRows`,
        this.origin,
      );
    }
    const data = allocBytes(bytes);
    this.#data.read(e.begin, data);
    return { name, dtype: e.dtype, shape: e.shape, data };
  }

  /**
   * `byteLength` bytes of tensor `name` starting `byteOffset` bytes into it, read now. With
   * `into`, the bytes land in its first `byteLength` bytes and a view of them is returned;
   * otherwise in a new array. Throws `WeightsError` naming the tensor when the range is outside it.
   */
  readRange(name: string, byteOffset: number, byteLength: number, into?: Uint8Array): Uint8Array {
    const e = this.#entry(name);
    const size = e.end - e.begin;
    if (!Number.isSafeInteger(byteOffset) || !Number.isSafeInteger(byteLength) || byteOffset < 0 || byteLength < 0 || byteOffset + byteLength > size) {
      throw new WeightsError(`readRange: bytes [${byteOffset}, ${byteOffset + byteLength}) are outside tensor '${name}' (${size} bytes)`, this.origin);
    }
    if (into !== undefined && into.byteLength < byteLength) {
      throw new WeightsError(`readRange: the target holds ${into.byteLength} bytes, ${byteLength} were asked for from tensor '${name}'`, this.origin);
    }
    const target = into ? into.subarray(0, byteLength) : allocBytes(byteLength);
    this.#data.read(e.begin + byteOffset, target);
    return target;
  }

  /**
   * Rows `first .. first + count - 1` along the first dimension of tensor `name` (each row is the
   * product of the other dimensions, in the tensor's dtype), read as `readRange` does.
   */
  readRows(name: string, first: number, count: number, into?: Uint8Array): Uint8Array {
    const e = this.#entry(name);
    if (e.shape.length === 0) throw new WeightsError(`readRows: tensor '${name}' is a scalar; it has no rows`, this.origin);
    const rows = e.shape[0]!;
    if (!Number.isSafeInteger(first) || !Number.isSafeInteger(count) || first < 0 || count < 0 || first + count > rows) {
      throw new WeightsError(`readRows: rows [${first}, ${first + count}) are outside tensor '${name}' of shape [${e.shape.join(', ')}]`, this.origin);
    }
    const rowBytes = rows === 0 ? 0 : (e.end - e.begin) / rows;
    return this.readRange(name, first * rowBytes, count * rowBytes, into);
  }

  /** Closes the file; a later read opens it again. Does nothing for `fromBytes`. */
  close(): void {
    this.#data.close();
  }

  #entry(name: string): Entry {
    const e = this.#entries.get(name);
    if (!e) throw new WeightsError(`missing tensor '${name}'`, this.origin);
    return e;
  }
}

/** The largest single Uint8Array this Node can allocate. */
const MAX_BUFFER = constants.MAX_LENGTH;

/** A new byte array for `n` bytes that are about to be overwritten (not zero-filled first). */
function allocBytes(n: number): Uint8Array {
  const b = Buffer.allocUnsafeSlow(n);
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
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
