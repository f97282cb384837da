// Routed-expert weights of one format made in the test, in the layout the expert kernels read
// (moe-weights.ts): float weights stored in the row type; FP8 quantized per expert, gate and up apart
// (two scale grids), down one grid.
import type { FloatDtype, SeededRandom } from '@metrale/core';
import type { ExpertFormat } from '@metrale/layer-std';
import { quantizeFp8 } from './fp8-weights.js';
import { decodeRows, encodeRows } from './setup.js';

/** Expert weights of one format: the stored bytes (and FP8 scales) and the values they stand for. */
export interface ExpertSet {
  readonly gateUp: ArrayBufferView;
  readonly gateUpScales: Float32Array;
  readonly down: ArrayBufferView;
  readonly downScales: Float32Array;
  /** [E][2I][D] and [E][D][I] values. */
  readonly gu: Float64Array;
  readonly dn: Float64Array;
}

export function rowTypeOf(format: ExpertFormat): FloatDtype {
  return format.startsWith('fp8-') ? (format.slice(4) as FloatDtype) : (format as FloatDtype);
}

export function expertSet(format: ExpertFormat, E: number, D: number, I: number, random: SeededRandom): ExpertSet {
  const gu = random.normals(E * 2 * I * D, 1 / Math.sqrt(D));
  const dn = random.normals(E * D * I, 1 / Math.sqrt(I));
  if (!format.startsWith('fp8')) {
    const dtype = rowTypeOf(format);
    const a = encodeRows(gu, dtype);
    const b = encodeRows(dn, dtype);
    const values = (x: ArrayBufferView) => Float64Array.from(decodeRows(new Uint8Array(x.buffer, x.byteOffset, x.byteLength), dtype));
    return { gateUp: a, gateUpScales: new Float32Array(1), down: b, downScales: new Float32Array(1), gu: values(a), dn: values(b) };
  }
  // Per expert: gate and up quantized apart (two scale grids), down one grid.
  const parts = (values: Float32Array, count: number, rows: number, cols: number) => {
    const q = Array.from({ length: count }, (_, i) => quantizeFp8(values.subarray(i * rows * cols, (i + 1) * rows * cols), rows, cols));
    const codes = new Uint8Array(count * rows * cols);
    const scales = new Float32Array(q.reduce((n, m) => n + m.scales.length, 0));
    const deq = new Float64Array(count * rows * cols);
    let s = 0;
    q.forEach((m, i) => {
      codes.set(m.codes, i * rows * cols);
      deq.set(m.values, i * rows * cols);
      scales.set(m.scales, s);
      s += m.scales.length;
    });
    return { codes, scales, deq };
  };
  const g = parts(gu, 2 * E, I, D);
  const d = parts(dn, E, D, I);
  return { gateUp: g.codes, gateUpScales: g.scales, down: d.codes, downScales: d.scales, gu: g.deq, dn: d.deq };
}
