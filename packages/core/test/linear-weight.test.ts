import { describe, expect, it } from 'vitest';
import {
  F32_PRECISION, MemoryWeightSource, SeededRandom, WeightsError, bf16BitsToF32, blocksOf, dequantizeFp8, linearBytes, linearToF32, quantizeFp8,
  readFloats, readLinear, stackLinears, tensorOf, toBf16, type HostTensor, type Precision,
} from '../src/index.js';

const BF16: Precision = { rows: 'bf16', fp8Weights: false };
const FP8: Precision = { rows: 'bf16', fp8Weights: true };

function randomValues(n: number, seed: number): Float32Array {
  const r = new SeededRandom(seed);
  return Float32Array.from({ length: n }, () => r.normal() * 0.05);
}

/** A checkpoint's FP8 Linear: codes and `_scale_inv`, as the published layout holds them. */
function fp8Tensors(name: string, rows: number, cols: number, seed: number): { tensors: HostTensor[]; values: Float32Array } {
  const values = randomValues(rows * cols, seed);
  const { codes, scales } = quantizeFp8(values, rows, cols);
  return {
    values,
    tensors: [
      { name, dtype: 'f8e4m3', shape: [rows, cols], data: codes },
      tensorOf(`${name}_scale_inv`, scales, [blocksOf(rows), blocksOf(cols)]),
    ],
  };
}

