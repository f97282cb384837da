// The attention layer's float64 reference (Qwen3NextAttention's formulas over one sequence's
// history) and a script of prefill, decode and verify steps run through the step driver against it.
import { CpuBackend } from '@metrale/cpu-backend';
import { SeededRandom, StepDriver, type LayerLimits, type Precision, relativeL2Error } from '@metrale/core';
import { AttentionLayer, qwen3NextAttentionOptions, type AttentionOptions } from '@metrale/layer-std';
import { decodeRows, encodeRows, matvec, rmsNorm, sigmoid, Weights } from './setup.js';

export const CONFIG = {
  model_type: 'qwen3_next', hidden_size: 24, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8,
  rope_parameters: { rope_type: 'default', rope_theta: 10000, partial_rotary_factor: 0.5 }, rms_norm_eps: 1e-6, vocab_size: 64,
};

export function attentionWeights(o: AttentionOptions, seed = 1): Weights {
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
export class Reference {
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

export interface ScriptRun {
  readonly graphs: boolean;
  readonly pageSize: number;
  /** The layer's data path (default f32). */
  readonly precision?: Precision;
  /** Turns the weights into what that path reads (FP8). */
  readonly prepare?: (w: Weights) => Weights;
  /** Whose values the reference uses: the prepared weights (default) or the original ones. */
  readonly reference?: 'prepared' | 'original';
  /** Config fields over CONFIG. */
  readonly config?: Record<string, unknown>;
  /** Sequences of 600 and 290 rows (decode and verify rows then span several key chunks), limits to match. */
  readonly long?: boolean;
}

const LONG_SCRIPT: Op[] = [
  { op: 'prefill', lengths: [600, 290] }, { op: 'decode' }, { op: 'verify', k: 3, accepted: [2, 1] }, { op: 'decode' }, { op: 'verify', k: 4, accepted: [4, 0] },
];

/** The script through the layer, each step's output against the reference; returns the worst relative error. */
export function runScript(run: ScriptRun): number {
  const { graphs, pageSize, precision, prepare } = run;
  const o = { ...qwen3NextAttentionOptions({ ...CONFIG, ...run.config }), ...(precision ? { precision } : {}) };
  const original = attentionWeights(o);
  const w = prepare ? prepare(original) : original;
  const refWeights = run.reference === 'original' ? original : w;
  const rows = precision?.rows ?? 'f32';
  const limits: LayerLimits = run.long ? { maxSeqs: 2, maxSeqLen: 1024, maxBatch: 2, maxK: 4, maxRows: 128 } : { maxSeqs: 2, maxSeqLen: 48, maxBatch: 2, maxK: 4, maxRows: 16 };
  const gpu = new CpuBackend();
  const layer = new AttentionLayer(gpu, w.source(), limits, o);
  const driver = new StepDriver({ gpu, layers: [layer], limits, graphs, kvCache: { pageSize } });
  const refs = [new Reference(o, refWeights), new Reference(o, refWeights)];
  const rnd = new SeededRandom(8);
  const D = o.hidden;
  let worst = 0;
  try {
    const seqs = [driver.open(), driver.open()];
    for (const step of run.long ? LONG_SCRIPT : SCRIPT) {
      const per = step.op === 'prefill' ? step.lengths : step.op === 'decode' ? [1, 1] : [step.k, step.k];
      const input = rnd.normals(per.reduce((a, b) => a + b, 0) * D);
      const rowsOf = (s: number, start: number) => Array.from({ length: per[s]! }, (_, j) => input.subarray((start + j) * D, (start + j + 1) * D));
      const stored = encodeRows(input, rows);
      let out: Float32Array;
      if (step.op === 'prefill') {
        out = new Float32Array(input.length);
        driver.prefill({ seqs, lengths: per, input: stored }, (r, first) => out.set(decodeRows(driver.readOutput(r), rows), first * D));
      } else if (step.op === 'decode') out = decodeRows(driver.readOutput(driver.decode({ seqs, input: stored })), rows);
      else {
        out = decodeRows(driver.readOutput(driver.verify({ seqs, k: step.k, input: stored })), rows);
        driver.accept(step.accepted);
      }
      let row = 0;
      for (let s = 0; s < 2; s++) {
        const rows = rowsOf(s, row);
        const want = refs[s]!.run(rows, step.op !== 'verify');
        if (step.op === 'verify') refs[s]!.run(rows.slice(0, step.accepted[s]!), true);
        const got = out.subarray(row * D, (row + rows.length) * D);
        const rel = relativeL2Error(got, Float64Array.from(want.flatMap((x) => [...x])));
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
