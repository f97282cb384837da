import { InvalidArgumentError, type DeviceMemoryView, type DevicePtr } from '@metrale/core';
import { projectionRow } from './gdn-config.js';
import { checkYDtype, outputRows, type OutputRows } from './gdn-rows.cpu.js';

// The per-row math of KERNELS.md, shared by the CPU implementations of the three GDN kernels
// (gdn.cpu.ts). Accumulates in f64; state, ring and stash stay f32 in device memory.

/** The shape parameters every GDN kernel takes. */
export interface GdnShapeArgs {
  readonly hk: number;
  readonly hv: number;
  readonly dk: number;
  readonly dv: number;
  readonly convK: number;
  readonly maxK: number;
}

/** The pointers a launch may use; 0n where the kernel has no such buffer or the mode needs none. */
export interface GdnBuffers {
  /** Rows of both input projections: in_proj_qkvz's columns, then in_proj_ba's (projectionRow). */
  readonly qkvz: DevicePtr;
  readonly y: DevicePtr;
  readonly state: DevicePtr;
  readonly convRing: DevicePtr;
  readonly convWeight: DevicePtr;
  readonly aLog: DevicePtr;
  readonly dtBias: DevicePtr;
  readonly normWeight: DevicePtr;
  readonly stash: DevicePtr;
  readonly convStash: DevicePtr;
}

/** The layer's buffers plus a step's tables: what the recurrent, chunk and prefill kernels take. */
export interface GdnStepPointers extends GdnBuffers {
  readonly slots: DevicePtr;
  readonly rowStarts: DevicePtr;
  readonly seqLens: DevicePtr;
  readonly pending: DevicePtr;
}

export const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));
export const silu = (x: number): number => x * sigmoid(x);
/** PyTorch's softplus (beta 1, threshold 20). */
export const softplus = (x: number): number => (x > 20 ? x : Math.log1p(Math.exp(x)));

/** Conv channel c → its column in a `qkvz` row (HF's grouped layout, KERNELS.md). */
export function channelColumns(s: GdnShapeArgs): Int32Array {
  const { hk, hv, dk, dv } = s;
  const r = hv / hk;
  const group = 2 * dk + 2 * r * dv;
  const keyDim = hk * dk;
  const cols = new Int32Array(2 * keyDim + hv * dv);
  for (let c = 0; c < keyDim; c++) cols[c] = Math.floor(c / dk) * group + (c % dk);
  for (let c = 0; c < keyDim; c++) cols[keyDim + c] = Math.floor(c / dk) * group + dk + (c % dk);
  for (let c = 0; c < hv * dv; c++) {
    const h = Math.floor(c / dv);
    cols[2 * keyDim + c] = Math.floor(h / r) * group + 2 * dk + (h % r) * dv + (c % dv);
  }
  return cols;
}

/** One launch's view of the layer's buffers, with the operations the kernels are made of. */
export class GdnCpu {
  readonly hk: number;
  readonly hv: number;
  readonly dk: number;
  readonly dv: number;
  readonly K: number;
  readonly maxK: number;
  readonly r: number;
  readonly keyDim: number;
  readonly convDim: number;
  /** Width of a `qkvz` row, and the column of its `ba` part (projectionRow). */
  readonly width: number;
  readonly baCol: number;
  /** f32 words of one slot's stash, and of one row of it per value head. */
  readonly stashSeq: number;
  readonly stashRow: number;
  readonly cols: Int32Array;

  constructor(
    private readonly mem: DeviceMemoryView,
    shape: GdnShapeArgs,
    private readonly buf: GdnBuffers,
    private readonly eps: number,
    /** The element type y is stored in (FLOAT_DTYPE_CODE; the kernels' `yDtype`). */
    private readonly yDtype = 0,
  ) {
    checkYDtype('gdn kernels', yDtype);
    const { hk, hv, dk, dv, convK, maxK } = shape;
    if (![hk, hv, dk, dv, convK, maxK].every((v) => Number.isInteger(v) && v >= 1) || hv % hk !== 0) {
      throw new InvalidArgumentError(`gdn kernels: bad shape ${JSON.stringify(shape)}`);
    }
    this.hk = hk;
    this.hv = hv;
    this.dk = dk;
    this.dv = dv;
    this.K = convK;
    this.maxK = maxK;
    this.r = hv / hk;
    this.keyDim = hk * dk;
    this.convDim = 2 * hk * dk + hv * dv;
    ({ width: this.width, baCol: this.baCol } = projectionRow(shape));
    this.stashRow = dk + dv + 1;
    this.stashSeq = hv * maxK * this.stashRow;
    this.cols = channelColumns(shape);
  }

