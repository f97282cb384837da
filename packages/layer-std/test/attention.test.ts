import { CpuBackend } from '@metrale/cpu-backend';
import { InvalidArgumentError, SeededRandom, StepDriver, type LayerLimits } from '@metrale/core';
import { runLayerConformance } from '@metrale/core/testing';
import plugin, { AttentionLayer, qwen3NextAttentionOptions, type AttentionOptions } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { matvec, relErr, rmsNorm, sigmoid, Weights } from './setup.js';

const CONFIG = {
  model_type: 'qwen3_next', hidden_size: 24, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8,
  rope_parameters: { rope_type: 'default', rope_theta: 10000, partial_rotary_factor: 0.5 }, rms_norm_eps: 1e-6, vocab_size: 64,
};

function attentionWeights(o: AttentionOptions, seed = 1): Weights {
  const w = new Weights(new SeededRandom(seed));
  const { hidden: D, heads: H, kvHeads: Hkv, headDim: d } = o;
  w.add('q_proj.weight', [H * d * (o.gated ? 2 : 1), D], 2 / Math.sqrt(D));
  w.add('k_proj.weight', [Hkv * d, D], 2 / Math.sqrt(D));
  w.add('v_proj.weight', [Hkv * d, D], 1 / Math.sqrt(D));
  w.add('o_proj.weight', [D, H * d], 1 / Math.sqrt(H * d));
  w.add('q_norm.weight', [d], 0.2);
  w.add('k_norm.weight', [d], 0.2);
  return w;
}

/** Independent float64 Qwen3-Next attention over one sequence's history (HF's formulas). */
class Reference {
  readonly keys: Float64Array[][] = [];
  readonly values: Float64Array[][] = [];
  constructor(readonly o: AttentionOptions, readonly w: Weights) {}

  rope(v: Float64Array, pos: number): Float64Array {
    const R = this.o.rotaryDim;
    const half = R / 2;
    const out = Float64Array.from(v);
    for (let i = 0; i < half; i++) {
      const freq = 1 / this.o.ropeTheta ** ((2 * i) / R);
      const c = Math.cos(pos * freq);
      const s = Math.sin(pos * freq);
      out[i] = v[i]! * c - v[i + half]! * s;
      out[i + half] = v[i + half]! * c + v[i]! * s;
    }
    return out;
  }

  /** Output of `rows` appended at the end of the history; `commit` keeps them in it. */
  run(rows: Float32Array[], commit: boolean): Float64Array[] {
    const { hidden: D, heads: H, kvHeads: Hkv, headDim: d } = this.o;
    const v = (n: string) => this.w.values.get(n)!;
    const keys = this.keys.map((k) => k.slice());
    const values = this.values.map((x) => x.slice());
    const outs = rows.map((x) => {
      const pos = keys.length;
      const q = matvec(v('q_proj.weight'), x, 2 * H * d, D);
      const k = matvec(v('k_proj.weight'), x, Hkv * d, D);
      const val = matvec(v('v_proj.weight'), x, Hkv * d, D);
      keys.push(Array.from({ length: Hkv }, (_, h) => this.rope(rmsNorm(k.subarray(h * d, (h + 1) * d), v('k_norm.weight'), this.o.eps, 1), pos)));
      values.push(Array.from({ length: Hkv }, (_, h) => val.slice(h * d, (h + 1) * d)));
      const attn = new Float64Array(H * d);
      for (let h = 0; h < H; h++) {
        const qh = this.rope(rmsNorm(q.subarray(h * 2 * d, h * 2 * d + d), v('q_norm.weight'), this.o.eps, 1), pos);
        const kv = Math.floor(h / (H / Hkv));
        const scores = keys.map((kk) => kk[kv]!.reduce((a, kv2, i) => a + kv2 * qh[i]!, 0) / Math.sqrt(d));
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let i = 0; i < d; i++) {
          const o = e.reduce((a, p, t) => a + p * values[t]![kv]![i]!, 0) / z;
          attn[h * d + i] = o * sigmoid(q[h * 2 * d + d + i]!);
        }
      }
      return matvec(v('o_proj.weight'), attn, D, H * d);
    });
    if (commit) {
      this.keys.splice(0, this.keys.length, ...keys);
      this.values.splice(0, this.values.length, ...values);
    }
    return outs;
  }
}

type Op = { op: 'prefill'; lengths: number[] } | { op: 'decode' } | { op: 'verify'; k: number; accepted: number[] };
const SCRIPT: Op[] = [
  { op: 'prefill', lengths: [9, 3] }, { op: 'decode' }, { op: 'decode' }, { op: 'verify', k: 3, accepted: [2, 0] },
  { op: 'decode' }, { op: 'verify', k: 4, accepted: [4, 1] }, { op: 'decode' }, { op: 'prefill', lengths: [5, 6] }, { op: 'decode' },
];

