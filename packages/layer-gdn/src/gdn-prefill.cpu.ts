import { InvalidArgumentError, bf16BitsToF32, f32ToBf16Bits, type CpuKernelContext, type DevicePtr, type DeviceMemoryView } from '@metrale/core';
import { projectionRow } from './gdn-config.js';
import { channelColumns, sigmoid, silu, softplus } from './gdn-math.cpu.js';
import { checkYDtype, outputRows } from './gdn-rows.cpu.js';
import { prefillScratchLayout, PREFILL_CHUNK, type PrefillBuffers, type PrefillPlanes, type PrefillScratchLayout } from './gdn-prefill-launch.js';

// CPU twins of the chunked prefill kernels (kernels/gdn-chunk.cu): the same functions on the same
// buffers and scratch layout (KERNELS.md, "Prefill"), in float64 between the stored values. The
// scratch holds what the CUDA kernels store: bf16 (planes = 1) or bf16 hi/lo pairs (planes = 2).

/** Arguments of every prefill kernel (gdn-prefill-launch.ts PREFILL_PARAMS). */
export interface PrefillArgs extends PrefillBuffers {
  readonly batch: number;
  readonly rows: number;
  readonly hk: number;
  readonly hv: number;
  readonly dk: number;
  readonly dv: number;
  readonly convK: number;
  readonly maxK: number;
  readonly eps: number;
  readonly fuseNorm: number;
  /** The launch's chunks of each sequence: [chunk0, min(chunkEnd, its chunks)) (a pipelined prefill's piece). */
  readonly chunk0: number;
  readonly chunkEnd: number;
  /** The unfused scan's raw O rows (f32), which gdn.prefill-norm reads; may be `y` when y is f32. */
  readonly o: DevicePtr;
  /** The element type y is stored in (FLOAT_DTYPE_CODE). */
  readonly yDtype: number;
}

const C = PREFILL_CHUNK;

// ---- bf16 ----------------------------------------------------------------------------------
/** Stores x as planes (P = 1: bf16; P = 2: hi = bf16(x), lo = bf16(x − hi), as the CUDA code does in f32). */
function put(view: Uint16Array, plane: number, planes: PrefillPlanes, idx: number, x: number): void {
  const x32 = Math.fround(x);
  const hi = f32ToBf16Bits(x32);
  view[idx] = hi;
  if (planes === 2) view[plane + idx] = f32ToBf16Bits(Math.fround(x32 - bf16BitsToF32(hi)));
}
function get(view: Uint16Array, plane: number, planes: PrefillPlanes, idx: number): number {
  const v = bf16BitsToF32(view[idx]!);
  return planes === 2 ? v + bf16BitsToF32(view[plane + idx]!) : v;
}

// ---- the step's sequences ---------------------------------------------------------------------

interface Geo {
  readonly r: number;
  readonly grp: number;
  readonly width: number;
  readonly baCol: number;
  readonly keyDim: number;
  readonly convDim: number;
  readonly stashRow: number;
  readonly stashSeq: number;
  readonly csRows: number;
  readonly cols: Int32Array;
}

function geoOf(a: PrefillArgs): Geo {
  const { hk, hv, dk, dv, convK, maxK } = a;
  if (![hk, hv, dk, dv, convK, maxK].every((v) => Number.isInteger(v) && v >= 1) || hv % hk !== 0 || dk > 128 || dv > 256) {
    throw new InvalidArgumentError(`gdn prefill: bad shape ${JSON.stringify({ hk, hv, dk, dv, convK, maxK })}`);
  }
  if (!Number.isInteger(a.batch) || a.batch < 0) throw new InvalidArgumentError(`gdn prefill: batch must be a non-negative integer, got ${a.batch}`);
  if (!Number.isInteger(a.rows) || a.rows < 0) throw new InvalidArgumentError(`gdn prefill: rows must be a non-negative integer, got ${a.rows}`);
  if (!Number.isInteger(a.chunk0) || !Number.isInteger(a.chunkEnd) || a.chunk0 < 0 || a.chunkEnd <= a.chunk0) {
    throw new InvalidArgumentError(`gdn prefill: the chunk range must be 0 ≤ chunk0 < chunkEnd, got [${a.chunk0}, ${a.chunkEnd})`);
  }
  const r = hv / hk;
  const keyDim = hk * dk;
  const stashRow = dk + dv + 1;
  const { width, baCol } = projectionRow({ hk, hv, dk, dv });
  return {
    r, grp: 2 * dk + 2 * r * dv, width, baCol, keyDim, convDim: 2 * keyDim + hv * dv,
    stashRow, stashSeq: hv * maxK * stashRow, csRows: 2 * maxK, cols: channelColumns({ hk, hv, dk, dv, convK, maxK }),
  };
}