  /** One slot's recurrent state, [H_v][d_k][d_v]. */
  state(slot: number): Float32Array {
    const n = this.hv * this.dk * this.dv;
    return this.mem.f32(this.buf.state + BigInt(4 * slot * n), n);
  }

  /** One slot's conv ring, [K][conv_dim]. */
  ring(slot: number): Float32Array {
    const n = this.K * this.convDim;
    return this.mem.f32(this.buf.convRing + BigInt(4 * slot * n), n);
  }

  /** One slot's stash, [H_v][maxK][d_k + d_v + 1]. */
  stash(slot: number): Float32Array {
    if (this.buf.stash === 0n) throw new InvalidArgumentError('gdn kernels: this mode needs a stash, got a null pointer');
    return this.mem.f32(this.buf.stash + BigInt(4 * slot * this.stashSeq), this.stashSeq);
  }

  /**
   * One slot's conv stash, [2·maxK][conv_dim]: a ring by position, the pre-conv inputs of position
   * p at row p mod 2·maxK (pending rows L−n..L−1 and a verify's new rows L..L+k−1 never share a row).
   */
  convStash(slot: number): Float32Array {
    if (this.buf.convStash === 0n) throw new InvalidArgumentError('gdn kernels: carried mode needs a conv stash, got a null pointer');
    const n = this.convStashRows * this.convDim;
    return this.mem.f32(this.buf.convStash + BigInt(4 * slot * n), n);
  }

  /** Rows per slot of the conv stash ring: 2·maxK. */
  get convStashRows(): number {
    return 2 * this.maxK;
  }

  /** The conv stash row of position p. */
  convStashRow(p: number): number {
    return p % this.convStashRows;
  }

  /** `rows` rows of `qkvz` from `first`. */
  qkvzRows(first: number, rows: number): Float32Array {
    return this.mem.f32(this.buf.qkvz + BigInt(4 * first * this.width), rows * this.width);
  }

  /** The `ba` part of row `t` of `rows` (per key head [b r, a r]). */
  baOf(rows: Float32Array, t: number): Float32Array {
    const base = t * this.width + this.baCol;
    return rows.subarray(base, base + 2 * this.hv);
  }

  /** The pre-conv inputs (conv channel order) of row `t` of `rows`, into `out`. */
  preConv(rows: Float32Array, t: number, out: Float32Array): void {
    const base = t * this.width;
    for (let c = 0; c < this.convDim; c++) out[c] = rows[base + this.cols[c]!]!;
  }

  /**
   * Folds the first `n` recorded rows of a slot's stash into its state:
   * S ← e^{γ_{n−1}} S + Σ_{t<n} e^{γ_{n−1} − γ_t} k_t u_tᵀ.
   */
  foldStash(slot: number, n: number): void {
    if (n === 0) return;
    if (n > this.maxK) throw new InvalidArgumentError(`gdn kernels: ${n} rows to fold exceed the stash's ${this.maxK}`);
    const { dk, dv, hv, stashRow } = this;
    const S = this.state(slot);
    const st = this.stash(slot);
    const acc = new Float64Array(dk * dv);
    for (let h = 0; h < hv; h++) {
      const head = h * this.maxK * stashRow;
      const gLast = st[head + (n - 1) * stashRow + dk + dv]!;
      const s0 = h * dk * dv;
      const decay = Math.exp(gLast);
      for (let e = 0; e < dk * dv; e++) acc[e] = decay * S[s0 + e]!;
      for (let t = 0; t < n; t++) {
        const row = head + t * stashRow;
        const w = Math.exp(gLast - st[row + dk + dv]!);
        for (let i = 0; i < dk; i++) {
          const ki = w * st[row + i]!;
          for (let j = 0; j < dv; j++) acc[i * dv + j]! += ki * st[row + dk + j]!;
        }
      }
      for (let e = 0; e < dk * dv; e++) S[s0 + e] = acc[e]!;
    }
  }

