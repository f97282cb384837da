// An independent float64 implementation of the Hugging Face attention (GlmMoeDsaAttention and
// Glm5NextTextAttention, DSA.md), written from the weights alone: dense MLA (keys and values
// expanded per head through kv_b_proj, no absorption) restricted by the indexer's selection as a
// mask, exact float64 RoPE angles, the indexer scored per token or per pool. It shares no code
// with the layer's kernels. Optionally the indexer keys are rounded as the layer's cache stores
// them (bf16, or fp8 with a per-row scale), so a test can use the layer's default cache.
import { f32ToBf16Bits, bf16BitsToF32 } from '@metrale/core';
import { e4m3ToF32, f32ToE4m3 } from '@metrale/layer-dsa';

export interface RefShape {
  readonly variant: 'glm_moe_dsa' | 'glm5_next';
  readonly hidden: number;
  readonly heads: number;
  readonly qLora: number;
  readonly kvLora: number;
  readonly nope: number;
  readonly rope: number;
  readonly v: number;
  readonly idxHeads: number;
  readonly dI: number;
  readonly topk: number;
  readonly kpool: number;
}

export interface RefOptions {
  readonly theta?: number;
  readonly interleave?: boolean;
  readonly indexerInterleave?: boolean;
  readonly mlaEps?: number;
  /** How the indexer cache stores keys (the layer rounds them; HF does not). */
  readonly keyStorage?: 'f32' | 'bf16' | 'fp8';
}

/** Weights by HF name (layer prefix removed), float64. */
export type RefWeights = ReadonlyMap<string, Float64Array>;

export interface RefResult {
  /** Output row of every history position. */
  readonly out: Float64Array[];
  /** Selected token positions of every position (ascending). */
  readonly selections: number[][];
  /** Smallest (k-th − (k+1)-th score) / max |score| over rows that had to choose; Infinity when none did. */
  readonly minRelGap: number;
  /** Rows whose selection left out at least one visible token. */
  readonly sparseRows: number;
}

const matvec = (w: Float64Array, rows: number, cols: number, x: ArrayLike<number>, rowOff = 0): Float64Array => {
  const out = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = 0;
    const o = (rowOff + r) * cols;
    for (let c = 0; c < cols; c++) s += w[o + c]! * x[c]!;
    out[r] = s;
  }
  return out;
};

const rmsNorm = (x: Float64Array, w: Float64Array, eps: number): Float64Array => {
  let ss = 0;
  for (const v of x) ss += v * v;
  const inv = 1 / Math.sqrt(ss / x.length + eps);
  return x.map((v, i) => v * inv * w[i]!);
};

const layerNorm = (x: Float64Array, w: Float64Array, b: Float64Array, eps: number): Float64Array => {
  const mean = x.reduce((a, v) => a + v, 0) / x.length;
  const variance = x.reduce((a, v) => a + (v - mean) ** 2, 0) / x.length;
  return x.map((v, i) => ((v - mean) / Math.sqrt(variance + eps)) * w[i]! + b[i]!);
};

/** RoPE at an exact float64 angle; output laid out (rotated first halves | rotated second halves). */
function rope(x: Float64Array, dims: number, pos: number, theta: number, interleave: boolean): Float64Array {
  const out = x.slice();
  const half = dims / 2;
  for (let i = 0; i < half; i++) {
    const angle = pos * theta ** (-(2 * i) / dims);
    const a = interleave ? x[2 * i]! : x[i]!;
    const b = interleave ? x[2 * i + 1]! : x[half + i]!;
    out[i] = a * Math.cos(angle) - b * Math.sin(angle);
    out[half + i] = b * Math.cos(angle) + a * Math.sin(angle);
  }
  return out;
}

function roundKey(k: Float64Array, storage: 'f32' | 'bf16' | 'fp8'): Float64Array {
  if (storage === 'f32') return k.map((v) => Math.fround(v));
  if (storage === 'bf16') return k.map((v) => bf16BitsToF32(f32ToBf16Bits(v)));
  let amax = 0;
  for (const v of k) amax = Math.max(amax, Math.abs(Math.fround(v)));
  const scale = amax > 0 ? Math.fround(amax / 448) : 1;
  return k.map((v) => e4m3ToF32(f32ToE4m3(Math.fround(Math.fround(v) / scale))) * scale);
}

