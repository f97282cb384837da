import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  elementCount,
  encodeSafetensors,
  expectShape,
  fromBf16,
  MemoryWeightSource,
  prefixedWeights,
  SafetensorsFile,
  SeededRandom,
  tensorOf,
  toBf16,
  toF32,
  toI32,
  WeightsError,
  type HostTensor,
} from '../src/index.js';
import { expectThrow } from './support/driver-rig.js';

const dir = mkdtempSync(join(tmpdir(), 'metrale-safetensors-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let fileNo = 0;
function writeFile(bytes: Uint8Array): string {
  const path = join(dir, `t${fileNo++}.safetensors`);
  writeFileSync(path, bytes);
  return path;
}

/** A file from a raw header (object or text) and data bytes, with the header length as given or true. */
function rawFile(header: unknown, data: Uint8Array, headerLength?: number): Uint8Array {
  const json = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header), 'utf8');
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerLength ?? json.length), true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  return out;
}

const random = new SeededRandom(2024);
const f32 = random.normals(6);
const bf16Values = random.normals(4);
const i32 = Int32Array.from({ length: 3 }, () => random.int(-1_000_000, 1_000_000));
const tensors: HostTensor[] = [
  tensorOf('model.layers.0.mlp.weight', f32, [2, 3]),
  tensorOf('model.layers.0.norm.weight', toBf16(bf16Values), [4]),
  tensorOf('model.layers.0.ids', i32, [3]),
];
const metadata = { format: 'pt', producer: 'metrale-test' };

describe('safetensors round trip', () => {
  const bytes = encodeSafetensors(tensors, metadata);

  it('pads the header so the data starts 8-byte aligned', () => {
    const headerLen = Number(new DataView(bytes.buffer).getBigUint64(0, true));
    expect((8 + headerLen) % 8).toBe(0);
    expect(bytes.byteLength).toBe(8 + headerLen + 24 + 8 + 12);
  });

  for (const [how, open] of [
    ['fromBytes', () => SafetensorsFile.fromBytes(bytes, 'mem.safetensors')],
    ['open', () => SafetensorsFile.open(writeFile(bytes))],
  ] as const) {
    it(`reads back every tensor and the metadata (${how})`, () => {
      const file = open();
      expect(file.names()).toEqual(tensors.map((t) => t.name));
      expect(file.metadata).toEqual(metadata);
      for (const t of tensors) {
        expect(file.has(t.name)).toBe(true);
        const got = file.get(t.name);
        expect([got.name, got.dtype, got.shape]).toEqual([t.name, t.dtype, t.shape]);
        expect(Array.from(got.data)).toEqual(Array.from(t.data));
      }
      expect(toF32(file.get('model.layers.0.mlp.weight'))).toEqual(f32);
      expect(toF32(file.get('model.layers.0.norm.weight'))).toEqual(fromBf16(toBf16(bf16Values)));
      expect(toI32(file.get('model.layers.0.ids'))).toEqual(i32);
      expect(file.has('lm_head.weight')).toBe(false);
      const e = expectThrow(() => file.get('lm_head.weight'), WeightsError, /missing tensor 'lm_head\.weight'/);
      expect(e.file).toBe(file.origin);
      expect(e.message.startsWith(`${file.origin}: `)).toBe(true);
    });
  }

  it('writes an empty file with no metadata', () => {
    const file = SafetensorsFile.fromBytes(encodeSafetensors([]));
    expect(file.names()).toEqual([]);
    expect(file.metadata).toEqual({});
  });

  it('refuses to encode a tensor whose data does not match its shape', () => {
    expectThrow(() => encodeSafetensors([{ name: 'w', dtype: 'f32', shape: [2, 2], data: new Uint8Array(12) }]), WeightsError, /tensor 'w': 12 data bytes for f32\[2, 2\] \(needs 16\)/);
  });
});

