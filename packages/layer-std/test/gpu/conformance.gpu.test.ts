// Every std layer type on CUDA through the conformance kit (replay ≡ eager, failed capture → rearm,
// verify-then-accept ≡ decode, rejected rows leave no trace, slot reuse, room check), as the CPU
// lane runs it: RMSNorm (w and 1 + w), LayerNorm, SwiGLU MLP, MoE with both routings
// (Qwen3-Next softmax + gated shared expert; GLM-5 sigmoid + bias + groups + scaling + ungated
// shared experts), gated attention over pages of 4 rows (GQA, partial RoPE), lm head. Then each
// layer's rows (the embedding's too) on CUDA against the same layer on the CPU backend (the cuBLASLt GEMMs and the
// launch shapes the layers use). Both again with bf16 rows, and with FP8 weights (quantized in the
// test) for the layers that have Linear weights: the kit with rowDtype bf16 for every layer type it
// drives with bf16 rows (the lm head writes f32 logits, so it is checked against the CPU backend
// only), and each layer on CUDA against the CPU backend in the same precision. Bound in bf16
// (BF16_BOUND): the GPU's GEMMs and kernels sum in f32, the CPU's in f64, so a bf16 value may round
// the other way (one bf16 step), and a decode row and the same row in a verify batch may take
// different GEMM algorithms. Without a GPU the suite skips and says why.
import { CpuBackend } from '@metrale/cpu-backend';
import { F32_PRECISION, SeededRandom, StepDriver, floatBytes, type GpuBackend, type LayerLimits, type Precision, relativeL2Error } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import plugin from '@metrale/layer-std';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { linearWeights, toFp8 } from '../fp8-weights.js';
import { decodeRows, encodeRows, Weights, withPrecision } from '../setup.js';
import { cudaAvailable, ensureFatbins } from './cuda-setup.js';

/** Relative bound of bf16 outputs between paths and backends (see the header). */
const BF16_BOUND = 5e-3;

const cuda = await cudaAvailable();
if (!cuda.available) console.warn(`[layer-std gpu] conformance skipped: ${cuda.reason}`);

const D = 32;
const BASE = {
  model_type: 'qwen3_next', hidden_size: D, intermediate_size: 40, rms_norm_eps: 1e-6, layer_norm_eps: 1e-5, vocab_size: 56,
  num_experts: 8, num_experts_per_tok: 3, moe_intermediate_size: 12, shared_expert_intermediate_size: 16,
  num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16,
  rope_parameters: { rope_type: 'default', rope_theta: 10000, partial_rotary_factor: 0.25 },
};
const GLM = {
  model_type: 'glm_moe_dsa', hidden_size: D, rms_norm_eps: 1e-6, vocab_size: 56, n_routed_experts: 8, num_experts_per_tok: 2,
  n_group: 4, topk_group: 2, routed_scaling_factor: 2.5, norm_topk_prob: true, moe_intermediate_size: 12, n_shared_experts: 1,
};

interface Case {
  readonly label: string;
  readonly type: string;
  readonly config: Record<string, unknown>;
  readonly weights: (w: Weights) => void;
  /** Rows per page of the driver's KV pool (default 16). */
  readonly kvPageSize?: number;
}

function experts(w: Weights, E: number, I: number): void {
  for (let e = 0; e < E; e++) {
    w.add(`experts.${e}.gate_proj.weight`, [I, D], 0.25);
    w.add(`experts.${e}.up_proj.weight`, [I, D], 0.25);
    w.add(`experts.${e}.down_proj.weight`, [D, I], 0.3);
  }
}

function swiglu(w: Weights, prefix: string, I: number): void {
  w.add(`${prefix}gate_proj.weight`, [I, D], 0.25);
  w.add(`${prefix}up_proj.weight`, [I, D], 0.25);
  w.add(`${prefix}down_proj.weight`, [D, I], 0.25);
}

const CASES: Case[] = [
  { label: 'embedding', type: 'embedding', config: BASE, weights: (w) => void w.add('weight', [56, D], 1) },
  { label: 'rms-norm (1 + w)', type: 'rms-norm', config: BASE, weights: (w) => void w.add('weight', [D], 0.2) },
  { label: 'rms-norm (w)', type: 'rms-norm', config: { ...BASE, metrale_std: { norm_offset: 0 } }, weights: (w) => void w.add('weight', [D], 0.3, 1) },
  { label: 'layer-norm', type: 'layer-norm', config: BASE, weights: (w) => (w.add('weight', [D], 0.3, 1), void w.add('bias', [D], 0.2)) },
  { label: 'mlp', type: 'mlp', config: BASE, weights: (w) => swiglu(w, '', 40) },
  {
    label: 'moe (Qwen3-Next: softmax, gated shared expert)', type: 'moe', config: BASE,
    weights: (w) => {
      w.add('gate.weight', [8, D], 0.7);
      experts(w, 8, 12);
      swiglu(w, 'shared_expert.', 16);
      w.add('shared_expert_gate.weight', [1, D], 0.25);
    },
  },
  {
    label: 'moe (GLM-5: sigmoid + bias, groups, scaling, shared experts)', type: 'moe', config: GLM,
    weights: (w) => {
      w.add('gate.weight', [8, D], 0.7);
      w.add('gate.e_score_correction_bias', [8], 0.1);
      experts(w, 8, 12);
      swiglu(w, 'shared_experts.', 12);
    },
  },
  {
    label: 'attention (gated, GQA 4/2, rotary 4 of 16, pages of 4)', type: 'attention', config: BASE, kvPageSize: 4,
    weights: (w) => {
      w.add('q_proj.weight', [4 * 16 * 2, D], 2 / Math.sqrt(D));
      w.add('k_proj.weight', [2 * 16, D], 2 / Math.sqrt(D));
      w.add('v_proj.weight', [2 * 16, D], 1 / Math.sqrt(D));
      w.add('o_proj.weight', [D, 4 * 16], 1 / Math.sqrt(64));
      w.add('q_norm.weight', [16], 0.2);
      w.add('k_norm.weight', [16], 0.2);
    },
  },
  { label: 'lm-head', type: 'lm-head', config: BASE, weights: (w) => void w.add('weight', [56, D], 0.3) },
];

