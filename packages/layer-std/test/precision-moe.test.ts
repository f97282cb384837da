// The MoE layer in bf16 / f16 and with block-FP8 experts and shared experts (over bf16 and f16
// rows) against float64 references of Qwen3NextSparseMoeBlock and GlmMoeDsaMoE from the f32 inputs
// and weights; FP8 runs against the dequantized weights. Shapes with FP8 weights span several
// 128-blocks without being multiples of 128 (D 160, I 136), and a small one (I 12) has partial
// blocks only. Also: the grouped expert path (many rows per expert) gives each row the bits of the
// row-wise path, whatever the format.
import { CpuBackend } from '@metrale/cpu-backend';
import { SeededRandom, StepDriver, type LayerLimits, type Precision, relativeL2Error } from '@metrale/core';
import { EXPERT_KERNELS, FP8_TENSOR_CORE_MIN_BATCH, MoeLayer, glmMoeOptions, moeGrouped, moeTensorCores, qwen3NextMoeOptions, type MoeOptions } from '@metrale/layer-std';
import { afterAll, describe, expect, it } from 'vitest';
import { linearWeights, toFp8 } from './fp8-weights.js';
import { LIMITS, decodeRows, encodeRows, matvec, ROW_TYPE_BOUND, runRows, sigmoid, silu, Weights } from './setup.js';

const E = 8;

/** The shared expert `width` · I wide: 1 as in the published checkpoints (a slot of the routed kernels), 2 (run apart). */
function moeWeights(D: number, I: number, shared: 'gated' | 'plain', seed: number, width = 1): Weights {
  const w = new Weights(new SeededRandom(seed));
  w.add('gate.weight', [E, D], 3 / Math.sqrt(D));
  for (let e = 0; e < E; e++) {
    w.add(`experts.${e}.gate_proj.weight`, [I, D], 1 / Math.sqrt(D));
    w.add(`experts.${e}.up_proj.weight`, [I, D], 1 / Math.sqrt(D));
    w.add(`experts.${e}.down_proj.weight`, [D, I], 1 / Math.sqrt(I));
  }
  const prefix = shared === 'gated' ? 'shared_expert.' : 'shared_experts.';
  w.add(`${prefix}gate_proj.weight`, [width * I, D], 1 / Math.sqrt(D));
  w.add(`${prefix}up_proj.weight`, [width * I, D], 1 / Math.sqrt(D));
  w.add(`${prefix}down_proj.weight`, [D, width * I], 1 / Math.sqrt(width * I));
  if (shared === 'gated') w.add('shared_expert_gate.weight', [1, D], 1);
  else w.add('gate.e_score_correction_bias', [E], 0.3);
  return w;
}

/** Indices of the k largest (repeated argmax, lowest index on ties) among the allowed ones. */
function topk(v: ArrayLike<number>, k: number, allowed: (i: number) => boolean = () => true): number[] {
  const taken: number[] = [];
  for (let j = 0; j < k; j++) {
    let best = -1;
    for (let i = 0; i < v.length; i++) if (allowed(i) && !taken.includes(i) && (best < 0 || v[i]! > v[best]!)) best = i;
    taken.push(best);
  }
  return taken;
}

/** The block's f64 output for rows x (HF's formulas), from the weights' values in `w`. */
function moeReference(w: Weights, o: MoeOptions, x: Float32Array, n: number): Float64Array {
  const { hidden: D, inter: I, topK, routing } = o;
  const v = (name: string) => w.values.get(name)!;
  const swiglu = (prefix: string, inter: number, off: number) => {
    const g = matvec(v(`${prefix}gate_proj.weight`), x, inter, D, off);
    const u = matvec(v(`${prefix}up_proj.weight`), x, inter, D, off);
    return matvec(v(`${prefix}down_proj.weight`), g.map((gv, i) => silu(gv) * u[i]!), D, inter);
  };
  const out = new Float64Array(n * D);
  for (let r = 0; r < n; r++) {
    const logits = matvec(v('gate.weight'), x, E, D, r * D);
    let ids: number[];
    let weights: number[];
    if (routing.scoring === 'softmax') {
      const m = Math.max(...logits);
      const p = logits.map((l) => Math.exp(l - m));
      const s = p.reduce((a, b) => a + b, 0);
      const probs = p.map((q) => q / s);
      ids = topk(probs, topK);
      const sum = ids.reduce((a, e) => a + probs[e]!, 0);
      weights = ids.map((e) => (routing.normTopK ? probs[e]! / sum : probs[e]!));
    } else {
      const s = logits.map(sigmoid);
      const bias = v('gate.e_score_correction_bias');
      const choice = s.map((q, e) => q + bias[e]!);
      const size = E / routing.nGroup;
      const groupScore = Array.from({ length: routing.nGroup }, (_, g) => {
        const members = Array.from(choice.subarray(g * size, (g + 1) * size));
        return topk(members, 2).reduce((a, i) => a + members[i]!, 0);
      });
      const groups = new Set(topk(groupScore, routing.topkGroup));
      ids = topk(choice, topK, (e) => groups.has(Math.floor(e / size)));
      const denom = ids.reduce((a, e) => a + s[e]!, 0) + 1e-20;
      weights = ids.map((e) => (routing.scaling * s[e]!) / denom);
    }
    const y = new Float64Array(D);
    ids.forEach((e, j) => swiglu(`experts.${e}.`, I, r * D).forEach((q, i) => (y[i]! += weights[j]! * q)));
    const sh = o.shared!;
    const g = sh.gate ? sigmoid(matvec(v(sh.gate), x, 1, D, r * D)[0]!) : 1;
    swiglu(sh.prefix, sh.inter, r * D).forEach((q, i) => (y[i]! += g * q));
    out.set(y, r * D);
  }
  return out;
}

