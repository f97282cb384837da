// Gated DeltaNet decode / verify / fold, the smem kernels (gdn_recurrent_smem, gdn_fold_smem in
// gdn-recurrent.cu and gdn-fold.cu). Layouts and semantics: ../KERNELS.md.
//
// Launch: grid [batch, H_v] (or any grid of at least batch·H_v CTAs), a block of d_v threads (at
// least d_v), and the dynamic shared memory of fast_smem_floats() (gdn-launch.ts computes the
// same). Supported: what check_shape() takes, plus maxK ≤ 8 and conv K ≤ 4 (else the kernel traps;
// the layer then runs the general kernels, gdn-general.cuh).
//
// The math (value head h, column j of S; everything per column is independent but the gated
// RMSNorm of y). For the rows t < T of a block entering with state S (after any pending rows):
//   a_t = Sᵀk̂_t, b_t = Sᵀq̂_t                     (one pass over S: 2T dot products per column)
//   Γ_t = Σ_{r≤t} g_r, A_t = e^{Γ_t}
//   u_t = β_t (v_t − A_t a_t − Σ_{s<t} e^{Γ_t−Γ_s} (k̂_s·k̂_t) u_s)
//   o_t = A_t b_t + Σ_{s≤t} e^{Γ_t−Γ_s} (k̂_s·q̂_t) u_s
//   S'  = A_{T−1} S + Σ_t e^{Γ_{T−1}−Γ_t} k̂_t u_tᵀ    (commit: a second pass)
// which is the row-by-row recurrence S_t = α_t S_{t−1} + k̂_t u_tᵀ, u_t = β_t (v_t − α_t S_{t−1}ᵀk̂_t),
// o_t = S_tᵀq̂_t unrolled (S_tᵀx = A_t Sᵀx + Σ_{s≤t} e^{Γ_t−Γ_s} u_s (k̂_s·x)). The Gram entries
// k̂_s·k̂_t, k̂_s·q̂_t and the norms are per key head (warps of the CTA, in the prologue). Pending
// rows (carried mode, or the fold kernel's accepted rows) enter as S ← E S + Σ_m k̂_m (w_m u_m)ᵀ,
// applied element by element inside the same pass. So:
//   decode            read S, write S (2 passes over the CTA's copy of S)
//   verify (WOA)      read S (1 pass)
//   carried verify    read S, write S folded (1 pass: fold, write, dot products)
//   carried decode    read S, write S (2 passes)
//   fold (WOA)        read S, write S (1 pass)
// Multi-row commits (k ≥ 2 in mode 0: tests and the prefill oracle) run blocks of up to
// min(8, maxK) rows, each committing before the next.
//
// Where S lives between its load and the passes (SmemSrc, gdn-fast-source.cuh): the CTA copies
// its head's S (64 KiB at the 80B shape) into shared memory with the copy engine right after it
// knows its slot: cp.async.bulk on an mbarrier per chunk of rows (GDN_FAST_NCHUNK, sm_90), or
// cp.async 16-byte copies (sm_80, or -DGDN_SMEM_CPASYNC); the prologue (conv over ring / conv
// stash / the step's rows, SiLU, gates, norms and Gram entries) runs while the copy is in flight,
// and the first pass starts on each chunk as it lands. 3 CTAs per SM (shared memory), few
// registers.
#pragma once
#include "gdn-common.cuh"
#include "gdn-fast-layout.cuh"    // sizes, shared memory layout, float4 and copy helpers
#include "gdn-fast-source.cuh"    // where S lives: the shared copy (SmemSrc)
#include "gdn-fast-passes.cuh"    // the passes over a column of S
#include "gdn-fast-prologue.cuh"  // a row block's prologue: conv, gates, Gram entries, scalars

#ifndef GDN_SMEM_MAXNREG
#define GDN_SMEM_MAXNREG 168  // 3 CTAs of 128 threads per SM (shared memory allows 3 as well)
#endif