function runScript(graphs: boolean, pageSize: number): number {
  const o = { ...qwen3NextAttentionOptions(CONFIG), pageSize };
  const w = attentionWeights(o);
  const limits: LayerLimits = { maxSeqs: 2, maxSeqLen: 48, maxBatch: 2, maxK: 4, maxRows: 16 };
  const gpu = new CpuBackend();
  const layer = new AttentionLayer(gpu, w.source(), limits, o);
  const driver = new StepDriver({ gpu, layers: [layer], limits, graphs });
  const refs = [new Reference(o, w), new Reference(o, w)];
  const rnd = new SeededRandom(8);
  const D = o.hidden;
  let worst = 0;
  try {
    const seqs = [driver.open(), driver.open()];
    for (const step of SCRIPT) {
      const per = step.op === 'prefill' ? step.lengths : step.op === 'decode' ? [1, 1] : [step.k, step.k];
      const input = rnd.normals(per.reduce((a, b) => a + b, 0) * D);
      const rowsOf = (s: number, start: number) => Array.from({ length: per[s]! }, (_, j) => input.subarray((start + j) * D, (start + j + 1) * D));
      let out: Float32Array;
      if (step.op === 'prefill') {
        out = new Float32Array(input.length);
        driver.prefill({ seqs, lengths: per, input }, (r, first) => out.set(driver.readOutputF32(r), first * D));
      } else if (step.op === 'decode') out = driver.readOutputF32(driver.decode({ seqs, input })).slice();
      else {
        out = driver.readOutputF32(driver.verify({ seqs, k: step.k, input })).slice();
        driver.accept(step.accepted);
      }
      let row = 0;
      for (let s = 0; s < 2; s++) {
        const rows = rowsOf(s, row);
        const want = refs[s]!.run(rows, step.op !== 'verify');
        if (step.op === 'verify') refs[s]!.run(rows.slice(0, step.accepted[s]!), true);
        const got = out.subarray(row * D, (row + rows.length) * D);
        const rel = relErr(got, Float64Array.from(want.flatMap((x) => [...x])));
        worst = Math.max(worst, rel);
        row += rows.length;
      }
    }
  } finally {
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  }
  return worst;
}

describe('AttentionLayer (Qwen3-Next gated attention) against a float64 reference', () => {
  it('prefill, decode and verify with partial acceptance, graphs replayed, pages of 4 rows', () => {
    expect(runScript(true, 4)).toBeLessThan(1e-5);
  });
  it('eager, pages of 16 rows', () => {
    expect(runScript(false, 16)).toBeLessThan(1e-5);
  });

  it('reads partial_rotary_factor and rope_theta from rope_parameters or the top level', () => {
    expect(qwen3NextAttentionOptions(CONFIG)).toMatchObject({ rotaryDim: 4, ropeTheta: 10000, gated: true, normOffset: 1 });
    const legacy = { ...CONFIG, rope_parameters: undefined, rope_theta: 5e6, partial_rotary_factor: 0.25 };
    expect(qwen3NextAttentionOptions(legacy)).toMatchObject({ rotaryDim: 2, ropeTheta: 5e6 });
    // Qwen3-Next's default when nothing says: a quarter of the head.
    expect(qwen3NextAttentionOptions({ ...CONFIG, rope_parameters: { rope_type: 'default', rope_theta: 1e4 } })).toMatchObject({ rotaryDim: 2 });
    expect(() => qwen3NextAttentionOptions({ ...CONFIG, rope_parameters: { rope_type: 'yarn', rope_theta: 1e4 } })).toThrow(/'default' RoPE only/);
  });

  it('refuses a step when the page pool is exhausted, before writing anything', () => {
    const o = { ...qwen3NextAttentionOptions(CONFIG), pageSize: 4, pages: 3 };
    const limits: LayerLimits = { maxSeqs: 2, maxSeqLen: 48, maxBatch: 2, maxK: 4, maxRows: 16 };
    const gpu = new CpuBackend();
    const layer = new AttentionLayer(gpu, attentionWeights(o).source(), limits, o);
    const driver = new StepDriver({ gpu, layers: [layer], limits });
    const seq = driver.open();
    driver.prefill({ seqs: [seq], lengths: [12], input: new SeededRandom(1).normals(12 * o.hidden) });
    expect(() => driver.decode({ seqs: [seq], input: new Float32Array(o.hidden) })).toThrow(InvalidArgumentError);
    expect(() => driver.decode({ seqs: [seq], input: new Float32Array(o.hidden) })).toThrow(/needs 1 more page/);
    driver.dispose();
    layer.dispose();
    gpu.dispose();
  });

  it('passes the conformance kit on the CPU backend (room check included)', () => {
    const o = qwen3NextAttentionOptions(CONFIG);
    const report = runLayerConformance(plugin, {
      backend: () => new CpuBackend(), layerType: 'attention', config: { ...CONFIG, metrale_std: { page_size: 4 } },
      weights: attentionWeights(o).source(), k: 3,
    });
    const status = Object.fromEntries(report.checks.map((c) => [c.check, c.status]));
    expect(report.passed).toBe(true);
    expect(status['room-check-before-write']).toBe('pass');
    expect(status['rejected-rows-leave-no-trace']).toBe('pass');
    expect(status['verify-accept-equals-decode']).toBe('pass');
  });
});