const PRECISIONS: readonly { label: string; precision: Precision }[] = [
  { label: 'bf16', precision: { rows: 'bf16', fp8Weights: false } },
  { label: 'f16', precision: { rows: 'f16', fp8Weights: false } },
  { label: 'fp8 + bf16', precision: { rows: 'bf16', fp8Weights: true } },
  { label: 'fp8 + f16', precision: { rows: 'f16', fp8Weights: true } },
];

const ROUTINGS = [
  {
    label: 'Qwen3-Next (softmax, gated shared expert)', shared: 'gated' as const,
    options: (D: number, I: number, width = 1) => qwen3NextMoeOptions({ hidden_size: D, num_experts: E, num_experts_per_tok: 3, moe_intermediate_size: I, shared_expert_intermediate_size: width * I }),
  },
  {
    label: 'GLM-5 (sigmoid + bias, groups, scaling)', shared: 'plain' as const,
    options: (D: number, I: number, width = 1) => glmMoeOptions({
      hidden_size: D, n_routed_experts: E, num_experts_per_tok: 2, moe_intermediate_size: I, n_shared_experts: width, n_group: 4, topk_group: 2, routed_scaling_factor: 2.5,
    }),
  },
];

const measured: string[] = [];
const record = (label: string, rel: number): number => (measured.push(`${label.padEnd(78)} rel ${rel.toExponential(2)}`), rel);
afterAll(() => console.log(`[layer-std] MoE against the f32 path's f64 references:\n  ${measured.join('\n  ')}`));