interface Seq {
  readonly b: number;
  readonly slot: number;
  /** Committed length (pending rows included), first pending position, first step row, rows. */
  readonly P0: number;
  readonly L: number;
  readonly row0: number;
  readonly nrows: number;
}

function sequences(a: PrefillArgs, mem: DeviceMemoryView): Seq[] {
  if (a.batch === 0) return [];
  const slots = mem.i32(a.slots, a.batch);
  const seqLens = mem.i32(a.seqLens, a.batch);
  const rowStarts = mem.i32(a.rowStarts, a.batch + 1);
  if (rowStarts[a.batch]! > a.rows) throw new InvalidArgumentError(`gdn prefill: the tables hold ${rowStarts[a.batch]} rows, the launch says ${a.rows}`);
  const out: Seq[] = [];
  for (let b = 0; b < a.batch; b++) {
    const slot = slots[b]!;
    if (slot < 0) continue;
    const P0 = seqLens[b]!;
    const nPend = a.pending !== 0n ? mem.u32(a.pending + BigInt(4 * slot), 1)[0]! : 0;
    if (nPend > P0) throw new InvalidArgumentError(`gdn prefill: slot ${slot} has ${nPend} pending rows but a committed length of ${P0}`);
    if (nPend > a.maxK) throw new InvalidArgumentError(`gdn prefill: slot ${slot} has ${nPend} pending rows, more than maxK ${a.maxK}`);
    out.push({ b, slot, P0, L: P0 - nPend, row0: rowStarts[b]!, nrows: rowStarts[b + 1]! - rowStarts[b]! });
  }
  return out;
}

/** The rows [lo, hi) of a sequence in the launch's chunks [chunk0, chunkEnd) (a pipelined prefill's piece; kernels/gdn-chunk-seq.cuh launch_chunks). */
function launchRows(a: PrefillArgs, s: Seq): [number, number] {
  return [Math.min(s.nrows, a.chunk0 * C), Math.min(s.nrows, a.chunkEnd * C)];
}

/** Pre-conv inputs of a sequence, channel c at position p: the step's rows, pending rows (conv stash), history (ring). */
function convInputs(a: PrefillArgs, mem: DeviceMemoryView, G: Geo, s: Seq): (c: number, p: number) => number {
  const rows = s.nrows > 0 ? mem.f32(a.qkvz + BigInt(4 * s.row0 * G.width), s.nrows * G.width) : new Float32Array(0);
  const ring = s.L > 0 ? mem.f32(a.convRing + BigInt(4 * s.slot * a.convK * G.convDim), a.convK * G.convDim) : new Float32Array(0);
  const cs = s.P0 > s.L ? mem.f32(a.convStash + BigInt(4 * s.slot * G.csRows * G.convDim), G.csRows * G.convDim) : new Float32Array(0);
  return (c, p) => {
    if (p < 0) return 0;
    if (p >= s.P0) return rows[(p - s.P0) * G.width + G.cols[c]!]!;
    if (p >= s.L) return cs[(p % G.csRows) * G.convDim + c]!;
    return ring[(p % a.convK) * G.convDim + c]!;
  };
}

function scratchViews(a: PrefillArgs, mem: DeviceMemoryView, X: PrefillScratchLayout) {
  const at = (off: number) => a.scratch + BigInt(off);
  const P = X.planes;
  return {
    qr: mem.u16(at(X.qr), P * X.qrPlane),
    kr: mem.u16(at(X.kr), P * X.qrPlane),
    w: mem.u16(at(X.w), P * X.wPlane),
    u: mem.u16(at(X.u), P * X.uPlane),
    aqk: mem.u16(at(X.aqk), P * X.aqkPlane),
    sc: mem.f32(at(X.sc), a.hv * a.rows * 4),
  };
}

