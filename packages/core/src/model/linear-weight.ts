import { DTYPE_BYTES, E4M3_MAX, E4M3_VALUES, f32ToE4m3, floatBytes, toBf16, toF16, type FloatDtype } from '../device/dtype.js';
import type { DevicePtr } from '../device/device-ptr.js';
import type { GpuBackend, Stream } from '../device/gpu-backend.js';
import { InvalidArgumentError, WeightsError } from '../errors.js';
import { elementCount, toF32, type HostTensor } from '../weights/host-tensor.js';
import type { WeightSource } from '../weights/weight-source.js';
import { FP8_BLOCK, type Precision } from './precision.js';
import { fileOfTensor } from './weight-tensors.js';

/** How a weight is stored on the device: a float type, or FP8 E4M3 codes with f32 128 × 128 block scales. */
export type WeightDtype = FloatDtype | 'f8e4m3';

/** A [rows, cols] weight (`out_features × in_features`, as an HF Linear stores it) on the host, in its device layout. */
export interface HostLinear {
  /** The tensor's name in the checkpoint, for messages. */
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
  readonly dtype: WeightDtype;
  /** rows × cols elements of `dtype`, row-major, little-endian (may alias the source tensor's bytes). */
  readonly data: Uint8Array;
  /** f8e4m3: f32 [⌈rows / 128⌉][⌈cols / 128⌉]; weight[r][c] = code value × scales[r / 128][c / 128]. */
  readonly scales?: Float32Array;
}

/** The same weight on the device. */
export interface LinearWeight {
  readonly rows: number;
  readonly cols: number;
  readonly dtype: WeightDtype;
  readonly data: DevicePtr;
  /** f8e4m3 block scales (layout of `HostLinear.scales`); 0n otherwise. */
  readonly scales: DevicePtr;
  /** Device bytes of data and scales. */
  readonly bytes: number;
}

/** Blocks of 128 along a dimension. */
export const blocksOf = (n: number): number => Math.ceil(n / FP8_BLOCK);

const FLOATS = new Set(['f32', 'bf16', 'f16']);

/** The float values as `dtype` bytes (rounded to nearest even). */
export function encodeFloats(values: Float32Array, dtype: FloatDtype): Uint8Array {
  const typed = dtype === 'f32' ? values : dtype === 'bf16' ? toBf16(values) : toF16(values);
  return new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength);
}

function checkFinite(values: Float32Array, full: string, file: string): void {
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i]!)) throw new WeightsError(`tensor '${full}' holds a non-finite value (${values[i]}) at element ${i}`, file);
  }
}

/** The bytes as 32-bit words (a copy only when they are not 4-byte aligned), and the bytes left over. */
function words(data: Uint8Array): { w: Uint32Array; tail: number } {
  const n = data.byteLength >>> 2;
  const src = data.byteOffset % 4 === 0 ? data : data.slice();
  return { w: new Uint32Array(src.buffer, src.byteOffset, n), tail: n * 4 };
}

/**
 * The index of the first element whose bits are not a finite float of `dtype` (an all-ones
 * exponent: Inf or NaN), or −1; read from the raw bits, so that checking a checkpoint costs no
 * conversion.
 */
function firstNonFinite(data: Uint8Array, dtype: FloatDtype): number {
  const { w, tail } = words(data);
  if (dtype === 'f32') {
    for (let i = 0; i < w.length; i++) if ((w[i]! & 0x7f800000) === 0x7f800000) return i;
    return -1;
  }
  const exp = dtype === 'bf16' ? 0x7f80 : 0x7c00;
  const both = (exp | (exp << 16)) >>> 0;
  for (let i = 0; i < w.length; i++) {
    const x = (w[i]! & both) >>> 0;
    if ((x & exp) === exp) return 2 * i;
    if (x >>> 16 === exp) return 2 * i + 1;
  }
  if (tail < data.byteLength && ((data[tail]! | (data[tail + 1]! << 8)) & exp) === exp) return tail / 2;
  return -1;
}

/** The index of the first FP8 E4M3 NaN code (0x7f or 0xff), or −1, four codes per word. */
function firstFp8Nan(data: Uint8Array): number {
  const { w, tail } = words(data);
  for (let i = 0; i < w.length; i++) {
    // A byte of y is zero exactly where the code is 0x7f or 0xff (the "has a zero byte" test).
    const y = ((w[i]! & 0x7f7f7f7f) ^ 0x7f7f7f7f) >>> 0;
    if (((y - 0x01010101) & ~y & 0x80808080) !== 0) {
      for (let b = 0; b < 4; b++) if ((data[4 * i + b]! & 0x7f) === 0x7f) return 4 * i + b;
    }
  }
  for (let i = tail; i < data.byteLength; i++) if ((data[i]! & 0x7f) === 0x7f) return i;
  return -1;
}