describe('readLinear', () => {
  it('keeps a bf16 tensor as is on the bf16 path and converts it exactly for f32', () => {
    const values = randomValues(6 * 5, 1);
    const bits = toBf16(values);
    const src = new MemoryWeightSource('m.safetensors', [{ name: 'w', dtype: 'bf16', shape: [6, 5], data: new Uint8Array(bits.buffer) }]);
    const b = readLinear(src, 'w', [6, 5], BF16);
    expect(b.dtype).toBe('bf16');
    expect(Array.from(new Uint16Array(b.data.buffer, b.data.byteOffset, 30))).toEqual(Array.from(bits));
    const f = readLinear(src, 'w', [6, 5], F32_PRECISION);
    expect(f.dtype).toBe('f32');
    expect(Array.from(linearToF32(f))).toEqual(Array.from(bits, (x) => bf16BitsToF32(x)));
  });

  it('rounds an f32 tensor to bf16 for the bf16 path', () => {
    const values = randomValues(4 * 3, 2);
    const w = readLinear(new MemoryWeightSource('m', [tensorOf('w', values, [4, 3])]), 'w', [4, 3], BF16);
    expect(Array.from(new Uint16Array(w.data.buffer, w.data.byteOffset, 12))).toEqual(Array.from(toBf16(values)));
  });

  it('keeps block-FP8 codes and scales with fp8Weights, and dequantizes them otherwise (partial blocks too)', () => {
    const rows = 200, cols = 130; // 2 × 2 blocks, the last ones partial
    const { tensors, values } = fp8Tensors('proj.weight', rows, cols, 3);
    const src = new MemoryWeightSource('m', tensors);
    const kept = readLinear(src, 'proj.weight', [rows, cols], FP8);
    expect(kept.dtype).toBe('f8e4m3');
    expect(kept.scales!.length).toBe(4);
    expect(linearBytes(kept)).toBe(rows * cols + 16);
    const deq = linearToF32(kept);
    // Within E4M3's rounding (2^-4 relative) of the original values, scaled per block.
    let worst = 0;
    for (let i = 0; i < values.length; i++) worst = Math.max(worst, Math.abs(deq[i]! - values[i]!) / (0.25 + Math.abs(values[i]!) * 20));
    expect(worst).toBeLessThan(2 ** -4);
    const f32 = readLinear(src, 'proj.weight', [rows, cols], F32_PRECISION);
    expect(f32.dtype).toBe('f32');
    expect(Array.from(linearToF32(f32))).toEqual(Array.from(deq));
    const bf = readLinear(src, 'proj.weight', [rows, cols], BF16);
    expect(Array.from(new Uint16Array(bf.data.buffer, bf.data.byteOffset, rows * cols))).toEqual(Array.from(toBf16(deq)));
    expect(Array.from(dequantizeFp8(kept.data, kept.scales!, rows, cols))).toEqual(Array.from(deq));
  });

  it('names the tensor and file of a missing, misshapen or bad scale', () => {
    const { tensors } = fp8Tensors('layers.3.mlp.down_proj.weight', 130, 260, 4);
    const without = (n: string) => tensors.filter((t) => t.name !== n);
    const attempt = (ts: HostTensor[]) => () => readLinear(new MemoryWeightSource('/ckpt/model.safetensors', ts), 'layers.3.mlp.down_proj.weight', [130, 260], FP8);
    expect(attempt(without('layers.3.mlp.down_proj.weight_scale_inv'))).toThrow(/missing tensor 'layers\.3\.mlp\.down_proj\.weight_scale_inv'.*shape \[2, 3\]/);
    const misshapen = [...without('layers.3.mlp.down_proj.weight_scale_inv'), tensorOf('layers.3.mlp.down_proj.weight_scale_inv', new Float32Array(6), [3, 2])];
    expect(attempt(misshapen)).toThrow(/has shape \[3, 2\], expected \[2, 3\]/);
    const zero = [...without('layers.3.mlp.down_proj.weight_scale_inv'), tensorOf('layers.3.mlp.down_proj.weight_scale_inv', new Float32Array(6), [2, 3])];
    expect(attempt(zero)).toThrow(/finite and positive/);
    const nan = tensors.map((t) => (t.dtype === 'f8e4m3' ? { ...t, data: Uint8Array.from(t.data, (v, i) => (i === 7 ? 0x7f : v)) } : t));
    expect(attempt(nan)).toThrow(/FP8 NaN .* at element 7/);
    try {
      attempt(without('layers.3.mlp.down_proj.weight_scale_inv'))();
    } catch (error) {
      expect(error).toBeInstanceOf(WeightsError);
      expect((error as Error).message).toContain('/ckpt/model.safetensors');
    }
  });

  it('finds a non-finite value from the bits, at any position, in every float type', () => {
    for (const [dtype, nan] of [['bf16', 0x7fc0], ['f16', 0x7c00]] as const) {
      for (const at of [0, 5, 6]) {
        const bits = new Uint16Array(7).fill(0x3c00);
        bits[at] = nan;
        const src = new MemoryWeightSource('m', [{ name: 'w', dtype, shape: [7, 1], data: new Uint8Array(bits.buffer) }]);
        expect(() => readLinear(src, 'w', [7, 1], { rows: dtype, fp8Weights: false })).toThrow(new RegExp(`non-finite value .* at element ${at}$`));
      }
    }
    const f = new Float32Array(5).fill(1);
    f[3] = -Infinity;
    expect(() => readLinear(new MemoryWeightSource('m', [tensorOf('w', f, [5, 1])]), 'w', [5, 1], F32_PRECISION)).toThrow(/non-finite value \(-Infinity\) at element 3/);
    // Unaligned bytes (a view into a larger buffer) are read as well.
    const raw = new Uint8Array(2 + 4 * 2);
    const view = raw.subarray(2);
    new Uint16Array(raw.buffer.slice(0)).fill(0);
    view.set(new Uint8Array(Uint16Array.from([0x3f80, 0x3f80, 0x3f80, 0x7f80]).buffer));
    expect(() => readLinear(new MemoryWeightSource('m', [{ name: 'w', dtype: 'bf16', shape: [4, 1], data: view }]), 'w', [4, 1], BF16)).toThrow(/at element 3/);
  });

  it('refuses an integer tensor and a wrong shape', () => {
    const src = new MemoryWeightSource('m', [{ name: 'w', dtype: 'i32', shape: [2, 2], data: new Uint8Array(16) }, tensorOf('v', new Float32Array(6), [2, 3])]);
    expect(() => readLinear(src, 'w', [2, 2], BF16)).toThrow(/is i32/);
    expect(() => readLinear(src, 'v', [3, 2], BF16)).toThrow(/has shape \[2, 3\], expected \[3, 2\]/);
    expect(() => readFloats(src, 'v', [2, 3], 'f16')).not.toThrow();
  });
});

describe('stackLinears', () => {
  it('stacks float weights and FP8 weights of whole 128-row blocks, and refuses a partial block under another', () => {
    const part = (name: string, rows: number, seed: number) => {
      const { tensors } = fp8Tensors(name, rows, 64, seed);
      return readLinear(new MemoryWeightSource('m', tensors), name, [rows, 64], FP8);
    };
    const gate = part('gate', 128, 5), up = part('up', 40, 6);
    const stacked = stackLinears([gate, up], 'gate_up');
    expect(stacked.rows).toBe(168);
    expect(stacked.scales!.length).toBe(blocksOf(168) * blocksOf(64));
    expect(Array.from(linearToF32(stacked))).toEqual([...linearToF32(gate), ...linearToF32(up)]);
    expect(() => stackLinears([up, gate], 'up_gate')).toThrow(/40 rows, not a multiple of 128/);
    const bf = readLinear(new MemoryWeightSource('m', [tensorOf('a', randomValues(12, 7), [3, 4])]), 'a', [3, 4], BF16);
    expect(() => stackLinears([bf, gate], 'mixed')).toThrow(/one type and width/);
  });
});