namespace gdn {
namespace fast {

// ---- one row block of one value head ---------------------------------------------------------------

template <class Cl>
struct HeadCtx {
  const Args* A;
  const Geo* G;
  const Task* T;
  int h, m;  // value head, its index within key head g
  Cl C;
  Lay L;
};

// Pass A with the pending terms' instantiation picked at run time (M = 0: none); uf, c0 from
// pending_coefs (loaded in the prologue).
template <int TB, int MB, class Cl, int UN>
__device__ __forceinline__ void pass_a_with(SmemSrc& src, const HeadCtx<Cl>& X, const float (&uf)[UN], float c0, bool first, bool wHold,
                                            bool wGlob, float (&a)[TB > 0 ? TB : 1], float (&b)[TB > 0 ? TB : 1]) {
  PassA<TB, MB> P;
  P.zero();
  P.c0 = c0;
#pragma unroll
  for (int m = 0; m < MB; ++m) P.uf[m] = uf[m];
  pass_a<TB, MB>(src, P, X.C, X.L, first, MB > 0 && wHold, MB > 0 && wGlob);
#pragma unroll
  for (int t = 0; t < TB; ++t) a[t] = P.a[t], b[t] = P.b[t];
}

// At most 4 fold terms here (run_head_t folds more pending rows in a pass of their own first:
// dot products and 8 terms in one pass would not fit 168 registers without spills).
template <int TB, class Cl>
__device__ __forceinline__ void run_pass_a(SmemSrc& src, const HeadCtx<Cl>& X, int M, const float (&uf)[4], float c0, bool first, bool wHold,
                                           bool wGlob, float (&a)[TB > 0 ? TB : 1], float (&b)[TB > 0 ? TB : 1]) {
  if (M == 0) pass_a_with<TB, 0, Cl, 4>(src, X, uf, c0, first, false, false, a, b);
  else pass_a_with<TB, 4, Cl, 4>(src, X, uf, c0, first, wHold, wGlob, a, b);
}

// Rows t0 .. t0+nb−1 (nb ≤ TB) of the task on value head h. Fold terms first: in the first block
// the M pending rows (carried mode); in a later block of a verify, its own earlier rows, replayed
// from the stash this CTA just wrote (M = t0). last: no row block follows.
template <int TB, class Cl>
__device__ __forceinline__ void row_block(SmemSrc& src, const HeadCtx<Cl>& X, int t0, int nb, const float* pendSh, int pendM, bool firstPass, bool last) {
  const Args& A = *X.A;
  const Geo& G = *X.G;
  const Task& T = *X.T;
  const Lay& L = X.L;
  const Cl& C = X.C;
  const int tid = tid_lin(), nt = nthreads();
  const int lane = tid & 31, warp = tid >> 5, nw = (nt + 31) >> 5;
  const int dk = A.dk, dv = A.dv, h = X.h, g = T.g;
  const bool first = t0 == 0;
  const bool realPending = first && pendM > 0;
  const bool replay = !first && !T.commit;
  const int M = realPending ? pendM : replay ? t0 : 0;
  if (M > 4) __trap();  // run_head_t folds more pending rows first; a replay has t0 = 4

  __syncthreads();  // earlier readers of kd / qd / kf / the scalars are done
  conv_sources(A, G, T, t0, nb + A.K - 1, L);
  __syncthreads();
  // ---- prologue: the loads independent of each other, issued together ----
  // z and v of column j (registers), gates (shared).
  float zt[TB], vt[TB];
  {
    const int zcol = g * G.grp + 2 * dk + (G.r + X.m) * dv + C.j;
#pragma unroll
    for (int t = 0; t < TB; ++t) zt[t] = (t < nb && C.active) ? A.qkvz[(size_t)(T.row0 + t0 + t) * G.width + zcol] : 0.0f;
    if (C.active) {
      conv_rows<TB>(A, L, 2 * G.keyDim + h * dv + C.j, g * G.grp + 2 * dk + X.m * dv + C.j, nb, vt);
    } else {
#pragma unroll
      for (int t = 0; t < TB; ++t) vt[t] = 0.0f;
    }
  }
  for (int t = tid; t < 8; t += nt) {
    float beta = 0.0f, gg = 0.0f;
    if (t < nb) {
      const float* bar = A.qkvz + (size_t)(T.row0 + t0 + t) * G.width + G.baCol + g * 2 * G.r;
      gg = -expf(A.aLog[h]) * softplusf_(bar[G.r + X.m] + A.dtBias[h]);
      beta = sigmoidf_(bar[X.m]);
    }
    L.sc[kBeta + t] = beta;
    L.sc[kGraw + t] = gg;
  }
  // Fold terms (at most 4 here): keys to shared memory, this column's coefficients to registers.
  float uf[4], c0 = 1.0f;
  if (M > 0) {
    pending_coefs<4>(A, G, pendSh, M, C, uf, c0);
  } else {
#pragma unroll
    for (int m = 0; m < 4; ++m) uf[m] = 0.0f;
  }
  // The stash γ of this block's rows continue those of the verify's earlier rows.
  const float gamBase = replay ? pendSh[(size_t)(t0 - 1) * G.stashRow + dk + dv] : 0.0f;
  // q and k of key head g (raw), rows of kd / qd; zero past d_k.
  for (int i = tid; i < L.dkp; i += nt) {
    float q[TB], k[TB];
    if (i < dk) {
      const int cq = g * dk + i, colq = g * G.grp + i;
      conv_rows<TB>(A, L, cq, colq, nb, q);
      conv_rows<TB>(A, L, G.keyDim + cq, colq + dk, nb, k);
    } else {
#pragma unroll
      for (int t = 0; t < TB; ++t) q[t] = k[t] = 0.0f;
    }
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      L.qd[t * L.dkp + i] = q[t];
      L.kd[t * L.dkp + i] = k[t];
    }
  }
  if (M > 0) pending_keys(A, G, pendSh, M, fast_mb_alloc(A.maxK), L);
  __syncthreads();
  gram(L, nb);
  __syncthreads();
  coefs(L, nb, dk);
  __syncthreads();

