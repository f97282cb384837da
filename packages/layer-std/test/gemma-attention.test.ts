// Gemma 3n's attention features on the std attention layer, against a float64 reference: a
// sliding window, v_norm without weight, scale 1, q/k norms with plain w, full rotary, and a second
// layer that reads the first one's KV cache (KV sharing), through prefill, decode and verify with
// graphs replayed.
import { CpuBackend } from '@metrale/cpu-backend';
import { SeededRandom, StepDriver, WeightsError, type LayerLimits, relativeL2Error } from '@metrale/core';
import { AttentionLayer, checkAttention, type AttentionOptions } from '@metrale/layer-std';
import { describe, expect, it } from 'vitest';
import { matvec, rmsNorm, Weights } from './setup.js';

const D = 24;
const BASE: AttentionOptions = {
  hidden: D, heads: 4, kvHeads: 2, headDim: 8, gated: false, qkNorm: true, normOffset: 0, eps: 1e-6, rotaryDim: 8, ropeTheta: 1e4, scale: 1, vNorm: true,
};

function weights(o: AttentionOptions, seed: number, shared: boolean): Weights {
  const w = new Weights(new SeededRandom(seed));
  const { heads: H, kvHeads: Hkv, headDim: d } = o;
  w.add('q_proj.weight', [H * d, D], 1 / Math.sqrt(D));
  if (!shared) {
    w.add('k_proj.weight', [Hkv * d, D], 1 / Math.sqrt(D));
    w.add('v_proj.weight', [Hkv * d, D], 1 / Math.sqrt(D));
    w.add('k_norm.weight', [d], 0.2, 1);
  }
  w.add('o_proj.weight', [D, H * d], 1 / Math.sqrt(H * d));
  w.add('q_norm.weight', [d], 0.2, 1);
  return w;
}

function rope(v: Float64Array, pos: number, theta: number): Float64Array {
  const half = v.length / 2;
  const out = Float64Array.from(v);
  for (let i = 0; i < half; i++) {
    const f = pos / theta ** ((2 * i) / v.length);
    out[i] = v[i]! * Math.cos(f) - v[i + half]! * Math.sin(f);
    out[i + half] = v[i + half]! * Math.cos(f) + v[i]! * Math.sin(f);
  }
  return out;
}

/** One sequence through [owner, sharer]: the owner's K/V history, and both layers' outputs per row (HF's Gemma3nTextAttention). */
class Reference {
  keys: Float64Array[][] = [];
  values: Float64Array[][] = [];
  constructor(readonly o: AttentionOptions, readonly window: number, readonly wa: Weights, readonly wb: Weights) {}

  #attend(w: Weights, x: ArrayLike<number>, pos: number, keys: Float64Array[][], values: Float64Array[][], window: number): Float64Array {
    const { heads: H, kvHeads: Hkv, headDim: d, eps } = this.o;
    const v = (n: string) => w.values.get(n)!;
    const q = matvec(v('q_proj.weight'), x, H * d, D);
    const attn = new Float64Array(H * d);
    const lo = window > 0 ? Math.max(0, pos - window + 1) : 0;
    for (let h = 0; h < H; h++) {
      const qh = rope(rmsNorm(q.subarray(h * d, (h + 1) * d), v('q_norm.weight'), eps, 0), pos, this.o.ropeTheta);
      const kv = Math.floor(h / (H / Hkv));
      const ts = Array.from({ length: pos + 1 - lo }, (_, j) => lo + j);
      const s = ts.map((t) => keys[t]![kv]!.reduce((a, k, i) => a + k * qh[i]!, 0));
      const m = Math.max(...s);
      const e = s.map((x) => Math.exp(x - m));
      const z = e.reduce((a, b) => a + b, 0);
      for (let i = 0; i < d; i++) attn[h * d + i] = ts.reduce((a, t, j) => a + e[j]! * values[t]![kv]![i]!, 0) / z;
    }
    return matvec(v('o_proj.weight'), attn, D, H * d);
  }

  /** Outputs of the two layers for `rows` at the end of the history; `commit` keeps their K/V. */
  run(rows: Float32Array[], commit: boolean): Float64Array[] {
    const { kvHeads: Hkv, headDim: d, eps } = this.o;
    const v = (n: string) => this.wa.values.get(n)!;
    const keys = this.keys.slice();
    const values = this.values.slice();
    const outs = rows.map((x) => {
      const pos = keys.length;
      const k = matvec(v('k_proj.weight'), x, Hkv * d, D);
      const val = matvec(v('v_proj.weight'), x, Hkv * d, D);
      keys.push(Array.from({ length: Hkv }, (_, h) => rope(rmsNorm(k.subarray(h * d, (h + 1) * d), v('k_norm.weight'), eps, 0), pos, this.o.ropeTheta)));
      values.push(Array.from({ length: Hkv }, (_, h) => rmsNorm(val.subarray(h * d, (h + 1) * d), new Float64Array(d), eps, 1)));
      const a = this.#attend(this.wa, x, pos, keys, values, this.window);
      return this.#attend(this.wb, a, pos, keys, values, this.window);
    });
    if (commit) [this.keys, this.values] = [keys, values];
    return outs;
  }
}

