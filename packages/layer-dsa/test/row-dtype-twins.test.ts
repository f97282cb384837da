// The CPU twins that read or write row-typed buffers (qr of dsa.mla_append, qb of dsa.q_rope and
// dsa.index_score, olat of dsa.sparse_attn), in every row type (f32, bf16, f16), against float64
// references on random data computed here from the formulas of KERNELS.md, and against their own
// f32 runs: a twin must read the stored values and round once where it stores, so its bf16 / f16
// result is exactly the f32 result rounded (or, for a reader, the f32 result on the decoded input).
import { CpuBackend } from '@metrale/cpu-backend';
import {
  FLOAT_DTYPE_CODE, SeededRandom, roundTo, toBf16, toF16, fromBf16, f16BitsToF32,
  type DevicePtr, type FloatDtype, type GpuBackend, type Kernel, type KernelParams,
} from '@metrale/core';
import {
  indexScoreKernel, mlaAppendKernel, qRopeKernel, rowLaunch, ropeInvFreq, sparseAttnKernel,
} from '@metrale/layer-dsa';
import { describe, expect, it } from 'vitest';

const DTYPES: readonly FloatDtype[] = ['f32', 'bf16', 'f16'];
/** Unit roundoff of each type (plus f32's, for the value rounded to f32 first). */
const UNIT: Readonly<Record<FloatDtype, number>> = { f32: 2 ** -24, bf16: 2 ** -8 + 2 ** -24, f16: 2 ** -11 + 2 ** -24 };

type Buffer = Float32Array | Int32Array | Uint16Array;

/** `values` stored as `dtype` (the bytes a row-typed buffer holds). */
function asRows(values: Float32Array, dtype: FloatDtype): Buffer {
  return dtype === 'f32' ? values : dtype === 'bf16' ? toBf16(values) : toF16(values);
}
/** A row-typed buffer's values. */
function fromRows(bytes: Uint8Array, dtype: FloatDtype): Float32Array {
  const copy = bytes.slice();
  if (dtype === 'f32') return new Float32Array(copy.buffer);
  const bits = new Uint16Array(copy.buffer);
  return dtype === 'bf16' ? fromBf16(bits) : Float32Array.from(bits, (b) => f16BitsToF32(b));
}
/** The values a row-typed buffer would hold. */
const rounded = (values: Float32Array, dtype: FloatDtype): Float32Array => Float32Array.from(values, (v) => roundTo(dtype, v));

/** Runs one launch on a fresh CPU backend; returns the named buffers' bytes afterwards. */
function launch(
  kernel: Kernel<KernelParams>, buffers: Record<string, Buffer>, scalars: Record<string, number>, rows: number, read: readonly string[],
): Record<string, Uint8Array> {
  const gpu: GpuBackend = new CpuBackend();
  try {
    const ptrs: Record<string, DevicePtr> = {};
    for (const [name, data] of Object.entries(buffers)) {
      ptrs[name] = gpu.alloc(Math.max(4, data.byteLength));
      gpu.upload(ptrs[name]!, data);
    }
    const args: Record<string, number | bigint> = { ...scalars };
    for (const { name, type } of kernel.paramList) if (type === 'ptr') args[name] = ptrs[name] ?? 0n;
    gpu.launch(kernel, rowLaunch(rows, gpu.defaultStream), args as never);
    gpu.synchronize();
    return Object.fromEntries(read.map((n) => [n, gpu.download(ptrs[n]!, buffers[n]!.byteLength)]));
  } finally {
    gpu.dispose();
  }
}

/** One step of `rows` rows of one sequence in slot 0 from position `start`. */
function tables(rows: number, start: number) {
  return {
    slots: Int32Array.of(0), seqLens: Int32Array.of(start), rowStarts: Int32Array.of(0, rows), positions: Int32Array.from({ length: rows }, (_, i) => start + i),
  };
}

