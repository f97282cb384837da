// Block-FP8 weights in the published layout (GLM-5-FP8, Qwen3-Next-FP8): `<name>` F8_E4M3 [out, in]
// and `<name>_scale_inv` F32 [⌈out/128⌉, ⌈in/128⌉], weight = code value × scale per 128 × 128
// block, made from f32 test weights as tools/fixtures/models.py makes them (scale = amax / 448 of
// the block, 1 for an all-zero block; codes rounded to nearest even).
import { FP8_BLOCK, MemoryWeightSource, dequantizeFp8, tensorOf, toF32, type HostTensor, type WeightSource } from '@metrale/core';
import { E4M3_MAX, f32ToE4m3 } from '@metrale/layer-dsa';

/** The Linear weights GLM-5-FP8 ships in FP8 (indexer.weights_proj stays bf16: `indexers_proj` in modules_to_not_convert). */
export const GLM5_FP8_LINEARS = [
  'q_a_proj.weight', 'q_b_proj.weight', 'kv_a_proj_with_mqa.weight', 'kv_b_proj.weight', 'o_proj.weight', 'indexer.wq_b.weight', 'indexer.wk.weight',
] as const;

/** An [rows, cols] weight as FP8 codes and block scales; `values` is what they stand for (q × scale, f32). */
export function quantizeBlockFp8(values: Float32Array, rows: number, cols: number): { codes: Uint8Array; scales: Float32Array; values: Float32Array } {
  const br = Math.ceil(rows / FP8_BLOCK);
  const bc = Math.ceil(cols / FP8_BLOCK);
  const scales = new Float32Array(br * bc);
  const codes = new Uint8Array(rows * cols);
  for (let bi = 0; bi < br; bi++) {
    for (let bj = 0; bj < bc; bj++) {
      const r1 = Math.min(rows, (bi + 1) * FP8_BLOCK);
      const c1 = Math.min(cols, (bj + 1) * FP8_BLOCK);
      let amax = 0;
      for (let r = bi * FP8_BLOCK; r < r1; r++) for (let c = bj * FP8_BLOCK; c < c1; c++) amax = Math.max(amax, Math.abs(values[r * cols + c]!));
      const scale = amax > 0 ? Math.fround(amax / E4M3_MAX) : 1;
      scales[bi * bc + bj] = scale;
      for (let r = bi * FP8_BLOCK; r < r1; r++) for (let c = bj * FP8_BLOCK; c < c1; c++) codes[r * cols + c] = f32ToE4m3(values[r * cols + c]! / scale);
    }
  }
  return { codes, scales, values: dequantizeFp8(codes, scales, rows, cols) };
}

/**
 * `tensors` with each of `names` (2-D f32/bf16 tensors) replaced by its block-FP8 pair. Returns
 * the quantized set and, for references, the same set with the dequantized f32 values in place.
 */
export function quantizeTensors(tensors: readonly HostTensor[], names: readonly string[]): { fp8: HostTensor[]; dequantized: HostTensor[] } {
  const fp8: HostTensor[] = [];
  const dequantized: HostTensor[] = [];
  for (const t of tensors) {
    if (!names.includes(t.name)) {
      fp8.push(t);
      dequantized.push(t);
      continue;
    }
    if (t.shape.length !== 2) throw new Error(`quantizeTensors: ${t.name} is not a matrix`);
    const [rows, cols] = t.shape as [number, number];
    const q = quantizeBlockFp8(toF32(t), rows, cols);
    fp8.push({ name: t.name, dtype: 'f8e4m3', shape: [rows, cols], data: q.codes });
    fp8.push(tensorOf(`${t.name}_scale_inv`, q.scales, [Math.ceil(rows / FP8_BLOCK), Math.ceil(cols / FP8_BLOCK)]));
    dequantized.push(tensorOf(t.name, q.values, [rows, cols]));
  }
  return { fp8, dequantized };
}

/** Every tensor of a weight source (a fixture's), read once. */
export function tensorsOf(source: WeightSource): HostTensor[] {
  return source.names().map((n) => source.get(n));
}

export const sourceOf = (tensors: HostTensor[], origin: string): MemoryWeightSource => new MemoryWeightSource(origin, tensors);