function sameShape(t: HostTensor, shape: readonly number[]): boolean {
  if (t.shape.length === shape.length && t.shape.every((d, i) => d === shape[i])) return true;
  // A [n] tensor stored as [n, 1] or [1, n] (HF Linear with one output) is the same data.
  return elementCount(t.shape) === elementCount(shape) && t.shape.filter((d) => d !== 1).join() === shape.filter((d) => d !== 1).join();
}

/**
 * The block scales of FP8 tensor `name` (`<name>_scale_inv`, F32 [⌈rows/128⌉, ⌈cols/128⌉], every
 * value finite and positive), or a `WeightsError` naming the tensor and what is wrong.
 */
function readScales(source: WeightSource, name: string, rows: number, cols: number): Float32Array {
  const scaleName = `${name}_scale_inv`;
  const full = source.qualifiedName?.(scaleName) ?? scaleName;
  const file = fileOfTensor(source, scaleName);
  const want = [blocksOf(rows), blocksOf(cols)];
  if (!source.has(scaleName)) {
    throw new WeightsError(`missing tensor '${full}': the FP8 weight '${source.qualifiedName?.(name) ?? name}' needs its f32 block scales, shape [${want.join(', ')}]`, file);
  }
  const t = source.get(scaleName);
  if (!sameShape(t, want)) throw new WeightsError(`tensor '${full}' has shape [${t.shape.join(', ')}], expected [${want.join(', ')}] (one scale per 128 × 128 block of a [${rows}, ${cols}] weight)`, file);
  if (!FLOATS.has(t.dtype)) throw new WeightsError(`tensor '${full}' is ${t.dtype}; block scales are f32 (or bf16 / f16)`, file);
  const s = toF32(t);
  for (let i = 0; i < s.length; i++) {
    if (!(Number.isFinite(s[i]!) && s[i]! > 0)) throw new WeightsError(`tensor '${full}' holds ${s[i]} at element ${i}; block scales must be finite and positive`, file);
  }
  return s;
}

/** FP8 codes times their block scales, as f32 (what a dequantizing load computes). */
export function dequantizeFp8(codes: Uint8Array, scales: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols);
  const bc = blocksOf(cols);
  for (let r = 0; r < rows; r++) {
    const srow = Math.floor(r / FP8_BLOCK) * bc;
    for (let c = 0; c < cols; c++) out[r * cols + c] = Math.fround(E4M3_VALUES[codes[r * cols + c]!]! * scales[srow + Math.floor(c / FP8_BLOCK)]!);
  }
  return out;
}

/**
 * Linear weight `name` of shape [rows, cols] for a model running in `precision`: present, of that
 * shape, finite. A float tensor (bf16, f16, f32) is converted to `precision.rows`; an F8_E4M3
 * tensor with its `<name>_scale_inv` stays FP8 when `precision.fp8Weights`, else it is dequantized
 * and converted. Every failure throws `WeightsError` naming the tensor and its file.
 */
export function readLinear(source: WeightSource, name: string, shape: readonly [number, number], precision: Precision): HostLinear {
  const [rows, cols] = shape;
  const full = source.qualifiedName?.(name) ?? name;
  const file = fileOfTensor(source, name);
  if (!source.has(name)) throw new WeightsError(`missing tensor '${full}' (expected shape [${rows}, ${cols}])`, file);
  const t = source.get(name);
  if (!sameShape(t, shape)) throw new WeightsError(`tensor '${full}' has shape [${t.shape.join(', ')}], expected [${rows}, ${cols}]`, file);
  if (t.dtype === 'f8e4m3') {
    const scales = readScales(source, name, rows, cols);
    const nan = firstFp8Nan(t.data);
    if (nan >= 0) throw new WeightsError(`tensor '${full}' holds an FP8 NaN (code 0x${t.data[nan]!.toString(16)}) at element ${nan}`, file);
    if (precision.fp8Weights) return { name: full, rows, cols, dtype: 'f8e4m3', data: t.data, scales };
    const values = dequantizeFp8(t.data, scales, rows, cols);
    return { name: full, rows, cols, dtype: precision.rows, data: encodeFloats(values, precision.rows) };
  }
  if (!FLOATS.has(t.dtype)) throw new WeightsError(`tensor '${full}' is ${t.dtype}; expected bf16, f16, f32 or block-FP8 (F8_E4M3 with a _scale_inv)`, file);
  return { name: full, rows, cols, dtype: precision.rows, data: floatsIn(t, precision.rows, full, file) };
}