function weightsOf(c: Case, precision: Precision = F32_PRECISION): Weights {
  const w = new Weights(new SeededRandom(5));
  c.weights(w);
  return precision.fp8Weights ? toFp8(w, linearWeights) : w;
}

/** The data paths checked: f32 (the reference), bf16, and FP8 weights with bf16 rows for the layers with Linear weights. */
const PATHS: readonly { label: string; precision: Precision; types: readonly string[] }[] = [
  { label: 'f32', precision: F32_PRECISION, types: CASES.map((c) => c.type) },
  { label: 'bf16', precision: { rows: 'bf16', fp8Weights: false }, types: CASES.map((c) => c.type) },
  { label: 'fp8 + bf16', precision: { rows: 'bf16', fp8Weights: true }, types: ['mlp', 'moe', 'attention', 'lm-head'] },
];

let create: () => GpuBackend;
const lines: string[] = [];

describe.skipIf(!cuda.available)('@metrale/layer-std on CUDA', () => {
  beforeAll(() => {
    ensureFatbins();
    create = cuda.create!;
  });
  afterAll(() => console.log(`[layer-std gpu] conformance and CUDA vs CPU layers:\n  ${lines.join('\n  ')}`));

  // The kit drives layers through input rows; the embedding has none (it reads the token table), so
  // it is checked against the CPU backend below only, as is the lm head with bf16 rows.
  for (const path of PATHS) {
    const f32 = path.precision.rows === 'f32';
    for (const c of CASES.filter((x) => x.type !== 'embedding' && path.types.includes(x.type) && (f32 || x.type !== 'lm-head'))) {
      it(`${path.label}: ${c.label} passes every check of the conformance kit`, () => {
        const report = runLayerConformance(f32 ? plugin : withPrecision(plugin, path.precision), {
          backend: create, layerType: c.type, config: c.config, weights: weightsOf(c, path.precision).source(), k: 3, kvPageSize: c.kvPageSize ?? 16,
          ...(f32 ? {} : { rowDtype: 'bf16' as const, tolerance: BF16_BOUND }),
        });
        lines.push(`${path.label} ${c.label}: ${report.checks.map((x) => `${x.check} ${x.status}`).join(', ')}`);
        if (!report.passed) console.log(report.checks.map((x) => `${x.check}: ${x.status} — ${x.detail}`).join('\n'));
        expect(report.passed).toBe(true);
        const status = Object.fromEntries(report.checks.map((x) => [x.check, x.status]));
        expect(status['replay-equals-eager']).toBe('pass');
        expect(status['verify-accept-equals-decode']).toBe('pass');
        if (c.type === 'attention') expect(status['room-check-before-write']).toBe('pass');
        expect(status['prefix-resume-equals-prefill']).toBe('pass');
      });
    }
  }

  const LIMITS: LayerLimits = { maxSeqs: 2, maxSeqLen: 64, maxBatch: 2, maxK: 4, maxRows: 48 };
  for (const path of PATHS) {
    const rows = path.precision.rows;
    for (const c of CASES.filter((x) => path.types.includes(x.type))) {
      it(`${path.label}: ${c.label}: a 37-row prefill then 3 decode steps on CUDA ≡ the CPU backend`, () => {
        const run = (gpu: GpuBackend): Float32Array[] => {
          const layer = plugin.create({
            gpu, weights: weightsOf(c, path.precision).source(), limits: LIMITS, layerType: c.type, config: c.config, layerIndex: 0, precision: path.precision,
          } as never);
          const driver = new StepDriver({ gpu, layers: [layer], limits: LIMITS, kvCache: { pageSize: c.kvPageSize ?? 16 } });
          const rnd = new SeededRandom(17);
          const width = layer.inputRowBytes / floatBytes(rows);
          const outType = c.type === 'lm-head' ? 'f32' : rows;
          const outs: Float32Array[] = [];
          try {
            const seq = driver.open();
            for (const n of [37, 1, 1, 1]) {
              const input = width ? encodeRows(rnd.normals(n * width), rows) : undefined;
              const tokens = Int32Array.from({ length: n }, () => rnd.int(0, 55));
              const r = n > 1 ? driver.prefill({ seqs: [seq], lengths: [n], ...(input ? { input } : {}), tokens })
                : driver.decode({ seqs: [seq], ...(input ? { input } : {}), tokens });
              outs.push(decodeRows(driver.readOutput(r), outType));
            }
          } finally {
            driver.dispose();
            layer.dispose();
          }
          return outs;
        };
        const cpu = new CpuBackend();
        const gpu = create();
        try {
          const want = run(cpu);
          const got = run(gpu);
          const rels = got.map((g, i) => relativeL2Error(g, want[i]!));
          lines.push(`${path.label} ${c.label}: CUDA vs CPU rel ${rels.map((r) => r.toExponential(2)).join(' ')}`);
          for (const r of rels) expect(r).toBeLessThan(rows === 'f32' ? 1e-5 : BF16_BOUND);
        } finally {
          gpu.dispose();
          cpu.dispose();
        }
      });
    }
  }
});