// ---- gdn_prefill_wy -----------------------------------------------------------------------------

/**
 * `gdn.prefill-wy`: for every chunk of 64 rows of every real sequence and every value head: the
 * raw (conv + SiLU) q and k, W = T diag(β e^γ f_k) K, U = T diag(β) V, A_qk and the per-row scales,
 * into the scratch (T = (I + strict_lower(diag(β) K̂K̂ᵀ ⊙ Γ))⁻¹, K̂ = diag(f_k) K, γ = cumsum(g)).
 */
export function prefillWyCpu(planes: PrefillPlanes) {
  return (a: PrefillArgs, { mem }: CpuKernelContext): void => {
    const G = geoOf(a);
    const seqs = sequences(a, mem);
    if (seqs.length === 0) return;
    const { hk, dk, dv, convK: K } = a;
    const X = prefillScratchLayout(a, a.rows, planes);
    const V = scratchViews(a, mem, X);
    const convW = mem.f32(a.convWeight, G.convDim * K);
    const aLog = mem.f32(a.aLog, a.hv);
    const dtBias = mem.f32(a.dtBias, a.hv);
    const proj = mem.f32(a.qkvz, Math.max(1, a.rows) * G.width);
    const q = new Float64Array(C * dk);
    const k = new Float64Array(C * dk);
    const v = new Float64Array(C * dv);
    const fq = new Float64Array(C);
    const fk = new Float64Array(C);
    const beta = new Float64Array(C);
    const gam = new Float64Array(C);
    const T = new Float64Array(C * C);
    const Akk = new Float64Array(C * C);
    const cw = new Float64Array(C);
    for (const s of seqs) {
      const input = convInputs(a, mem, G, s);
      const conv = (_s: Seq, c: number, P: number): number => {
        let acc = 0;
        for (let tap = 0; tap < K; tap++) acc += convW[c * K + tap]! * input(c, P - K + 1 + tap);
        return silu(acc);
      };
      const [lo, hi] = launchRows(a, s);
      for (let c0 = lo; c0 < hi; c0 += C) {
        const n = Math.min(C, s.nrows - c0);
        const rowc = s.row0 + c0;
        const Pc = s.P0 + c0;
        for (let g = 0; g < hk; g++) {
          for (let i = 0; i < n; i++) {
            let sq = 0;
            let sk = 0;
            for (let e = 0; e < dk; e++) {
              const qe = conv(s, g * dk + e, Pc + i);
              const ke = conv(s, G.keyDim + g * dk + e, Pc + i);
              q[i * dk + e] = qe;
              k[i * dk + e] = ke;
              sq += qe * qe;
              sk += ke * ke;
              put(V.qr, X.qrPlane, planes, (g * a.rows + rowc + i) * X.dks + e, qe);
              put(V.kr, X.qrPlane, planes, (g * a.rows + rowc + i) * X.dks + e, ke);
            }
            for (let e = dk; e < X.dks; e++) {
              put(V.qr, X.qrPlane, planes, (g * a.rows + rowc + i) * X.dks + e, 0);
              put(V.kr, X.qrPlane, planes, (g * a.rows + rowc + i) * X.dks + e, 0);
            }
            fq[i] = 1 / Math.sqrt(dk) / Math.sqrt(sq + 1e-6);
            fk[i] = 1 / Math.sqrt(sk + 1e-6);
          }
          // K̂ K̂ᵀ (lower part) of the chunk.
          for (let i = 0; i < n; i++) {
            for (let j = 0; j < i; j++) {
              let acc = 0;
              for (let e = 0; e < dk; e++) acc += k[i * dk + e]! * k[j * dk + e]!;
              Akk[i * C + j] = acc * fk[i]! * fk[j]!;
            }
          }
          for (let hl = 0; hl < G.r; hl++) {
            const h = g * G.r + hl;
            let run = 0;
            for (let i = 0; i < n; i++) {
              const bar = (rowc + i) * G.width + G.baCol + g * 2 * G.r;
              beta[i] = sigmoid(proj[bar + hl]!);
              run += -Math.exp(aLog[h]!) * softplus(proj[bar + G.r + hl]! + dtBias[h]!);
              gam[i] = run;
            }
            const gLast = gam[n - 1]!;
            for (let i = 0; i < n; i++) {
              for (let e = 0; e < dv; e++) v[i * dv + e] = conv(s, 2 * G.keyDim + h * dv + e, Pc + i);
            }
            // T = (I + A)⁻¹, A[i][j] = β_i (k̂_i·k̂_j) e^{γ_i − γ_j} for j < i.
            for (let j = 0; j < n; j++) {
              for (let i = 0; i < n; i++) {
                if (i < j) T[i * C + j] = 0;
                else if (i === j) T[i * C + j] = 1;
                else {
                  let acc = 0;
                  for (let m = j; m < i; m++) acc += Akk[i * C + m]! * Math.exp(gam[i]! - gam[m]!) * T[m * C + j]!;
                  T[i * C + j] = -beta[i]! * acc;
                }
              }
            }
            for (let j = 0; j < n; j++) cw[j] = beta[j]! * Math.exp(gam[j]!) * fk[j]!;
            for (let i = 0; i < n; i++) {
              const row = h * a.rows + rowc + i;
              // W = T diag(β e^γ) K̂, U = T diag(β) V.
              for (let e = 0; e < X.dks; e++) {
                let acc = 0;
                if (e < dk) for (let j = 0; j <= i; j++) acc += T[i * C + j]! * cw[j]! * k[j * dk + e]!;
                put(V.w, X.wPlane, planes, row * X.dks + e, acc);
              }
              for (let e = 0; e < X.dvs; e++) {
                let acc = 0;
                if (e < dv) for (let j = 0; j <= i; j++) acc += T[i * C + j]! * beta[j]! * v[j * dv + e]!;
                put(V.u, X.uPlane, planes, row * X.dvs + e, acc);
              }
              // A_qk[i][j] = (q̂_i·k̂_j) e^{γ_i − γ_j}, j ≤ i.
              for (let j = 0; j < C; j++) {
                let acc = 0;
                if (j <= i) {
                  for (let e = 0; e < dk; e++) acc += q[i * dk + e]! * k[j * dk + e]!;
                  acc *= fq[i]! * fk[j]! * Math.exp(gam[i]! - gam[j]!);
                }
                put(V.aqk, X.aqkPlane, planes, row * C + j, acc);
              }
              V.sc.set([fq[i]! * Math.exp(gam[i]!), fk[i]! * Math.exp(gLast - gam[i]!), gam[i]!, 0], row * 4);
            }
          }
        }
      }
    }
  };
}