describe('MoE in bf16 / f16 and with FP8 weights against float64 references', () => {
  for (const [D, I] of [[16, 12], [160, 136]] as const) {
    for (const routing of ROUTINGS) {
      for (const width of [1, 2]) {
        const w = moeWeights(D, I, routing.shared, D + I, width);
        const options = routing.options(D, I, width);
        const x = new SeededRandom(9).normals(5 * D);
        const want = moeReference(w, options, x, 5);
        for (const { label, precision } of PRECISIONS) {
          it(`${label}: ${routing.label}, D ${D}, I ${I}, shared expert ${width} · I`, () => {
            const src = precision.fp8Weights ? toFp8(w, linearWeights) : w;
            const out = runRows((gpu) => new MoeLayer(gpu, src.source(), LIMITS, { ...options, precision }), x, undefined, undefined, { rows: precision.rows });
            const name = `${label} ${routing.label.split(' ')[0]} D=${D} I=${I} shared ${width}·I`;
            if (precision.fp8Weights) {
              record(`${name} vs the unquantized weights`, relativeL2Error(out, want));
              expect(record(`${name} vs the dequantized weights`, relativeL2Error(out, moeReference(src, options, x, 5)))).toBeLessThan(ROW_TYPE_BOUND[precision.rows]);
            } else {
              expect(record(name, relativeL2Error(out, want))).toBeLessThan(ROW_TYPE_BOUND[precision.rows]);
            }
          });
        }
      }
    }
  }

  for (const { label, precision } of PRECISIONS) {
    it(`${label}: the grouped path (24 rows over 8 experts) gives each row the row-wise path's bits`, () => {
      const D = 160;
      const I = 136;
      const w = moeWeights(D, I, 'gated', 3);
      const src = precision.fp8Weights ? toFp8(w, linearWeights) : w;
      const options = { ...ROUTINGS[0]!.options(D, I), precision };
      // The shared expert is one more slot and one more expert of the expert kernels.
      expect(moeGrouped(24, options.topK + 1, E + 1)).toBe(true);
      expect(moeGrouped(5, options.topK + 1, E + 1)).toBe(false);
      const x = new SeededRandom(12).normals(24 * D);
      const all = runRows((gpu) => new MoeLayer(gpu, src.source(), LIMITS, options), x, undefined, undefined, { rows: precision.rows });
      const few = runRows((gpu) => new MoeLayer(gpu, src.source(), LIMITS, options), x.subarray(0, 5 * D), undefined, undefined, { rows: precision.rows });
      expect(Array.from(all.subarray(0, 5 * D))).toEqual(Array.from(few));
    });
  }

  it('16-bit expert weights take the tensor-core GEMMs in every step, FP8 ones in prefill steps and, from a decode batch of 32, in every step; f32 rows and widths off 16 never', () => {
    expect(FP8_TENSOR_CORE_MIN_BATCH).toBe(32);
    for (const format of ['bf16', 'f16', 'fp8-bf16', 'fp8-f16'] as const) {
      const fp8 = format.startsWith('fp8');
      for (const maxBatch of [1, 31, 32, 256]) {
        const everyStep = !fp8 || maxBatch >= 32;
        expect(moeTensorCores(EXPERT_KERNELS[format], 'prefill', 2048, 512, maxBatch), format).toBe(true);
        expect(moeTensorCores(EXPERT_KERNELS[format], 'decode', 2048, 512, maxBatch), `${format}, max batch ${maxBatch}`).toBe(everyStep);
        expect(moeTensorCores(EXPERT_KERNELS[format], 'verify', 2048, 512, maxBatch), `${format}, max batch ${maxBatch}`).toBe(everyStep);
        expect(moeTensorCores(EXPERT_KERNELS[format], 'decode', 2048, 136, maxBatch), format).toBe(false);
      }
      expect(moeTensorCores(EXPERT_KERNELS[format], 'prefill', 2048, 136, 64), format).toBe(false);
      expect(moeTensorCores(EXPERT_KERNELS[format], 'prefill', 1000, 512, 64), format).toBe(false);
    }
    expect(moeTensorCores(EXPERT_KERNELS.f32, 'prefill', 2048, 512, 64)).toBe(false);
  });

  // A layer picks its FP8 decode kernels once, by the decode batch it is built for, and keeps them
  // for every decode step: the row-wise CUDA-core kernels below FP8_TENSOR_CORE_MIN_BATCH, the
  // tensor-core GEMMs from it. Both compute the block against the dequantized weights.
  for (const maxBatch of [8, 32]) {
    it(`fp8 + bf16: a layer built for ${maxBatch} sequences decodes on the ${maxBatch >= 32 ? 'tensor-core GEMMs' : 'CUDA-core kernels'}, at the dequantized reference`, () => {
      const [D, I, n] = [160, 144, 3];
      const w = moeWeights(D, I, 'gated', 21, 1);
      const src = toFp8(w, linearWeights);
      const options = { ...ROUTINGS[0]!.options(D, I), precision: { rows: 'bf16', fp8Weights: true } as Precision };
      const limits: LayerLimits = { maxSeqs: maxBatch, maxSeqLen: 8, maxBatch, maxK: 1, maxRows: maxBatch };
      const rnd = new SeededRandom(22);
      const prompt = rnd.normals(n * D);
      const x = rnd.normals(n * D);
      const gpu = new CpuBackend();
      const layer = new MoeLayer(gpu, src.source(), limits, options);
      const driver = new StepDriver({ gpu, layers: [layer], limits, graphs: false });
      const launched: string[] = [];
      const launch = gpu.launch.bind(gpu);
      gpu.launch = (kernel, config, args) => (launched.push(kernel.name), launch(kernel, config, args));
      try {
        const seqs = Array.from({ length: n }, () => driver.open());
        driver.prefill({ seqs, lengths: seqs.map(() => 1), input: encodeRows(prompt, 'bf16') });
        launched.length = 0;
        const out = decodeRows(driver.readOutput(driver.decode({ seqs, input: encodeRows(x, 'bf16') })), 'bf16');
        const tensorCores = maxBatch >= FP8_TENSOR_CORE_MIN_BATCH;
        expect(launched.includes('std.moe_gemm_up_few.fp8-bf16'), launched.join(', ')).toBe(tensorCores);
        expect(launched.includes('std.moe_experts_up_rowwise.fp8-bf16'), launched.join(', ')).toBe(!tensorCores);
        expect(record(`fp8 + bf16 decode, max batch ${maxBatch}, vs the dequantized weights`, relativeL2Error(out, moeReference(src, options, x, n)))).toBeLessThan(ROW_TYPE_BOUND.bf16);
      } finally {
        driver.dispose();
        layer.dispose();
        gpu.dispose();
      }
    });
  }
});