/** Highest score first, ties to the lower index; the kept indices ascending. */
function topIndices(scores: readonly number[], keep: number): { chosen: number[]; relGap: number } {
  const order = scores.map((_, i) => i).sort((a, b) => scores[b]! - scores[a]! || a - b);
  if (keep >= scores.length) return { chosen: order.sort((a, b) => a - b), relGap: Infinity };
  const scale = Math.max(...scores.map(Math.abs));
  const gap = scores[order[keep - 1]!]! - scores[order[keep]!]!;
  return { chosen: order.slice(0, keep).sort((a, b) => a - b), relGap: scale > 0 ? gap / scale : 0 };
}

export class DsaReference {
  readonly theta: number;
  readonly interleave: boolean;
  readonly indexerInterleave: boolean;
  readonly mlaEps: number;
  readonly keyStorage: 'f32' | 'bf16' | 'fp8';

  constructor(readonly shape: RefShape, readonly w: RefWeights, options: RefOptions = {}) {
    this.theta = options.theta ?? 10000;
    this.interleave = options.interleave ?? true;
    this.indexerInterleave = options.indexerInterleave ?? this.interleave;
    this.mlaEps = options.mlaEps ?? 1e-6;
    this.keyStorage = options.keyStorage ?? 'f32';
  }

  #get(name: string): Float64Array {
    const t = this.w.get(name);
    if (!t) throw new Error(`reference: no weight '${name}'`);
    return t;
  }

  /** The indexer's selection for every position of a history (full layers). */
  select(history: readonly Float64Array[]): { selections: number[][]; minRelGap: number } {
    const s = this.shape;
    const { hidden: D, qLora, dI, idxHeads: HI, rope: R } = s;
    const qResid = history.map((x) => rmsNorm(matvec(this.#get('q_a_proj.weight'), qLora, D, x), this.#get('q_a_layernorm.weight'), this.mlaEps));
    const keys = history.map((x, t) => {
      let k = layerNorm(matvec(this.#get('indexer.wk.weight'), dI, D, x), this.#get('indexer.k_norm.weight'), this.#get('indexer.k_norm.bias'), 1e-6);
      if (R > 0) k = Float64Array.from([...rope(k.subarray(0, R), R, t, this.theta, this.indexerInterleave), ...k.subarray(R)]);
      return k;
    });
    const gates = s.variant === 'glm5_next' ? history.map((x) => matvec(this.#get('indexer.index_kpool_compress_gate'), dI, D, x)) : [];
    // Candidates: token keys, or complete pools (softmax over members per channel of gate + ape).
    let candidates: Float64Array[] = keys;
    if (s.variant === 'glm5_next') {
      const ape = this.#get('indexer.index_kpool_compress_ape');
      candidates = [];
      for (let j = 0; (j + 1) * s.kpool <= history.length; j++) {
        const key = new Float64Array(dI);
        for (let c = 0; c < dI; c++) {
          const logits = Array.from({ length: s.kpool }, (_, i) => gates[j * s.kpool + i]![c]! + ape[i * dI + c]!);
          const max = Math.max(...logits);
          const e = logits.map((l) => Math.exp(l - max));
          const z = e.reduce((a, b) => a + b, 0);
          for (let i = 0; i < s.kpool; i++) key[c]! += (e[i]! / z) * keys[j * s.kpool + i]![c]!;
        }
        candidates.push(key);
      }
    }
    const stored = candidates.map((k) => roundKey(k, this.keyStorage));
    let minRelGap = Infinity;
    const selections = history.map((x, t) => {
      let q = matvec(this.#get('indexer.wq_b.weight'), HI * dI, qLora, qResid[t]!);
      if (R > 0) {
        const heads: number[] = [];
        for (let g = 0; g < HI; g++) {
          const head = q.subarray(g * dI, (g + 1) * dI);
          heads.push(...rope(head.subarray(0, R), R, t, this.theta, this.indexerInterleave), ...head.subarray(R));
        }
        q = Float64Array.from(heads);
      }
      const wts = matvec(this.#get('indexer.weights_proj.weight'), HI, D, x).map((v) => v * HI ** -0.5);
      const count = Math.floor((t + 1) / s.kpool);
      const scores: number[] = [];
      for (let j = 0; j < count; j++) {
        let score = 0;
        for (let g = 0; g < HI; g++) {
          let dot = 0;
          for (let i = 0; i < dI; i++) dot += q[g * dI + i]! * stored[j]![i]!;
          score += wts[g]! * Math.max(0, dot / Math.sqrt(dI));
        }
        scores.push(score);
      }
      const { chosen, relGap } = topIndices(scores, Math.floor(s.topk / s.kpool));
      minRelGap = Math.min(minRelGap, relGap);
      const tokens: number[] = [];
      for (const j of chosen) for (let i = 0; i < s.kpool; i++) tokens.push(j * s.kpool + i);
      for (let u = count * s.kpool; u <= t; u++) tokens.push(u);
      return tokens;
    });
    return { selections, minRelGap };
  }

  /** Outputs of every position of a history, attending to `selections` (default: this layer's own indexer). */
  run(history: readonly Float64Array[], selections?: readonly number[][]): RefResult {
    const s = this.shape;
    const { hidden: D, heads: H, qLora, kvLora, nope, rope: R, v: V } = s;
    const own = selections ? { selections: selections.map((x) => [...x]), minRelGap: Infinity } : this.select(history);
    const kvb = this.#get('kv_b_proj.weight');
    const scale = (nope + R) ** -0.5;
    const qs: Float64Array[][] = [];
    const ks: Float64Array[][] = [];
    const vs: Float64Array[][] = [];
    history.forEach((x, t) => {
      const qResid = rmsNorm(matvec(this.#get('q_a_proj.weight'), qLora, D, x), this.#get('q_a_layernorm.weight'), this.mlaEps);
      const q = matvec(this.#get('q_b_proj.weight'), H * (nope + R), qLora, qResid);
      const kva = matvec(this.#get('kv_a_proj_with_mqa.weight'), kvLora + R, D, x);
      const c = rmsNorm(kva.subarray(0, kvLora), this.#get('kv_a_layernorm.weight'), this.mlaEps);
      const kr = R > 0 ? rope(kva.subarray(kvLora), R, t, this.theta, this.interleave) : new Float64Array(0);
      const qh: Float64Array[] = [];
      const kh: Float64Array[] = [];
      const vh: Float64Array[] = [];
      for (let h = 0; h < H; h++) {
        const qn = q.subarray(h * (nope + R), h * (nope + R) + nope);
        const qr = R > 0 ? rope(q.subarray(h * (nope + R) + nope, (h + 1) * (nope + R)), R, t, this.theta, this.interleave) : new Float64Array(0);
        qh.push(Float64Array.from([...qn, ...qr]));
        const kn = matvec(kvb, nope, kvLora, c, h * (nope + V));
        kh.push(Float64Array.from([...kn, ...kr]));
        vh.push(matvec(kvb, V, kvLora, c, h * (nope + V) + nope));
      }
      qs.push(qh);
      ks.push(kh);
      vs.push(vh);
    });
    let sparseRows = 0;
    const out = history.map((_, t) => {
      const sel = own.selections[t]!;
      if (sel.length < t + 1) sparseRows++;
      const o = new Float64Array(H * V);
      for (let h = 0; h < H; h++) {
        const logits = sel.map((u) => qs[t]![h]!.reduce((a, qv, i) => a + qv * ks[u]![h]![i]!, 0) * scale);
        const max = Math.max(...logits);
        const e = logits.map((l) => Math.exp(l - max));
        const z = e.reduce((a, b) => a + b, 0);
        sel.forEach((u, j) => {
          for (let i = 0; i < V; i++) o[h * V + i]! += (e[j]! / z) * vs[u]![h]![i]!;
        });
      }
      return matvec(this.#get('o_proj.weight'), D, H * V, o);
    });
    return { out, selections: own.selections, minRelGap: own.minRelGap, sparseRows };
  }
}
