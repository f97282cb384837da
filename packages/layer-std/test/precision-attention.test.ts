// Gated attention over the paged KV cache in bf16 / f16 (cache in the row type) and with FP8
// projections, through prefill, decode and verify steps with partial acceptance, against the
// float64 reference of the f32 path (FP8: of the dequantized weights). Two FP8 shapes: q/k/v of
// 64/16/16 rows (not whole 128-row blocks: three GEMMs into the qkv rows) and of 256/128/128 rows
// (stacked into one).
import type { FloatDtype, Precision } from '@metrale/core';
import { afterAll, describe, expect, it } from 'vitest';
import { runScript } from './attention-reference.js';
import { linearWeights, toFp8 } from './fp8-weights.js';
import { ROW_TYPE_BOUND } from './setup.js';

const measured: string[] = [];
afterAll(() => console.log(`[layer-std] attention against the f32 path's f64 reference (worst step):\n  ${measured.join('\n  ')}`));

const BF16: Precision = { rows: 'bf16', fp8Weights: false };
const F16: Precision = { rows: 'f16', fp8Weights: false };
const FP8: Precision = { rows: 'bf16', fp8Weights: true };
const STACKED = { num_attention_heads: 8, num_key_value_heads: 8, head_dim: 16 };
/**
 * Attention rounds more on the way (q/k/v, the normed q and k, the cache, the output before o_proj)
 * and its softmax sharpens q·k's errors: a looser bound than ROW_TYPE_BOUND's for bf16.
 */
const BOUND: Readonly<Record<FloatDtype, number>> = { f32: ROW_TYPE_BOUND.f32, bf16: 1.5e-2, f16: ROW_TYPE_BOUND.f16 };

describe('AttentionLayer in bf16 / f16 and with FP8 projections against the float64 reference', () => {
  for (const [label, precision] of [['bf16', BF16], ['f16', F16]] as const) {
    for (const graphs of [true, false]) {
      it(`${label}, ${graphs ? 'graphs replayed, pages of 4' : 'eager, pages of 16'}`, () => {
        const rel = runScript({ graphs, pageSize: graphs ? 4 : 16, precision });
        measured.push(`${label} ${graphs ? 'graphs' : 'eager '}: rel ${rel.toExponential(2)}`);
        expect(rel).toBeLessThan(BOUND[precision.rows]);
      });
    }
  }

  it('bf16, sequences of 600 and 290 rows: decode and verify rows over several key chunks (std.attn_decode + std.attn_combine), graphs replayed', () => {
    const rel = runScript({ graphs: true, pageSize: 16, long: true, precision: BF16 });
    measured.push(`bf16 long : rel ${rel.toExponential(2)}`);
    expect(rel).toBeLessThan(BOUND.bf16);
  });

  for (const [shape, config] of [['q/k/v apart (64/16/16 rows)', {}], ['q/k/v stacked (256/128/128 rows)', STACKED]] as const) {
    it(`fp8 + bf16, ${shape}`, () => {
      const prepare = (w: Parameters<typeof toFp8>[0]) => toFp8(w, linearWeights);
      const rel = runScript({ graphs: true, pageSize: 4, precision: FP8, prepare, config });
      const unquantized = runScript({ graphs: true, pageSize: 4, precision: FP8, prepare, reference: 'original', config });
      measured.push(`fp8 + bf16 ${shape}: rel ${rel.toExponential(2)} (${unquantized.toExponential(2)} vs the unquantized weights)`);
      expect(rel).toBeLessThan(BOUND.bf16);
    });
  }
});