  // ---- pass A: a_t = Sᵀk_t, b_t = Sᵀq_t (raw k, q) of the state after the fold terms ----
  // The pending fold's result: to the shared copy when it is read again (a commit pass or a
  // later block), and to global memory when it is committed now (carried verify). A replay
  // writes nothing.
  const bool wHold = realPending && (T.commit || !last);
  const bool wGlob = realPending && !T.commit;
  float a[TB], b[TB];
  run_pass_a<TB, Cl>(src, X, M, uf, c0, first && firstPass, wHold, wGlob, a, b);

  // ---- per column: u_t, o_t ----
  const float* sc = L.sc;
  float u[TB], o[TB];
#pragma unroll
  for (int t = 0; t < TB; ++t) {
    float acc = sc[kCA + t] * a[t];
#pragma unroll
    for (int s = 0; s < t; ++s) acc = fmaf(sc[kCK + s * 8 + t], u[s], acc);
    u[t] = sc[kBeta + t] * (vt[t] - acc);
    float oo = sc[kCB + t] * b[t];
#pragma unroll
    for (int s = 0; s <= t; ++s) oo = fmaf(sc[kCQ + s * 8 + t], u[s], oo);
    o[t] = C.active ? oo : 0.0f;
  }
  // ---- gated RMSNorm of each row over d_v ----
#pragma unroll
  for (int t = 0; t < TB; ++t) {
    if (t < nb) {
      const float ps = warp_sum_to_lane0(o[t] * o[t]);
      if (lane == 0) L.sc[kRed + t * 32 + warp] = ps;
    }
  }
  __syncthreads();
  if (C.active) {
    const float nwj = A.normWeight[C.j];
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (t < nb) {
        float ss = 0.0f;
        for (int w = 0; w < nw; ++w) ss += sc[kRed + t * 32 + w];
        const float inv = 1.0f / sqrtf(ss / (float)dv + A.eps);
        store_y(A, (size_t)(T.row0 + t0 + t) * A.hv * dv + (size_t)h * dv + C.j, nwj * o[t] * inv * siluf_(zt[t]));
      }
    }
  }
  // ---- stash: k̂_t, u_t, γ_t (verify) ----
  if (T.record) {
    float* sh = A.stash + (size_t)T.slot * G.stashSeq + (size_t)h * A.maxK * G.stashRow;
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      if (t < nb) {
        float* srow = sh + (size_t)(t0 + t) * G.stashRow;
        if (C.active) srow[dk + C.j] = u[t];
        const float fk = sc[kFK + t];
        for (int i = tid; i < dk; i += nt) srow[i] = L.kd[t * L.dkp + i] * fk;
        if (tid == 0) srow[dk + dv] = gamBase + sc[kGam + t];
      }
    }
  }
  // ---- pass B (commit): S ← A_{T−1} S + Σ_t e^{Γ_{T−1}−Γ_t} k̂_t u_tᵀ ----
  if (T.commit) {
    float ub[TB];
#pragma unroll
    for (int t = 0; t < TB; ++t) ub[t] = sc[kUB + t] * u[t];
    // The last block goes to global memory; earlier ones stay in the shared copy.
    pass_b<TB, Cl>(src, C, L, sc[kCLast], ub, !last);
  }
}