/** Any float tensor (an embedding table, a conv kernel) in `dtype`; FP8 is refused (checkpoints keep these unquantized). */
export function readFloats(source: WeightSource, name: string, shape: readonly number[], dtype: FloatDtype): Uint8Array {
  const full = source.qualifiedName?.(name) ?? name;
  const file = fileOfTensor(source, name);
  if (!source.has(name)) throw new WeightsError(`missing tensor '${full}' (expected shape [${shape.join(', ')}])`, file);
  const t = source.get(name);
  if (!sameShape(t, shape)) throw new WeightsError(`tensor '${full}' has shape [${t.shape.join(', ')}], expected [${shape.join(', ')}]`, file);
  if (!FLOATS.has(t.dtype)) throw new WeightsError(`tensor '${full}' is ${t.dtype}; expected bf16, f16 or f32`, file);
  return floatsIn(t, dtype, full, file);
}

/**
 * A float tensor's values in `dtype`, every one finite: its own bytes when it is stored in that
 * type already (checked from the bits, not copied: they may alias the source's), else converted.
 */
function floatsIn(t: HostTensor, dtype: FloatDtype, full: string, file: string): Uint8Array {
  if (t.dtype === dtype) {
    const bad = firstNonFinite(t.data, dtype);
    if (bad >= 0) throw new WeightsError(`tensor '${full}' holds a non-finite value (${toF32({ ...t, shape: [t.data.length], data: t.data }).at(bad)}) at element ${bad}`, file);
    return t.data;
  }
  const values = toF32(t);
  checkFinite(values, full, file);
  return encodeFloats(values, dtype);
}

/**
 * Block-FP8 quantization as the published checkpoints hold it: per 128 × 128 block, scale =
 * amax / 448 (1 for an all-zero block) and code = e4m3(w / scale). For tests and for writing
 * checkpoints; `dequantizeFp8` inverts it up to the codes' rounding.
 */
export function quantizeFp8(values: ArrayLike<number>, rows: number, cols: number): { codes: Uint8Array; scales: Float32Array } {
  const br = blocksOf(rows), bc = blocksOf(cols);
  const scales = new Float32Array(br * bc);
  const codes = new Uint8Array(rows * cols);
  for (let i = 0; i < br; i++) {
    for (let j = 0; j < bc; j++) {
      let amax = 0;
      for (let r = i * FP8_BLOCK; r < Math.min(rows, (i + 1) * FP8_BLOCK); r++) {
        for (let c = j * FP8_BLOCK; c < Math.min(cols, (j + 1) * FP8_BLOCK); c++) amax = Math.max(amax, Math.abs(values[r * cols + c]!));
      }
      const scale = amax > 0 ? Math.fround(amax / E4M3_MAX) : 1;
      scales[i * bc + j] = scale;
      for (let r = i * FP8_BLOCK; r < Math.min(rows, (i + 1) * FP8_BLOCK); r++) {
        for (let c = j * FP8_BLOCK; c < Math.min(cols, (j + 1) * FP8_BLOCK); c++) codes[r * cols + c] = f32ToE4m3(Math.fround(values[r * cols + c]! / scale));
      }
    }
  }
  return { codes, scales };
}

/** The weight's values as f32 (dequantized for FP8): for references and tests. */
export function linearToF32(w: HostLinear): Float32Array {
  if (w.dtype === 'f8e4m3') return dequantizeFp8(w.data, w.scales!, w.rows, w.cols);
  return toF32({ name: w.name, dtype: w.dtype, shape: [w.rows, w.cols], data: w.data });
}

/**
 * Weights stacked along rows into one ([Σ rows, cols]): gate over up, expert over expert. All of
 * one dtype and width; for FP8 every part but the last must be a whole number of 128-row blocks,
 * so the stacked scales stay one [⌈Σ rows / 128⌉][⌈cols / 128⌉] grid.
 */