type Op = { op: 'prefill'; lengths: number[] } | { op: 'decode' } | { op: 'verify'; k: number; accepted: number[] };
const SCRIPT: Op[] = [
  { op: 'prefill', lengths: [9, 3] }, { op: 'decode' }, { op: 'verify', k: 3, accepted: [2, 0] }, { op: 'decode' },
  { op: 'verify', k: 4, accepted: [4, 1] }, { op: 'decode' }, { op: 'prefill', lengths: [5, 6] }, { op: 'decode' },
];

function runScript(window: number, graphs: boolean, pageSize: number, refWindow = window): number {
  const limits: LayerLimits = { maxSeqs: 2, maxSeqLen: 48, maxBatch: 2, maxK: 4, maxRows: 16 };
  const gpu = new CpuBackend();
  const oa = { ...BASE, window };
  const [wa, wb] = [weights(oa, 1, false), weights(oa, 2, true)];
  const owner = new AttentionLayer(gpu, wa.source(), limits, oa);
  const sharer = new AttentionLayer(gpu, wb.source(), limits, { ...oa, kvSource: owner });
  const driver = new StepDriver({ gpu, layers: [owner, sharer], limits, graphs, kvCache: { pageSize } });
  const refs = [new Reference(oa, refWindow, wa, wb), new Reference(oa, refWindow, wa, wb)];
  const rnd = new SeededRandom(8);
  let worst = 0;
  try {
    expect(sharer.kvPageBytes(pageSize)).toBe(0);
    const seqs = [driver.open(), driver.open()];
    for (const step of SCRIPT) {
      const per = step.op === 'prefill' ? step.lengths : step.op === 'decode' ? [1, 1] : [step.k, step.k];
      const input = rnd.normals(per.reduce((a, b) => a + b, 0) * D);
      let out: Float32Array;
      if (step.op === 'prefill') {
        out = new Float32Array(input.length);
        driver.prefill({ seqs, lengths: per, input }, (r, first) => out.set(driver.readOutputF32(r), first * D));
      } else if (step.op === 'decode') out = driver.readOutputF32(driver.decode({ seqs, input }));
      else {
        out = driver.readOutputF32(driver.verify({ seqs, k: step.k, input }));
        driver.accept(step.accepted);
      }
      let row = 0;
      for (let s = 0; s < 2; s++) {
        const rows = Array.from({ length: per[s]! }, (_, j) => input.subarray((row + j) * D, (row + j + 1) * D));
        const want = refs[s]!.run(rows, step.op !== 'verify');
        if (step.op === 'verify') refs[s]!.run(rows.slice(0, step.accepted[s]!), true);
        worst = Math.max(worst, relativeL2Error(out.subarray(row * D, (row + rows.length) * D), Float64Array.from(want.flatMap((x) => [...x]))));
        row += rows.length;
      }
    }
  } finally {
    driver.dispose();
    sharer.dispose();
    owner.dispose();
    gpu.dispose();
  }
  return worst;
}

describe('AttentionLayer with Gemma 3n features (sliding window, v_norm, scale 1, KV sharing) against a float64 reference', () => {
  it('a sliding window of 4 shorter than the sequences, graphs replayed, pages of 4', () => {
    expect(runScript(4, true, 4)).toBeLessThan(1e-5);
  });
  it('full attention, eager, pages of 16', () => {
    expect(runScript(0, false, 16)).toBeLessThan(1e-5);
  });
  it('the window matters: the windowed layer is far from a full-attention reference', () => {
    expect(runScript(4, false, 4, 0)).toBeGreaterThan(1e-2);
  });
  it('checks a KV-sharing layer against its source and the window and scale fields', () => {
    const src = { options: { ...BASE, kvHeads: 1 }, kvCache: () => undefined };
    expect(() => checkAttention({ ...BASE, kvSource: src })).toThrow(WeightsError);
    expect(() => checkAttention({ ...BASE, window: -1 })).toThrow(/sliding_window/);
    expect(() => checkAttention({ ...BASE, scale: 0 })).toThrow(/scale/);
  });
});