  /** The L2-normalised q (scaled by 1/√d_k) and k of every key head, from a row's conv outputs (conv channel order). */
  normalizeQK(mixed: Float64Array, qn: Float64Array, kn: Float64Array): void {
    const { dk, keyDim } = this;
    for (let g = 0; g < this.hk; g++) {
      let sq = 0;
      let sk = 0;
      for (let i = 0; i < dk; i++) {
        sq += mixed[g * dk + i]! ** 2;
        sk += mixed[keyDim + g * dk + i]! ** 2;
      }
      const fq = 1 / Math.sqrt(sq + 1e-6) / Math.sqrt(dk);
      const fk = 1 / Math.sqrt(sk + 1e-6);
      for (let i = 0; i < dk; i++) {
        qn[g * dk + i] = mixed[g * dk + i]! * fq;
        kn[g * dk + i] = mixed[keyDim + g * dk + i]! * fk;
      }
    }
  }

  /**
   * The causal depthwise conv of position P over positions P−K+1..P, then SiLU, into `mixed` (conv
   * channel order): positions ≥ L from `pre` (the step's pre-conv rows from position L), older ones
   * from the slot's `ring`, negative ones zero.
   */
  convRow(convW: Float32Array, ring: Float32Array, pre: Float32Array, L: number, P: number, mixed: Float64Array): void {
    const { K, convDim } = this;
    for (let c = 0; c < convDim; c++) {
      let acc = 0;
      for (let tap = 0; tap < K; tap++) {
        const q = P - K + 1 + tap;
        if (q < 0) continue;
        const x = q >= L ? pre[(q - L) * convDim + c]! : ring[(q % K) * convDim + c]!;
        acc += convW[c * K + tap]! * x;
      }
      mixed[c] = silu(acc);
    }
  }

  /**
   * One row of one head on its state S [d_k][d_v] (float64, updated in place): S ← αS;
   * u = β(v − Sᵀk); S ← S + k uᵀ; o = Sᵀq (k and q normalised).
   */
  headStep(S: Float64Array, k: ArrayLike<number>, q: ArrayLike<number>, v: ArrayLike<number>, beta: number, alpha: number, u: Float64Array, o: Float64Array): void {
    const { dk, dv } = this;
    for (let e = 0; e < dk * dv; e++) S[e]! *= alpha;
    for (let j = 0; j < dv; j++) {
      let kv = 0;
      for (let i = 0; i < dk; i++) kv += S[i * dv + j]! * k[i]!;
      u[j] = beta * (v[j]! - kv);
    }
    o.fill(0);
    for (let i = 0; i < dk; i++) {
      const ki = k[i]!;
      const qi = q[i]!;
      for (let j = 0; j < dv; j++) {
        S[i * dv + j]! += ki * u[j]!;
        o[j]! += S[i * dv + j]! * qi;
      }
    }
  }

  /** β = sigmoid(b) and the gate g = −exp(A_log)·softplus(a + dt_bias) of value head h, from a row's `ba` (per key head [b r, a r]). */
  gates(baRow: Float32Array, h: number, aLog: Float32Array, dtBias: Float32Array): { beta: number; gate: number } {
    const { r } = this;
    const g = Math.floor(h / r);
    const hl = h % r;
    return { beta: sigmoid(baRow[g * 2 * r + hl]!), gate: -Math.exp(aLog[h]!) * softplus(baRow[g * 2 * r + r + hl]! + dtBias[h]!) };
  }

  /** Column of value head h's z in a `qkvz` row (HF's grouped layout). */
  zColumn(h: number): number {
    const { dk, dv, r } = this;
    return Math.floor(h / r) * (2 * dk + 2 * r * dv) + 2 * dk + r * dv + (h % r) * dv;
  }

  /** y's rows first.. first + count − 1, in the launch's row type: write `values`, then `store()`. */
  yRows(first: number, count: number): OutputRows {
    const n = this.hv * this.dv;
    return outputRows(this.mem, this.buf.y, first * n, count * n, this.yDtype);
  }

  /** The gated RMSNorm of a head's o: y = w ⊙ o / √(mean(o²) + eps) ⊙ SiLU(z), z = row[z0 ..]. */
  gatedNorm(o: Float64Array, row: Float32Array, z0: number, normW: Float32Array, y: Float32Array): void {
    const { dv } = this;
    let ms = 0;
    for (let j = 0; j < dv; j++) ms += o[j]! ** 2;
    const inv = 1 / Math.sqrt(ms / dv + this.eps);
    for (let j = 0; j < dv; j++) y[j] = normW[j]! * o[j]! * inv * silu(row[z0 + j]!);
  }