describe('safetensors corrupt headers', () => {
  const data = new Uint8Array(16).fill(7);
  const entry = (over: Record<string, unknown>) => ({ w: { dtype: 'F32', shape: [4], data_offsets: [0, 16], ...over } });
  const cases: [string, Uint8Array, RegExp][] = [
    ['a file shorter than the length field', new Uint8Array(5), /corrupt safetensors header: .*5.*shorter than the 8-byte header length/],
    ['a header length past the end', rawFile(entry({}), data, 1000), /header length 1000 does not fit in a \d+-byte file/],
    ['a header length past 2^53', rawFile(entry({}), data, Number.MAX_SAFE_INTEGER), /does not fit/],
    ['a header that is not JSON', rawFile('{"w": {"dtype": ', data), /not valid JSON/],
    ['a header that is not UTF-8', rawFile('', data).fill(0xff, 8, 10), /not valid JSON/],
    ['a header that is a JSON array', rawFile([1, 2], data), /expected a JSON object/],
    ['an unknown dtype', rawFile(entry({ dtype: 'F8_E5M2' }), data), /tensor 'w' has unsupported dtype "F8_E5M2"/],
    ['a missing dtype', rawFile(entry({ dtype: undefined }), data), /tensor 'w' has unsupported dtype undefined/],
    ['a negative dimension', rawFile(entry({ shape: [-4] }), data), /tensor 'w' has an invalid shape \[-4\]/],
    ['offsets past the data', rawFile(entry({ data_offsets: [0, 32] }), data), /tensor 'w' has data_offsets \[0,32\] outside the 16-byte data section/],
    ['reversed offsets', rawFile(entry({ data_offsets: [16, 0] }), data), /data_offsets \[16,0\]/],
    ['one offset', rawFile(entry({ data_offsets: [0] }), data), /data_offsets \[0\]/],
    ['a size mismatch', rawFile(entry({ shape: [3] }), data), /tensor 'w' spans 16 bytes, but f32\[3\] needs 12/],
    ['a bf16 size mismatch', rawFile(entry({ dtype: 'BF16' }), data), /spans 16 bytes, but bf16\[4\] needs 8/],
  ];

  it.each(cases)('names the file for %s (open)', (_what, bytes, pattern) => {
    const path = writeFile(bytes);
    const e = expectThrow(() => SafetensorsFile.open(path), WeightsError, pattern);
    expect(e.file).toBe(path);
    expect(e.message.startsWith(`${path}: `)).toBe(true);
  });

  it.each(cases)('names the origin for %s (fromBytes)', (_what, bytes, pattern) => {
    const e = expectThrow(() => SafetensorsFile.fromBytes(bytes, 'shard-3.safetensors'), WeightsError, pattern);
    expect(e.file).toBe('shard-3.safetensors');
  });

  it('names a file it cannot open', () => {
    const path = join(dir, 'absent.safetensors');
    const e = expectThrow(() => SafetensorsFile.open(path), WeightsError, /cannot open: ENOENT/);
    expect(e.file).toBe(path);
  });

  it('accepts the well-formed control case', () => {
    expect(toF32(SafetensorsFile.fromBytes(rawFile(entry({}), data)).get('w'))).toEqual(new Float32Array(new Uint8Array(16).fill(7).buffer));
  });
});

describe('weight sources', () => {
  const source = new MemoryWeightSource('ckpt/model.safetensors', [
    ...tensors,
    tensorOf('model.layers.1.mlp.weight', random.normals(6), [2, 3]),
    tensorOf('lm_head.weight', random.normals(4), [2, 2]),
  ]);

  it('prefixedWeights shows the tensors under a prefix, without it', () => {
    const layer0 = prefixedWeights(source, 'model.layers.0.');
    expect(layer0.origin).toBe('ckpt/model.safetensors');
    expect(layer0.names()).toEqual(['mlp.weight', 'norm.weight', 'ids']);
    expect(layer0.has('mlp.weight')).toBe(true);
    expect(layer0.has('model.layers.0.mlp.weight')).toBe(false);
    const w = layer0.get('mlp.weight');
    expect(w.name).toBe('mlp.weight');
    expect(w.data).toBe(tensors[0]!.data);
    expect(toF32(w)).toEqual(f32);
    const e = expectThrow(() => layer0.get('attn.weight'), WeightsError, /ckpt\/model\.safetensors: missing tensor 'model\.layers\.0\.attn\.weight'/);
    expect(e.file).toBe('ckpt/model.safetensors');
    // Prefix views compose, and work over a file.
    const mlp = prefixedWeights(layer0, 'mlp.');
    expect(mlp.names()).toEqual(['weight']);
    const file = SafetensorsFile.fromBytes(encodeSafetensors(tensors), 'f.safetensors');
    expect(toI32(prefixedWeights(file, 'model.layers.0.').get('ids'))).toEqual(i32);
  });

  it('MemoryWeightSource names what is missing', () => {
    expectThrow(() => source.get('model.norm.weight'), WeightsError, /ckpt\/model\.safetensors: missing tensor 'model\.norm\.weight'/);
  });

  it('expectShape names the tensor and both shapes', () => {
    expect(() => expectShape(tensors[0]!, [2, 3])).not.toThrow();
    expectThrow(() => expectShape(tensors[0]!, [3, 2], 'ckpt'), WeightsError, /ckpt: tensor 'model\.layers\.0\.mlp\.weight' has shape \[2, 3\], expected \[3, 2\]/);
    expectThrow(() => expectShape(tensors[0]!, [6]), WeightsError, /expected \[6\]/);
    expect(elementCount([2, 3, 4])).toBe(24);
    expect(elementCount([])).toBe(1);
  });
});