/** |got − want| ≤ bound · (|want| + floor) elementwise, with the worst ratio for the message. */
function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, bound: number, floor: number, what: string): void {
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!) / (Math.abs(want[i]!) + floor));
  expect(worst, what).toBeLessThanOrEqual(bound);
}

const rnd = new SeededRandom(2024);
/** Slot 0's cache is one page (page 0): the dense layout of these small cases. */
const ONE_PAGE = Int32Array.of(0);
const normals = (n: number, scale = 1) => Float32Array.from(rnd.normals(n, scale));

describe('dsa.mla_append: qr in the rows type', () => {
  const rows = 3, qLora = 12, kvLora = 10, rope = 4, xaWidth = qLora + kvLora + rope + 3, capacity = 8;
  const xa = normals(rows * xaWidth);
  const qaNorm = Float32Array.from({ length: qLora }, () => 0.5 + rnd.float());
  const kvaNorm = Float32Array.from({ length: kvLora }, () => 0.5 + rnd.float());
  const run = (dtype: FloatDtype) => {
    const out = launch(mlaAppendKernel as unknown as Kernel<KernelParams>, {
      xa, qr: asRows(new Float32Array(rows * qLora).fill(Number.NaN), dtype), kvCache: new Float32Array(capacity * (kvLora + rope)),
      qaNorm, kvaNorm, invFreq: ropeInvFreq(10000, rope), ...tables(rows, 2), blockTable: ONE_PAGE,
    }, {
      batch: 1, xaWidth, qLora, kvLora, rope, ropeInterleave: 1, kvDtype: 0, qrDtype: FLOAT_DTYPE_CODE[dtype], pagesPerSeq: 1, pageRows: capacity, eps: 1e-6,
    }, rows, ['qr']);
    return fromRows(out.qr!, dtype);
  };
  const f32 = run('f32');
  // float64 RMSNorm of each row's q_a part.
  const ref = new Float64Array(rows * qLora);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let i = 0; i < qLora; i++) ss += xa[r * xaWidth + i]! ** 2;
    const inv = 1 / Math.sqrt(ss / qLora + 1e-6);
    for (let i = 0; i < qLora; i++) ref[r * qLora + i] = xa[r * xaWidth + i]! * inv * qaNorm[i]!;
  }
  for (const dtype of DTYPES) {
    it(`${dtype}: within one rounding of the float64 RMSNorm, and exactly the f32 result rounded`, () => {
      const got = run(dtype);
      expectClose(got, ref, UNIT[dtype], 0, `${dtype} qr vs float64`);
      expect([...got]).toEqual([...rounded(f32, dtype)]);
    });
  }
});