// One value head of a task.
template <class Cl>
__device__ __forceinline__ void run_head_t(SmemSrc& src, const Args& A, const Geo& G, const Task& T, int h, const Lay& L) {
  HeadCtx<Cl> X;
  X.A = &A;
  X.G = &G;
  X.T = &T;
  X.h = h;
  X.m = h - T.g * G.r;
  X.L = L;
  const int j = tid_lin();
  X.C.j = j;
  X.C.dk_ = A.dk;
  X.C.dv_ = A.dv;
  X.C.active = j < A.dv;
  float* headS = A.state + ((size_t)T.slot * A.hv + h) * (size_t)A.dk * A.dv;
  X.C.g = headS + (X.C.active ? j : 0);
  const int M = T.nPendFold;
  if (T.nrows <= 0 && M <= 0) return;
  // The state's copy starts now, before the prologue.
  src.issue(headS, A.dk, A.dv);
  const float* pendSh = T.pendK + (size_t)h * A.maxK * G.stashRow;
  if (T.nrows == 0) {
    // The fold kernel: S ← E S + Σ_m k̂_m (w_m u_m)ᵀ, one pass, to global memory.
    float uf[kMaxRows], c0;
    pending_coefs<kMaxRows>(A, G, pendSh, M, X.C, uf, c0);
    pending_keys(A, G, pendSh, M, fast_mb_alloc(A.maxK), L);
    __syncthreads();
    float a[1], b[1];
    if (M <= 4) pass_a_with<0, 4, Cl, kMaxRows>(src, X, uf, c0, true, false, true, a, b);
    else pass_a_with<0, 8, Cl, kMaxRows>(src, X, uf, c0, true, false, true, a, b);
    return;
  }
  int pendM = M;
  bool firstPass = true;
  if (pendM > 4) {
    // More than 4 pending rows (maxK > 4): a fold-only pass first, into the shared copy (and
    // committed now where a carried verify commits them); the row blocks then start from the
    // folded state.
    float uf[kMaxRows], c0;
    pending_coefs<kMaxRows>(A, G, pendSh, pendM, X.C, uf, c0);
    pending_keys(A, G, pendSh, pendM, fast_mb_alloc(A.maxK), L);
    __syncthreads();
    float a[1], b[1];
    pass_a_with<0, 8, Cl, kMaxRows>(src, X, uf, c0, true, true, !T.commit, a, b);
    pendM = 0;
    firstPass = false;
  }
  const int cap = min(kBlockRows, A.maxK);
  for (int t0 = 0; t0 < T.nrows; t0 += cap) {
    const int nb = min(cap, T.nrows - t0);
    const bool last = t0 + nb >= T.nrows;
    if (nb <= 1) row_block<1, Cl>(src, X, t0, nb, pendSh, pendM, firstPass, last);
    else row_block<4, Cl>(src, X, t0, nb, pendSh, pendM, firstPass, last);
  }
}

// The 80B head shape (d_k = d_v = 128) compiled with both known; any other shape at run time.
__device__ __forceinline__ void run_head(SmemSrc& src, const Args& A, const Geo& G, const Task& T, int h, const Lay& L) {
#ifndef GDN_FAST_NO_SPECIAL
  if (A.dk == 128 && A.dv == 128) {
    run_head_t<Col<128, 128>>(src, A, G, T, h, L);
    return;
  }
#endif
  run_head_t<Col<0, 0>>(src, A, G, T, h, L);
}

// What the smem kernels take beyond check_shape; anything else traps (the layer picks general).
__device__ __forceinline__ void check_fast(const Args& A) {
  const bool ok = A.maxK <= kMaxRows && A.K <= kMaxConv && dyn_smem_bytes() >= 4u * (unsigned)fast_smem_floats(A.dk, A.dv, A.maxK);
  if (!ok) __trap();
}

__device__ __forceinline__ void run_task(const Args& A, const Geo& G, const Task& T) {
  __shared__ __align__(8) uint64_t bars[kNChunk];
  const Lay L = lay_of(A);
  SmemSrc src;
  src.init(bars, L.S);
  if (T.nPendFold > A.maxK) __trap();  // more pending rows than the stash holds
  for (int h = T.h0; h < T.h0 + T.nh; ++h) {
    run_head(src, A, G, T, h, L);
    if (h + 1 < T.h0 + T.nh) src.release();
  }
  __syncthreads();  // every read of history by this CTA is done
  write_conv_state(A, G, T);
}

__device__ __forceinline__ void recurrent_entry(const Args& A, int mode, int batch, int k) {
  check_fast(A);
  int b, h;
  cta_coords(batch, A.hv, b, h);
  if (b >= batch || h >= A.hv) return;
  const Geo G = geo_of(A);
  if (k < 1 || (mode == 1 && k > A.maxK)) return;
  Task T;
  if (!make_task(A, G, b, h, A.rowStarts[b], k, mode == 0, mode == 1, T)) return;
  run_task(A, G, T);
}

__device__ __forceinline__ void fold_entry(const Args& A, const uint32_t* naTab, int batch, int k) {
  check_fast(A);
  int b, h, slot, na;
  if (!fold_cta(A, naTab, batch, k, b, h, slot, na)) return;
  const Geo G = geo_of(A);
  Task T;
  fold_task(A, G, b, h, slot, na, k, T);
  run_task(A, G, T);
}

}  // namespace fast
}  // namespace gdn
