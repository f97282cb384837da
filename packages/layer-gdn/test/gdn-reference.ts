// An independent float64 reference of the whole Gated DeltaNet layer, written from
// docs/layers/gdn.md (not from src/): projections in HF's grouped layout, causal conv + SiLU,
// gates, L2 norm, the delta-rule recurrence (or, for prefill, the chunked WY form), gated
// RMSNorm and out_proj. One row at a time unless `chunked` is asked for.

export interface RefShape {
  readonly hidden: number;
  readonly hk: number;
  readonly hv: number;
  readonly dk: number;
  readonly dv: number;
  readonly K: number;
  readonly eps: number;
}

/** Weights in the fused (Qwen3-Next) layout, row-major as in the checkpoint. */
export interface RefWeights {
  readonly qkvz: Float64Array; // [2·hk·dk + 2·hv·dv][D]
  readonly ba: Float64Array; // [2·hv][D]
  readonly conv: Float64Array; // [conv_dim][K]
  readonly dtBias: Float64Array;
  readonly aLog: Float64Array;
  readonly norm: Float64Array;
  readonly out: Float64Array; // [D][hv·dv]
}

/** A sequence in the reference: every pre-conv row so far and the state per value head. */
export interface RefSeq {
  hist: Float64Array[];
  S: Float64Array[]; // hv × [dk][dv]
}

interface RowParts {
  readonly pre: Float64Array; // conv_dim: q (all key heads), k, v (all value heads)
  readonly z: Float64Array; // hv·dv
  readonly b: Float64Array; // hv
  readonly a: Float64Array; // hv
}

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
const silu = (x: number) => x * sigmoid(x);
const softplus = (x: number) => (x > 20 ? x : Math.log(1 + Math.exp(x)));

export class GdnReference {
  readonly r: number;
  readonly convDim: number;
  constructor(readonly s: RefShape, readonly w: RefWeights) {
    this.r = s.hv / s.hk;
    this.convDim = 2 * s.hk * s.dk + s.hv * s.dv;
  }

  open(): RefSeq {
    const { hv, dk, dv } = this.s;
    return { hist: [], S: Array.from({ length: hv }, () => new Float64Array(dk * dv)) };
  }

  clone(seq: RefSeq): RefSeq {
    return { hist: [...seq.hist], S: seq.S.map((x) => x.slice()) };
  }