  /**
   * The ring takes a slot's n pending carried rows (positions L − n .. L − 1), their pre-conv
   * inputs from the conv stash (row p mod 2·maxK).
   */
  writePendingRing(slot: number, L: number, n: number): void {
    if (n === 0) return;
    const convStash = this.convStash(slot);
    const row = (t: number) => this.convStashRow(L - n + t) * this.convDim;
    this.writeRing(slot, L - n, (t, out) => out.set(convStash.subarray(row(t), row(t) + this.convDim)), n);
  }

  /** Writes pre-conv rows (conv channel order, `count` rows from `src`) into the ring at positions first.. */
  writeRing(slot: number, firstPosition: number, src: (t: number, out: Float32Array) => void, count: number): void {
    const ring = this.ring(slot);
    const row = new Float32Array(this.convDim);
    for (let t = 0; t < count; t++) {
      src(t, row);
      ring.set(row, ((firstPosition + t) % this.K) * this.convDim);
    }
  }

  /**
   * Runs `count` rows of one sequence, at positions L.. and `qkvz`/`y` rows first.., from the
   * slot's state. `commit`: state and ring take the rows; otherwise they are untouched and, with
   * `record`, each row's k, u and cumulative gate go to the slot's stash (and, with `recordConv`,
   * its pre-conv inputs to the conv stash, at the rows of positions L.. in its ring).
   */
  runRows(slot: number, L: number, first: number, count: number, mode: { commit: boolean; record: boolean; recordConv: boolean }): void {
    if (count === 0) return;
    const { hv, dk, dv, K, r, keyDim, convDim, stashRow } = this;
    if (mode.record && count > this.maxK) throw new InvalidArgumentError(`gdn kernels: ${count} rows to record exceed the stash's maxK ${this.maxK}`);
    const rows = this.qkvzRows(first, count);
    const out = this.yRows(first, count);
    const y = out.values;
    const convW = this.mem.f32(this.buf.convWeight, convDim * K);
    const aLog = this.mem.f32(this.buf.aLog, hv);
    const dtBias = this.mem.f32(this.buf.dtBias, hv);
    const normW = this.mem.f32(this.buf.normWeight, dv);
    const ring = this.ring(slot);
    const stateMem = this.state(slot);
    const S = Float64Array.from(stateMem);
    const st = mode.record ? this.stash(slot) : undefined;
    const gamma = new Float64Array(hv);
    const pre = new Float32Array(count * convDim);
    for (let t = 0; t < count; t++) this.preConv(rows, t, pre.subarray(t * convDim, (t + 1) * convDim));
    const mixed = new Float64Array(convDim);
    const qn = new Float64Array(keyDim);
    const kn = new Float64Array(keyDim);
    const u = new Float64Array(dv);
    const o = new Float64Array(dv);
    for (let t = 0; t < count; t++) {
      const P = L + t;
      this.convRow(convW, ring, pre, L, P, mixed);
      this.normalizeQK(mixed, qn, kn);
      for (let h = 0; h < hv; h++) {
        const g = Math.floor(h / r);
        const { beta, gate } = this.gates(this.baOf(rows, t), h, aLog, dtBias);
        const alpha = Math.exp(gate);
        gamma[h]! += gate;
        const head = S.subarray(h * dk * dv, (h + 1) * dk * dv);
        const v = mixed.subarray(2 * keyDim + h * dv, 2 * keyDim + (h + 1) * dv);
        this.headStep(head, kn.subarray(g * dk, (g + 1) * dk), qn.subarray(g * dk, (g + 1) * dk), v, beta, alpha, u, o);
        this.gatedNorm(o, rows, t * this.width + this.zColumn(h), normW, y.subarray(t * hv * dv + h * dv, t * hv * dv + (h + 1) * dv));
        if (st) {
          const row = (h * this.maxK + t) * stashRow;
          for (let i = 0; i < dk; i++) st[row + i] = kn[g * dk + i]!;
          for (let j = 0; j < dv; j++) st[row + dk + j] = u[j]!;
          st[row + dk + dv] = gamma[h]!;
        }
      }
    }
    out.store();
    if (mode.commit) {
      stateMem.set(S);
      for (let t = 0; t < count; t++) ring.set(pre.subarray(t * convDim, (t + 1) * convDim), ((L + t) % K) * convDim);
    }
    if (mode.recordConv) {
      const cs = this.convStash(slot);
      for (let t = 0; t < count; t++) cs.set(pre.subarray(t * convDim, (t + 1) * convDim), this.convStashRow(L + t) * convDim);
    }
  }
}