describe('dsa.q_rope: qb in the rows type (MLA rope parts into f32 qlat, indexer rope channels in place)', () => {
  const rows = 2, heads = 2, nope = 6, rope = 4, kvLora = 10, idxHeads = 3, dI = 8, idxRope = 4;
  const qbWidth = heads * (nope + rope) + idxHeads * dI + 1;
  const lat = kvLora + rope;
  const start = 5;
  const invFreq = ropeInvFreq(10000, rope);
  const qbValues = normals(rows * qbWidth);
  const run = (dtype: FloatDtype) => {
    const out = launch(qRopeKernel as unknown as Kernel<KernelParams>, {
      qb: asRows(qbValues, dtype), qlat: new Float32Array(rows * heads * lat), invFreq, ...tables(rows, start),
    }, {
      batch: 1, qbWidth, heads, nope, rope, kvLora, idxHeads, dI, idxRope, ropeInterleave: 1, idxRopeInterleave: 1, qbDtype: FLOAT_DTYPE_CODE[dtype],
    }, rows, ['qb', 'qlat']);
    return { qb: fromRows(out.qb!, dtype), qlat: new Float32Array(out.qlat!.slice().buffer) };
  };
  /** float64 interleaved RoPE of `dims` values of x from `off` at position t: out[i], out[i + d/2]. */
  const ropeRef = (x: Float32Array, off: number, dims: number, t: number): number[] => {
    const out = new Array<number>(dims);
    for (let i = 0; i < dims / 2; i++) {
      const angle = Math.fround(invFreq[i]! * t);
      const c = Math.fround(Math.cos(angle)), s = Math.fround(Math.sin(angle));
      const a = x[off + 2 * i]!, b = x[off + 2 * i + 1]!;
      out[i] = a * c - b * s;
      out[dims / 2 + i] = b * c + a * s;
    }
    return out;
  };
  for (const dtype of DTYPES) {
    it(`${dtype}: rotations of the stored values within one rounding of float64; the rest of qb untouched`, () => {
      const input = rounded(qbValues, dtype);
      const { qb, qlat } = run(dtype);
      for (let r = 0; r < rows; r++) {
        for (let h = 0; h < heads; h++) {
          const want = ropeRef(input, r * qbWidth + h * (nope + rope) + nope, rope, start + r);
          const got = qlat.subarray((r * heads + h) * lat + kvLora, (r * heads + h + 1) * lat);
          expectClose(got, want, UNIT.f32, 1e-30, `qlat row ${r} head ${h}`);
        }
        for (let g = 0; g < idxHeads; g++) {
          const off = r * qbWidth + heads * (nope + rope) + g * dI;
          expectClose(qb.subarray(off, off + idxRope), ropeRef(input, off, idxRope, start + r), UNIT[dtype], 1e-30, `${dtype} indexer head ${g}`);
          expect([...qb.subarray(off + idxRope, off + dI)]).toEqual([...input.subarray(off + idxRope, off + dI)]);
        }
        const mla = r * qbWidth;
        expect([...qb.subarray(mla, mla + heads * (nope + rope))]).toEqual([...input.subarray(mla, mla + heads * (nope + rope))]);
      }
    });
  }
  it('bf16 and f16: the f32 twin on the decoded input, rounded once', () => {
    for (const dtype of ['bf16', 'f16'] as const) {
      const narrow = run(dtype);
      const gpuF32 = launch(qRopeKernel as unknown as Kernel<KernelParams>, {
        qb: rounded(qbValues, dtype), qlat: new Float32Array(rows * heads * lat), invFreq, ...tables(rows, start),
      }, {
        batch: 1, qbWidth, heads, nope, rope, kvLora, idxHeads, dI, idxRope, ropeInterleave: 1, idxRopeInterleave: 1, qbDtype: 0,
      }, rows, ['qb', 'qlat']);
      expect([...narrow.qlat]).toEqual([...new Float32Array(gpuF32.qlat!.slice().buffer)]);
      expect([...narrow.qb]).toEqual([...rounded(new Float32Array(gpuF32.qb!.slice().buffer), dtype)]);
    }
  });
});

describe('dsa.index_score: qb in the rows type', () => {
  const idxHeads = 4, dI = 8, qIOff = 3, qbWidth = qIOff + idxHeads * dI + 2, wOff = 2, xaWidth = wOff + idxHeads + 1;
  const rows = 2, start = 9, keyCapacity = 16;
  const scale = (dI * idxHeads) ** -0.5;
  const qbValues = normals(rows * qbWidth);
  const xa = normals(rows * xaWidth);
  const keys = normals(keyCapacity * dI);
  const run = (dtype: FloatDtype, qb: Buffer) => {
    const out = launch(indexScoreKernel as unknown as Kernel<KernelParams>, {
      qb, xa, keys, scores: new Float32Array(rows * keyCapacity).fill(Number.NaN), ...tables(rows, start), blockTable: ONE_PAGE,
    }, {
      batch: 1, rowBase: 0, rowCount: rows, qbWidth, qIOff, xaWidth, wOff, idxHeads, dI, kpool: 1, pagesPerSeq: 1, pageRows: keyCapacity, scoreStride: keyCapacity,
      idxDtype: 0, qbDtype: FLOAT_DTYPE_CODE[dtype], scale,
    }, rows, ['scores']);
    return new Float32Array(out.scores!.slice().buffer);
  };
  for (const dtype of DTYPES) {
    it(`${dtype}: the float64 score of the stored queries, and the f32 twin's on them`, () => {
      const q = rounded(qbValues, dtype);
      const got = run(dtype, asRows(qbValues, dtype));
      for (let r = 0; r < rows; r++) {
        const n = start + r + 1;
        const want: number[] = [];
        for (let j = 0; j < n; j++) {
          let s = 0;
          for (let g = 0; g < idxHeads; g++) {
            let dot = 0;
            for (let i = 0; i < dI; i++) dot += q[r * qbWidth + qIOff + g * dI + i]! * keys[j * dI + i]!;
            s += xa[r * xaWidth + wOff + g]! * Math.max(0, dot);
          }
          want.push(s * scale);
        }
        const maxAbs = Math.max(...want.map(Math.abs));
        expectClose(got.subarray(r * keyCapacity, r * keyCapacity + n), want, 1e-6, maxAbs, `${dtype} row ${r}`);
      }
      expect([...got]).toEqual([...run('f32', q)]);
    });
  }
});