  /** Step 1: projections, split per key head into q, k, v, z and b, a (docs/layers/gdn.md). */
  #project(x: Float64Array | Float32Array): RowParts {
    const { hidden: D, hk, hv, dk, dv } = this.s;
    const r = this.r;
    const dot = (W: Float64Array, row: number) => {
      let acc = 0;
      for (let i = 0; i < D; i++) acc += W[row * D + i]! * x[i]!;
      return acc;
    };
    const qkvz = Float64Array.from({ length: 2 * hk * dk + 2 * hv * dv }, (_, i) => dot(this.w.qkvz, i));
    const ba = Float64Array.from({ length: 2 * hv }, (_, i) => dot(this.w.ba, i));
    const pre = new Float64Array(this.convDim);
    const z = new Float64Array(hv * dv);
    const b = new Float64Array(hv);
    const a = new Float64Array(hv);
    const group = 2 * dk + 2 * r * dv;
    for (let g = 0; g < hk; g++) {
      const base = g * group;
      for (let i = 0; i < dk; i++) {
        pre[g * dk + i] = qkvz[base + i]!;
        pre[hk * dk + g * dk + i] = qkvz[base + dk + i]!;
      }
      for (let e = 0; e < r * dv; e++) {
        pre[2 * hk * dk + g * r * dv + e] = qkvz[base + 2 * dk + e]!;
        z[g * r * dv + e] = qkvz[base + 2 * dk + r * dv + e]!;
      }
      for (let e = 0; e < r; e++) {
        b[g * r + e] = ba[g * 2 * r + e]!;
        a[g * r + e] = ba[g * 2 * r + r + e]!;
      }
    }
    return { pre, z, b, a };
  }

  /** Steps 2–4 for the row just appended to `hist`: conv + SiLU, gates, normalised q and k. */
  #mix(hist: Float64Array[], parts: RowParts) {
    const { hk, hv, dk, dv, K } = this.s;
    const p = hist.length - 1;
    const mixed = new Float64Array(this.convDim);
    for (let c = 0; c < this.convDim; c++) {
      let acc = 0;
      for (let t = 0; t < K; t++) {
        const q = p - K + 1 + t;
        if (q >= 0) acc += this.w.conv[c * K + t]! * hist[q]![c]!;
      }
      mixed[c] = silu(acc);
    }
    const l2 = (v: Float64Array) => {
      let ss = 0;
      for (const e of v) ss += e * e;
      return v.map((e) => e / Math.sqrt(ss + 1e-6));
    };
    const q: Float64Array[] = [];
    const k: Float64Array[] = [];
    for (let g = 0; g < hk; g++) {
      q.push(l2(mixed.slice(g * dk, (g + 1) * dk)).map((e) => e / Math.sqrt(dk)));
      k.push(l2(mixed.slice(hk * dk + g * dk, hk * dk + (g + 1) * dk)));
    }
    const heads = [];
    for (let h = 0; h < hv; h++) {
      const g = Math.floor(h / this.r);
      const beta = sigmoid(parts.b[h]!);
      const gate = -Math.exp(this.w.aLog[h]!) * softplus(parts.a[h]! + this.w.dtBias[h]!);
      const v = mixed.slice(2 * hk * dk + h * dv, 2 * hk * dk + (h + 1) * dv);
      heads.push({ q: q[g]!, k: k[g]!, v, beta, gate, z: parts.z.slice(h * dv, (h + 1) * dv) });
    }
    return heads;
  }

  /** Step 6: gated RMSNorm per value head, then out_proj. */
  #finish(o: Float64Array[], z: Float64Array[]): Float64Array {
    const { hidden: D, hv, dv, eps } = this.s;
    const y = new Float64Array(hv * dv);
    for (let h = 0; h < hv; h++) {
      let ms = 0;
      for (const e of o[h]!) ms += e * e;
      const inv = 1 / Math.sqrt(ms / dv + eps);
      for (let j = 0; j < dv; j++) y[h * dv + j] = this.w.norm[j]! * o[h]![j]! * inv * silu(z[h]![j]!);
    }
    return Float64Array.from({ length: D }, (_, i) => {
      let acc = 0;
      for (let e = 0; e < hv * dv; e++) acc += this.w.out[i * hv * dv + e]! * y[e]!;
      return acc;
    });
  }

  /** Runs rows through `seq` one at a time (step 5 in its recurrent form), committing them. */
  run(seq: RefSeq, rows: readonly (Float64Array | Float32Array)[]): Float64Array[] {
    const { hv, dk, dv } = this.s;
    return rows.map((x) => {
      const parts = this.#project(x);
      seq.hist.push(parts.pre);
      const heads = this.#mix(seq.hist, parts);
      const o: Float64Array[] = [];
      for (let h = 0; h < hv; h++) {
        const { q, k, v, beta, gate } = heads[h]!;
        const S = seq.S[h]!;
        const alpha = Math.exp(gate);
        for (let e = 0; e < dk * dv; e++) S[e]! *= alpha;
        const u = new Float64Array(dv);
        for (let j = 0; j < dv; j++) {
          let kv = 0;
          for (let i = 0; i < dk; i++) kv += S[i * dv + j]! * k[i]!;
          u[j] = beta * (v[j]! - kv);
        }
        for (let i = 0; i < dk; i++) for (let j = 0; j < dv; j++) S[i * dv + j]! += k[i]! * u[j]!;
        const oh = new Float64Array(dv);
        for (let j = 0; j < dv; j++) for (let i = 0; i < dk; i++) oh[j]! += S[i * dv + j]! * q[i]!;
        o.push(oh);
      }
      return this.#finish(o, heads.map((hd) => hd.z));
    });
  }

  /** Outputs of `rows` from `seq` without changing it (a verify). */
  peek(seq: RefSeq, rows: readonly (Float64Array | Float32Array)[]): Float64Array[] {
    return this.run(this.clone(seq), rows);
  }

  /** Prefill in the chunked WY form of docs/layers/gdn.md (chunks of C rows), committing the rows. */
  runChunked(seq: RefSeq, rows: readonly (Float64Array | Float32Array)[], C = 64): Float64Array[] {
    const { hv, dk, dv } = this.s;
    const perRow = rows.map((x) => {
      const parts = this.#project(x);
      seq.hist.push(parts.pre);
      return this.#mix(seq.hist, parts);
    });
    const o: Float64Array[][] = rows.map(() => []);
    for (let h = 0; h < hv; h++) {
      for (let c0 = 0; c0 < rows.length; c0 += C) {
        const n = Math.min(C, rows.length - c0);
        const hd = perRow.slice(c0, c0 + n).map((r) => r[h]!);
        const S = seq.S[h]!;
        const gam = new Float64Array(n);
        hd.forEach((x, t) => (gam[t] = (t ? gam[t - 1]! : 0) + x.gate));
        const dotk = (a: Float64Array, b: Float64Array) => a.reduce((acc, e, i) => acc + e * b[i]!, 0);
        // T = (I + A)^−1 by forward substitution; U = T diag(β) V, W = T diag(β e^γ) K.
        const U = hd.map((x) => x.v.map((e) => e * x.beta));
        const W = hd.map((x, t) => x.k.map((e) => e * x.beta * Math.exp(gam[t]!)));
        for (let rr = 0; rr < n; rr++) {
          for (let ss = 0; ss < rr; ss++) {
            const A = hd[rr]!.beta * dotk(hd[rr]!.k, hd[ss]!.k) * Math.exp(gam[rr]! - gam[ss]!);
            for (let j = 0; j < dv; j++) U[rr]![j]! -= A * U[ss]![j]!;
            for (let i = 0; i < dk; i++) W[rr]![i]! -= A * W[ss]![i]!;
          }
        }
        // V_new = U − W S; O = (Q ⊙ e^γ) S + (Q Kᵀ ⊙ Γ ⊙ causal) V_new.
        const Vn = U.map((u, t) => u.map((e, j) => e - W[t]!.reduce((acc, wi, i) => acc + wi * S[i * dv + j]!, 0)));
        for (let t = 0; t < n; t++) {
          const out = new Float64Array(dv);
          for (let j = 0; j < dv; j++) {
            let acc = 0;
            for (let i = 0; i < dk; i++) acc += hd[t]!.q[i]! * Math.exp(gam[t]!) * S[i * dv + j]!;
            for (let s2 = 0; s2 <= t; s2++) acc += dotk(hd[t]!.q, hd[s2]!.k) * Math.exp(gam[t]! - gam[s2]!) * Vn[s2]![j]!;
            out[j] = acc;
          }
          o[c0 + t]![h] = out;
        }
        // S' = e^{γ_C} S + (K ⊙ e^{γ_C − γ})ᵀ V_new.
        const gC = gam[n - 1]!;
        for (let i = 0; i < dk; i++) {
          for (let j = 0; j < dv; j++) {
            let acc = Math.exp(gC) * S[i * dv + j]!;
            for (let t = 0; t < n; t++) acc += hd[t]!.k[i]! * Math.exp(gC - gam[t]!) * Vn[t]![j]!;
            S[i * dv + j] = acc;
          }
        }
      }
    }
    return rows.map((_, t) => this.#finish(o[t]!, perRow[t]!.map((x) => x.z)));
  }
}