export function stackLinears(parts: readonly HostLinear[], name: string): HostLinear {
  if (parts.length === 0) throw new InvalidArgumentError(`stackLinears(${name}): no parts`);
  const first = parts[0]!;
  let rows = 0;
  for (const [i, p] of parts.entries()) {
    if (p.dtype !== first.dtype || p.cols !== first.cols) {
      throw new WeightsError(`'${p.name}' is ${p.dtype} [${p.rows}, ${p.cols}] but '${first.name}' is ${first.dtype} [${first.rows}, ${first.cols}]; ${name} stacks weights of one type and width`);
    }
    if (p.dtype === 'f8e4m3' && i < parts.length - 1 && p.rows % FP8_BLOCK !== 0) {
      throw new WeightsError(`'${p.name}' has ${p.rows} rows, not a multiple of ${FP8_BLOCK}: its FP8 blocks cannot be stacked under another weight's (${name})`);
    }
    rows += p.rows;
  }
  const data = new Uint8Array(parts.reduce((a, p) => a + p.data.length, 0));
  let at = 0;
  for (const p of parts) {
    data.set(p.data, at);
    at += p.data.length;
  }
  if (first.dtype !== 'f8e4m3') return { name, rows, cols: first.cols, dtype: first.dtype, data };
  const scales = new Float32Array(parts.reduce((a, p) => a + p.scales!.length, 0));
  at = 0;
  for (const p of parts) {
    scales.set(p.scales!, at);
    at += p.scales!.length;
  }
  return { name, rows, cols: first.cols, dtype: 'f8e4m3', data, scales };
}

/** Device bytes a host weight takes once uploaded. */
export function linearBytes(w: Pick<HostLinear, 'rows' | 'cols' | 'dtype'>): number {
  const elements = w.rows * w.cols;
  return w.dtype === 'f8e4m3' ? elements + 4 * blocksOf(w.rows) * blocksOf(w.cols) : elements * DTYPE_BYTES[w.dtype];
}

/** Uploads a host weight through `alloc` (the layer's allocator, so its memory is freed with the layer's). */
export function uploadLinear(gpu: GpuBackend, alloc: (bytes: number) => DevicePtr, w: HostLinear): LinearWeight {
  const data = alloc(Math.max(4, w.data.length));
  gpu.upload(data, w.data);
  let scales = 0n;
  if (w.dtype === 'f8e4m3') {
    scales = alloc(Math.max(4, w.scales!.byteLength));
    gpu.upload(scales, w.scales!);
  }
  return { rows: w.rows, cols: w.cols, dtype: w.dtype, data, scales, bytes: linearBytes(w) };
}

/** One `x · Wᵀ` through a weight: `y[m][w.rows] = x[m][w.cols] · Wᵀ` (+ beta · y). */
export interface LinearCall {
  readonly m: number;
  readonly x: DevicePtr;
  readonly w: LinearWeight;
  readonly y: DevicePtr;
  /** Element type of x; a float weight must be of the same type. */
  readonly xDtype: FloatDtype;
  readonly yDtype: FloatDtype;
  /** Leading dimensions of x and y in elements (default: packed). */
  readonly ldx?: number;
  readonly ldy?: number;
  readonly beta?: number;
  readonly stream?: Stream;
}

/** Issues the GEMM of a `LinearCall`: a float weight through `gemm` as is, an FP8 one with its block scales. */
export function runLinear(gpu: GpuBackend, c: LinearCall): void {
  const { w } = c;
  if (w.dtype !== 'f8e4m3' && w.dtype !== c.xDtype) {
    throw new InvalidArgumentError(`linear: a ${w.dtype} weight [${w.rows}, ${w.cols}] cannot multiply ${c.xDtype} rows; store the rows in the weight's type`);
  }
  gpu.gemm({
    m: c.m, n: w.rows, k: w.cols, a: c.x, b: w.data, c: c.y, transB: true,
    dtype: c.xDtype, outDtype: c.yDtype,
    ...(w.dtype === 'f8e4m3' ? { bDtype: 'f8e4m3' as const, bScales: w.scales } : {}),
    ...(c.ldx !== undefined ? { lda: c.ldx } : {}),
    ...(c.ldy !== undefined ? { ldc: c.ldy } : {}),
    ...(c.beta !== undefined ? { beta: c.beta } : {}),
    ...(c.stream ? { stream: c.stream } : {}),
  });
}

/** Bytes of one row of `width` elements of `dtype`. */
export function rowBytes(width: number, dtype: FloatDtype): number {
  return width * floatBytes(dtype);
}