// ---- gdn_prefill_scan ---------------------------------------------------------------------------

/**
 * `gdn.prefill-scan`: per real sequence and value head, from the slot's state with its pending
 * rows folded (stash): over the chunks in order, V_new = U − W S, O = diag(qs) Q S + A_qk V_new,
 * S ← e^{γ_last} S + Kᵀ diag(ks) V_new; o = O in f32 (fuseNorm = 0) or y = the gated RMSNorm of
 * O in the row type; state written; the ring takes positions [max(L, end − K), end).
 */
export function prefillScanCpu(planes: PrefillPlanes) {
  return (a: PrefillArgs, { mem }: CpuKernelContext): void => {
    const G = geoOf(a);
    checkYDtype('gdn.prefill-scan', a.yDtype);
    const seqs = sequences(a, mem);
    if (seqs.length === 0) return;
    const { hv, dk, dv, convK: K } = a;
    const X = prefillScratchLayout(a, a.rows, planes);
    const V = scratchViews(a, mem, X);
    const normW = mem.f32(a.normWeight, dv);
    const S = new Float64Array(dk * dv);
    const vn = new Float64Array(C * dv);
    const o = new Float64Array(C * dv);
    const Wt = new Float64Array(C * dk);
    const Qt = new Float64Array(C * dk);
    const Kt = new Float64Array(C * dk);
    const Ut = new Float64Array(C * dv);
    const At = new Float64Array(C * C);
    for (const s of seqs) {
      const nPend = s.P0 - s.L;
      if (s.nrows <= 0 && nPend <= 0) continue;
      // The launch's chunks (a piece of a pipelined prefill): the first piece folds the pending
      // rows, the last writes the ring.
      const nch = Math.ceil(s.nrows / C);
      if (a.chunk0 > 0 && a.chunk0 >= nch) continue;
      const [rowLo, rowEnd] = launchRows(a, s);
      // Ring: the step's last K positions of [L, end).
      const end = s.P0 + s.nrows;
      if (a.chunkEnd >= nch) {
        const ring = mem.f32(a.convRing + BigInt(4 * s.slot * K * G.convDim), K * G.convDim);
        const input = convInputs(a, mem, G, s);
        const vals: [number, Float32Array][] = [];
        for (let p = Math.max(s.L, end - K); p < end; p++) vals.push([p, Float32Array.from({ length: G.convDim }, (_, c) => input(c, p))]);
        for (const [p, row] of vals) ring.set(row, (p % K) * G.convDim);
      }
      const state = mem.f32(a.state + BigInt(4 * s.slot * hv * dk * dv), hv * dk * dv);
      // Fused: y takes the gated norm in the row type; unfused: o takes the raw O (f32).
      // The launch's rows [rowLo, rowEnd) only: a piece leaves the others' alone.
      const span = Math.max(0, rowEnd - rowLo) * hv * dv;
      const out = span === 0 ? undefined : outputRows(mem, a.fuseNorm ? a.y : a.o, (s.row0 + rowLo) * hv * dv, span, a.fuseNorm ? a.yDtype : 0);
      const y = out?.values ?? new Float32Array(0);
      const z = s.nrows > 0 ? mem.f32(a.qkvz + BigInt(4 * s.row0 * G.width), s.nrows * G.width) : new Float32Array(0);
      for (let h = 0; h < hv; h++) {
        const kg = Math.floor(h / G.r);
        const mh = h % G.r;
        for (let e = 0; e < dk * dv; e++) S[e] = state[h * dk * dv + e]!;
        if (nPend > 0 && a.chunk0 === 0) {
          const st = mem.f32(a.stash + BigInt(4 * (s.slot * G.stashSeq + h * a.maxK * G.stashRow)), a.maxK * G.stashRow);
          const gl = st[(nPend - 1) * G.stashRow + dk + dv]!;
          const E = Math.exp(gl);
          for (let e = 0; e < dk * dv; e++) S[e]! *= E;
          for (let t = 0; t < nPend; t++) {
            const row = t * G.stashRow;
            const w = Math.exp(gl - st[row + dk + dv]!);
            for (let i = 0; i < dk; i++) {
              const ki = w * st[row + i]!;
              for (let j = 0; j < dv; j++) S[i * dv + j]! += ki * st[row + dk + j]!;
            }
          }
        }
        for (let c0 = rowLo; c0 < rowEnd; c0 += C) {
          const n = Math.min(C, s.nrows - c0);
          const rowc = s.row0 + c0;
          const sc = (i: number, f: number) => V.sc[(h * a.rows + rowc + i) * 4 + f]!;
          // The chunk's tiles.
          for (let i = 0; i < n; i++) {
            const wRow = (h * a.rows + rowc + i) * X.dks;
            const kqRow = (kg * a.rows + rowc + i) * X.dks;
            const uRow = (h * a.rows + rowc + i) * X.dvs;
            const aRow = (h * a.rows + rowc + i) * C;
            for (let m = 0; m < dk; m++) {
              Wt[i * dk + m] = get(V.w, X.wPlane, planes, wRow + m);
              Qt[i * dk + m] = get(V.qr, X.qrPlane, planes, kqRow + m);
              Kt[i * dk + m] = get(V.kr, X.qrPlane, planes, kqRow + m);
            }
            for (let j = 0; j < dv; j++) Ut[i * dv + j] = get(V.u, X.uPlane, planes, uRow + j);
            for (let t = 0; t < C; t++) At[i * C + t] = get(V.aqk, X.aqkPlane, planes, aRow + t);
          }
          // V_new = U − W S; O = qs (Q S) + A_qk V_new.
          vn.fill(0, 0, n * dv);
          o.fill(0, 0, n * dv);
          for (let i = 0; i < n; i++) {
            for (let m = 0; m < dk; m++) {
              const wm = Wt[i * dk + m]!;
              const qm = Qt[i * dk + m]!;
              for (let j = 0; j < dv; j++) {
                const Smj = S[m * dv + j]!;
                vn[i * dv + j]! -= wm * Smj;
                o[i * dv + j]! += qm * Smj;
              }
            }
            const q0 = sc(i, 0);
            for (let j = 0; j < dv; j++) {
              vn[i * dv + j]! += Ut[i * dv + j]!;
              o[i * dv + j]! *= q0;
            }
          }
          for (let i = 0; i < n; i++) {
            for (let t = 0; t <= i; t++) {
              const at = At[i * C + t]!;
              if (at === 0) continue;
              for (let j = 0; j < dv; j++) o[i * dv + j]! += at * vn[t * dv + j]!;
            }
          }
          // S ← e^{γ_last} S + Σ_i ks_i k_i v_new,iᵀ.
          const decay = Math.exp(sc(n - 1, 2));
          for (let e = 0; e < dk * dv; e++) S[e]! *= decay;
          for (let i = 0; i < n; i++) {
            const ks = sc(i, 1);
            for (let m = 0; m < dk; m++) {
              const km = ks * Kt[i * dk + m]!;
              if (km === 0) continue;
              for (let j = 0; j < dv; j++) S[m * dv + j]! += km * vn[i * dv + j]!;
            }
          }
          // Output rows.
          for (let i = 0; i < n; i++) {
            const yo = (c0 - rowLo + i) * hv * dv + h * dv;
            if (a.fuseNorm) {
              let ss = 0;
              for (let j = 0; j < dv; j++) ss += o[i * dv + j]! ** 2;
              const inv = 1 / Math.sqrt(ss / dv + a.eps);
              const z0 = (c0 + i) * G.width + kg * G.grp + 2 * dk + (G.r + mh) * dv;
              for (let j = 0; j < dv; j++) y[yo + j] = normW[j]! * o[i * dv + j]! * inv * silu(z[z0 + j]!);
            } else {
              for (let j = 0; j < dv; j++) y[yo + j] = o[i * dv + j]!;
            }
          }
        }
        for (let e = 0; e < dk * dv; e++) state[h * dk * dv + e] = S[e]!;
      }
      out?.store();
    }
  };
}

