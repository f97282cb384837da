import { describe, expect, it } from 'vitest';
import {
  E4M3_VALUES, WeightsError, bf16BitsToF32, checkpointDtype, describePrecision, e4m3ToF32, f16BitsToF32, f32ToBf16Bits, f32ToE4m3,
  f32ToF16Bits, readFp8Quantization, resolvePrecision, roundTo,
} from '../src/index.js';

const FP8 = { quant_method: 'fp8', fmt: 'e4m3', activation_scheme: 'dynamic', weight_block_size: [128, 128], modules_to_not_convert: ['lm_head'] };

describe('--dtype against the checkpoint', () => {
  it('auto takes the checkpoint dtype; a block-FP8 checkpoint keeps FP8 weights with bf16 rows', () => {
    expect(resolvePrecision('auto', { dtype: 'bfloat16' })).toEqual({ rows: 'bf16', fp8Weights: false });
    expect(resolvePrecision('auto', { torch_dtype: 'float16' })).toEqual({ rows: 'f16', fp8Weights: false });
    expect(resolvePrecision('auto', { torch_dtype: 'float32' })).toEqual({ rows: 'f32', fp8Weights: false });
    expect(resolvePrecision('auto', { dtype: 'bfloat16', quantization_config: FP8 })).toEqual({ rows: 'bf16', fp8Weights: true });
    // transformers loads a config without a dtype in float32.
    expect(resolvePrecision('auto', {})).toEqual({ rows: 'f32', fp8Weights: false });
    expect(resolvePrecision('auto', { text_config: { dtype: 'bfloat16' } })).toEqual({ rows: 'bf16', fp8Weights: false });
  });

  it('an explicit dtype puts every weight and row in it (FP8 weights dequantized)', () => {
    expect(resolvePrecision('bf16', { dtype: 'float32' })).toEqual({ rows: 'bf16', fp8Weights: false });
    expect(resolvePrecision('f32', { dtype: 'bfloat16', quantization_config: FP8 })).toEqual({ rows: 'f32', fp8Weights: false });
    expect(describePrecision({ rows: 'bf16', fp8Weights: true })).toBe('fp8 weights, bf16 rows');
  });

  it('refuses what the kernels do not read, naming the field', () => {
    const bad = (q: Record<string, unknown>, pattern: RegExp) => {
      expect(() => resolvePrecision('auto', { quantization_config: q }, '/m/config.json')).toThrow(WeightsError);
      expect(() => resolvePrecision('auto', { quantization_config: q }, '/m/config.json')).toThrow(pattern);
    };
    bad({ ...FP8, quant_method: 'awq' }, /quantization_config\.quant_method is "awq"/);
    bad({ ...FP8, fmt: 'e5m2' }, /quantization_config\.fmt is "e5m2"/);
    bad({ ...FP8, activation_scheme: 'static' }, /activation_scheme is "static"/);
    bad({ ...FP8, weight_block_size: [64, 64] }, /weight_block_size is \[64,64\]/);
    bad({ ...FP8, weight_block_size: undefined }, /weight_block_size is undefined/);
    bad({ ...FP8, modules_to_not_convert: 'lm_head' }, /modules_to_not_convert must be a list/);
    expect(() => resolvePrecision('auto', { dtype: 'int8' })).toThrow(/dtype is "int8"/);
    expect(() => resolvePrecision('f8' as never, {})).toThrow(/--dtype "f8"/);
    // The config is checked whatever the choice: a broken checkpoint is refused at once.
    expect(() => resolvePrecision('f32', { quantization_config: { quant_method: 'gptq' } })).toThrow(/quant_method is "gptq"/);
  });

  it('reads fmt and activation_scheme defaults as transformers does', () => {
    expect(readFp8Quantization({ quantization_config: { quant_method: 'fp8', weight_block_size: [128, 128] } })).toEqual({ block: 128, modulesToNotConvert: [] });
    expect(readFp8Quantization({})).toBeUndefined();
    expect(checkpointDtype({ dtype: 'torch.bfloat16' })).toBe('bf16');
  });
});

describe('element types', () => {
  it('bf16 and f16 round to nearest even and back', () => {
    for (const x of [1, -2.5, 1 / 3, 65504, 1e-7, 3.14159, 1 + 2 ** -8, 1 + 3 * 2 ** -9]) {
      const bf = bf16BitsToF32(f32ToBf16Bits(x));
      expect(Math.abs(bf - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -8);
      expect(roundTo('bf16', x)).toBe(bf);
    }
    // Ties go to the even mantissa: 1 + 2^-11 (halfway between 1 and 1 + 2^-10) rounds to 1 in f16.
    expect(f16BitsToF32(f32ToF16Bits(1 + 2 ** -11))).toBe(1);
    expect(f16BitsToF32(f32ToF16Bits(1 + 3 * 2 ** -11))).toBe(1 + 2 ** -9);
    expect(f16BitsToF32(f32ToF16Bits(65520))).toBe(Infinity);
    expect(f16BitsToF32(f32ToF16Bits(2 ** -24))).toBe(2 ** -24);
    expect(f16BitsToF32(f32ToF16Bits(3 * 2 ** -26))).toBe(2 ** -24);
    expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(Number.NaN)))).toBe(true);
  });

  it('every E4M3 code round-trips through the encoder; out-of-range values saturate', () => {
    for (let code = 0; code < 256; code++) {
      const v = e4m3ToF32(code);
      if (Number.isNaN(v)) continue;
      expect(E4M3_VALUES[code]).toBe(v);
      // -0 and +0 are two codes of one value.
      if (v === 0) continue;
      expect(f32ToE4m3(v)).toBe(code);
    }
    expect(e4m3ToF32(f32ToE4m3(1000))).toBe(448);
    expect(e4m3ToF32(f32ToE4m3(-1000))).toBe(-448);
    // Halfway between 1 and 1.125 rounds to the even code (1).
    expect(e4m3ToF32(f32ToE4m3(1.0625))).toBe(1);
    expect(e4m3ToF32(f32ToE4m3(1.1875))).toBe(1.25);
  });
});