describe('toF32 and toI32', () => {
  const tensor = (dtype: HostTensor['dtype'], data: ArrayBufferView, shape: number[]): HostTensor => ({
    name: 't',
    dtype,
    shape,
    data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
  });

  it('decodes bf16 bits', () => {
    const bits = new Uint16Array([0x3f80, 0xc020, 0x4049, 0x0000, 0x8000, 0x7f80, 0xff80]);
    expect(Array.from(toF32(tensor('bf16', bits, [7])))).toEqual([1, -2.5, 3.140625, 0, -0, Infinity, -Infinity]);
    expect(Number.isNaN(toF32(tensor('bf16', new Uint16Array([0x7fc0]), [1]))[0])).toBe(true);
    const values = random.normals(16);
    const roundTrip = toF32(tensor('bf16', toBf16(values), [16]));
    for (let i = 0; i < 16; i++) expect(Math.abs(roundTrip[i]! - values[i]!)).toBeLessThanOrEqual(Math.abs(values[i]!) * 2 ** -8);
  });

  it('decodes f16 bits, subnormals and infinities included', () => {
    const bits = new Uint16Array([0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x0400, 0x7c00, 0xfc00, 0x3555]);
    expect(Array.from(toF32(tensor('f16', bits, [9])))).toEqual([1, -2, 0.5, 65504, 2 ** -24, 2 ** -14, Infinity, -Infinity, Math.fround(0.333251953125)]);
    expect(Number.isNaN(toF32(tensor('f16', new Uint16Array([0x7e00]), [1]))[0])).toBe(true);
  });

  it('narrows f64 and i64, also from unaligned bytes', () => {
    const f64 = new Float64Array(random.normals(5));
    expect(toF32(tensor('f64', f64, [5]))).toEqual(Float32Array.from(f64));
    const i64 = new BigInt64Array([-5n, 123_456n, 2n ** 40n, -(2n ** 31n)]);
    expect(Array.from(toF32(tensor('i64', i64, [4])))).toEqual([-5, 123456, 2 ** 40, -(2 ** 31)]);
    // The same bytes one byte into a buffer: the reader copies rather than misreading.
    const shifted = new Uint8Array(1 + f64.byteLength);
    shifted.set(new Uint8Array(f64.buffer), 1);
    expect(toF32({ name: 'u', dtype: 'f64', shape: [5], data: shifted.subarray(1) })).toEqual(Float32Array.from(f64));
    const shiftedBf16 = new Uint8Array(9);
    shiftedBf16.set(new Uint8Array(toBf16([1, -2.5, 0.75, 8]).buffer), 1);
    expect(Array.from(toF32({ name: 'v', dtype: 'bf16', shape: [4], data: shiftedBf16.subarray(1) }))).toEqual([1, -2.5, 0.75, 8]);
  });

  it('reads token ids from i32 and i64, and refuses floating types', () => {
    expect(Array.from(toI32(tensor('i64', new BigInt64Array([7n, -3n, 151_643n]), [3])))).toEqual([7, -3, 151643]);
    const ids = Int32Array.from([4, 8, 15, 16]);
    const copy = toI32(tensor('i32', ids, [4]));
    expect(copy).toEqual(ids);
    copy[0] = 99;
    expect(ids[0]).toBe(4);
    expectThrow(() => toI32(tensor('f32', new Float32Array(2), [2]), 'ckpt'), WeightsError, /ckpt: tensor 't' is f32, expected an integer type \(i32 or i64\)/);
  });
});