// ---- gdn_prefill_norm ---------------------------------------------------------------------------

/**
 * `gdn.prefill-norm`: y = w ⊙ o / √(mean(o²) + eps) ⊙ SiLU(z) per value head (o: the scan's raw O,
 * f32; y in the row type, in place where it is f32 and o is y), on the rows of real sequences in
 * the launch's chunks.
 */
export function prefillNormCpu(a: PrefillArgs, { mem }: CpuKernelContext): void {
  const G = geoOf(a);
  checkYDtype('gdn.prefill-norm', a.yDtype);
  const { hv, dk, dv } = a;
  const normW = mem.f32(a.normWeight, dv);
  for (const s of sequences(a, mem)) {
    if (s.nrows <= 0) continue;
    // The launch's chunks (a piece of a pipelined prefill: its rows only).
    const [lo, hi] = launchRows(a, s);
    if (hi <= lo) continue;
    const o = mem.f32(a.o + BigInt(4 * (s.row0 + lo) * hv * dv), (hi - lo) * hv * dv);
    const out = outputRows(mem, a.y, (s.row0 + lo) * hv * dv, (hi - lo) * hv * dv, a.yDtype);
    const y = out.values;
    const z = mem.f32(a.qkvz + BigInt(4 * s.row0 * G.width), s.nrows * G.width);
    for (let i = lo; i < hi; i++) {
      for (let h = 0; h < hv; h++) {
        const yo = ((i - lo) * hv + h) * dv;
        let ss = 0;
        for (let j = 0; j < dv; j++) ss += o[yo + j]! ** 2;
        const inv = 1 / Math.sqrt(ss / dv + a.eps);
        const z0 = i * G.width + Math.floor(h / G.r) * G.grp + 2 * dk + (G.r + (h % G.r)) * dv;
        for (let j = 0; j < dv; j++) y[yo + j] = normW[j]! * o[yo + j]! * inv * silu(z[z0 + j]!);
      }
    }
    out.store();
  }
}