describe('dsa.sparse_attn: olat in the rows type', () => {
  const heads = 3, kvLora = 10, rope = 4, lat = kvLora + rope, capacity = 12, selWidth = 6, rows = 3;
  const qlat = normals(rows * heads * lat);
  const kvCache = normals(capacity * lat);
  const sel = new Int32Array(rows * selWidth).fill(-1);
  const selCount = Int32Array.of(4, 0, 6);
  [[0, 2, 3, 5], [], [1, 2, 4, 6, 7, 8]].forEach((s, r) => sel.set(s, r * selWidth));
  const scale = 0.3;
  const run = (dtype: FloatDtype) => {
    const out = launch(sparseAttnKernel as unknown as Kernel<KernelParams>, {
      qlat, kvCache, sel, selCount, olat: asRows(new Float32Array(rows * heads * kvLora).fill(Number.NaN), dtype),
      slots: Int32Array.of(0), rowStarts: Int32Array.of(0, rows), positions: Int32Array.of(8, 9, 10), blockTable: ONE_PAGE,
    }, {
      batch: 1, heads, kvLora, rope, selWidth, pagesPerSeq: 1, pageRows: capacity, kvDtype: 0, olatDtype: FLOAT_DTYPE_CODE[dtype], scale,
    }, rows, ['olat']);
    return fromRows(out.olat!, dtype);
  };
  const ref = new Float64Array(rows * heads * kvLora);
  for (let r = 0; r < rows; r++) {
    const picks = Array.from(sel.subarray(r * selWidth, r * selWidth + selCount[r]!));
    for (let h = 0; h < heads; h++) {
      const logits = picks.map((s) => {
        let dot = 0;
        for (let i = 0; i < lat; i++) dot += qlat[(r * heads + h) * lat + i]! * kvCache[s * lat + i]!;
        return dot * scale;
      });
      const m = Math.max(...logits);
      const p = logits.map((l) => Math.exp(l - m));
      const z = p.reduce((a, b) => a + b, 0);
      for (let i = 0; i < kvLora; i++) ref[(r * heads + h) * kvLora + i] = picks.reduce((acc, s, j) => acc + (p[j]! / z) * kvCache[s * lat + i]!, 0);
    }
  }
  const f32 = run('f32');
  for (const dtype of DTYPES) {
    it(`${dtype}: within one rounding of the float64 attention (zeros for a row that selected nothing), exactly the f32 result rounded`, () => {
      const got = run(dtype);
      expectClose(got, ref, UNIT[dtype] + 1e-12, 1e-6, `${dtype} olat vs float64`);
      expect([...got.subarray(heads * kvLora, 2 * heads * kvLora)].every((v) => v === 0)).toBe(true);
      expect([...got]).toEqual([...rounded(f32, dtype)]);
    });
  }
});
