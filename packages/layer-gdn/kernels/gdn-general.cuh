// Gated DeltaNet, the general kernels (gdn_recurrent_general, gdn_fold_general, and the row loop
// of the row-by-row prefill oracle the tests build): any shape the layer takes, where the smem,
// pipe, split and two-kernel paths do not (maxK > 8, conv K > 4, d_v not a multiple of 4, ...).
// The first CUDA version of the recurrence. Layouts and semantics: ../KERNELS.md.
//
// Launch: one CTA per (batch position, value head): grid [batch, H_v] (or any grid of at least
// batch·H_v CTAs), a block of at least d_v threads, no dynamic shared memory. d_k ≤ 128, d_v ≤ 256.
//
// Design: thread j owns column j of S (S[i][j], i over d_k) in 128 registers (zero-padded past
// d_k); the CTA first asks L2 for its 64 KiB of state (prefetch.global.L2), runs the prologue (conv,
// SiLU, norm partials, gates, for a block of up to GDN_RB rows, into shared memory), then loads S
// into registers; o_t = α b_t + u_t (k̂_t·q̂_t) with a = Sᵀk, b = Sᵀq on the state before the row.
// More rows than GDN_RB: the next block's prologue runs with S out of registers (commit: stored and
// reloaded; verify: S_0 reloaded and the block's earlier rows replayed from the stash).
#pragma once
#include "gdn-common.cuh"

#ifndef GDN_RB
#define GDN_RB 4  // rows per block of the row loop (prologue and norm reductions are per block)
#endif
#ifndef GDN_PROLOGUE_UNROLL
#define GDN_PROLOGUE_UNROLL 1  // rows of the prologue's loop in flight at once (registers permitting)
#endif
#ifndef GDN_MAX_DK
#define GDN_MAX_DK 128  // d_k ≤ 128: a column of S is 128 registers (zero-padded)
#define GDN_MAX_DV 256  // d_v ≤ 256: one thread per column, ≤ 168 registers each
#endif

namespace gdn {

constexpr int kPrologueUnroll = GDN_PROLOGUE_UNROLL;

// Register pressure: S takes DK registers per thread, and ptxas would otherwise keep a second
// set of DK values live (shared-memory keys of one pass hoisted above the previous pass, or
// the row addresses of the loads kept for the stores). Passes over S read the keys through
// volatile loads (no merging of two passes' loads) and start with pass_fence(), which keeps
// the next pass's loads from being hoisted; the stores recompute their addresses.
__device__ __forceinline__ float4 lds4(const float* p) {
#ifdef __CUDA_ARCH__
  float4 v;
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a));
  return v;
#else
  return *reinterpret_cast<const float4*>(p);
#endif
}
__device__ __forceinline__ void pass_fence() { __syncwarp(__activemask()); }
__device__ __forceinline__ int opaque(int x) {
#ifdef __CUDA_ARCH__
  asm volatile("" : "+r"(x));
#endif
  return x;
}

// Asks L2 for a contiguous range (the state of one (slot, head)), one 128-byte line per request,
// spread over the block's threads; no registers wait for it.
__device__ __forceinline__ void prefetch_l2(const float* p, size_t bytes) {
#ifdef __CUDA_ARCH__
  const char* c = reinterpret_cast<const char*>(p);
  for (size_t off = (size_t)tid_lin() * 128; off < bytes; off += (size_t)nthreads() * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + off));
#endif
}

// Shared memory of one CTA.
template <int DK>
struct __align__(16) Smem {
  float qs[GDN_RB][DK];  // raw (conv + SiLU) q of the row block, zero past d_k
  float ks[GDN_RB][DK];  // raw k
  float pk[GDN_RB][DK];  // keys of the pending (stash) rows being folded
  float vs[GDN_RB][GDN_MAX_DV];  // v of the block's rows (conv + SiLU), column j at [u][j]; then their raw o
  float gates[GDN_RB][3];        // β, α = e^g, g of the block's rows
  float red[3 * GDN_RB * 32];  // per row of the block: warp partials of Σq², Σk², Σqk
  float ored[GDN_RB * 32];     // per row of the block: warp partials of Σo²
  int dvStride;  // d_v and d_k, read back through volatile loads by every state load and store:
  int dkRows;    // ptxas cannot prove two reads equal, so it never keeps a column's DK row
                 // addresses or row predicates live from one pass to another (or hoists them)
};

// Loads column j of S (zeros past d_k and for j ≥ d_v). All loads issue before any use.
__device__ __forceinline__ int volatile_int(const int* p) {
#ifdef __CUDA_ARCH__
  int v;
  asm volatile("ld.volatile.shared.s32 %0, [%1];" : "=r"(v) : "r"((unsigned)__cvta_generic_to_shared(p)));
  return v;
#else
  return *p;
#endif
}

template <int DK>
__device__ __forceinline__ void load_col(float (&s)[DK], const float* col, const int* dims, bool active) {
  const int stride = volatile_int(dims), dk = active ? volatile_int(dims + 1) : 0;
#pragma unroll
  for (int i = 0; i < DK; ++i) s[i] = i < dk ? col[(size_t)i * stride] : 0.0f;
}

template <int DK>
__device__ __forceinline__ void store_col(const float (&s)[DK], float* col, const int* dims, bool active) {
  const int stride = volatile_int(dims), dk = active ? volatile_int(dims + 1) : 0;
#pragma unroll
  for (int i = 0; i < DK; ++i)
    if (i < dk) col[(size_t)i * stride] = s[i];
}

// S ← e^{γ_{n−1}} S + Σ_{t<n} e^{γ_{n−1}−γ_t} k_t u_tᵀ on column j, from a stash head block
// ([maxK][d_k + d_v + 1]: k_t, u_t, γ_t). Stages keys in sm.pk; syncs the block.
template <int DK>
__device__ __forceinline__ void fold_rows(float (&s)[DK], const float* sh, int n, const Args& A, const Geo& G, Smem<DK>& sm, int j,
                                          bool active) {
  const int tid = tid_lin(), nt = nthreads();
  const int dk = A.dk, dv = A.dv, sr = G.stashRow;
  const float gl = sh[(size_t)(n - 1) * sr + dk + dv];
  const float E = expf(gl);
#pragma unroll
  for (int i = 0; i < DK; ++i) s[i] *= E;
  for (int t0 = 0; t0 < n; t0 += GDN_RB) {
    const int nb = min(GDN_RB, n - t0);
    __syncthreads();  // earlier readers of sm.pk are done
    for (int idx = tid; idx < GDN_RB * DK; idx += nt) {
      const int u = idx / DK, i = idx - u * DK;
      sm.pk[u][i] = (u < nb && i < dk) ? sh[(size_t)(t0 + u) * sr + i] : 0.0f;
    }
    __syncthreads();
#pragma unroll 1
    for (int u = 0; u < GDN_RB; ++u) {
      if (u < nb) {
        const float* row = sh + (size_t)(t0 + u) * sr;
        const float cu = active ? expf(gl - row[dk + dv]) * row[dk + j] : 0.0f;
        pass_fence();
#pragma unroll
        for (int i = 0; i < DK; i += 4) {
          const float4 kk = lds4(&sm.pk[u][i]);
          s[i] += kk.x * cu;
          s[i + 1] += kk.y * cu;
          s[i + 2] += kk.z * cu;
          s[i + 3] += kk.w * cu;
        }
      }
    }
  }
}

// Raw q and k of rows t0..t0+nb−1 into sm.qs / sm.ks (zero past d_k), and per row u the warp
// partials of Σq², Σk², Σqk in sm.red[(3u + 0..2)·32 + warp] (unless !qk: kept from before);
// v of value head h and the gates of the rows into sm.vs / sm.gates. One row at a time (a rolled loop:
// this runs while the state loads are in flight, so it must stay light in registers). Syncs the
// block; read the totals with qk_factors.
template <int DK>
__device__ __forceinline__ void qk_prologue(const Args& A, const Geo& G, const Task& T, int h, int t0, int nb, Smem<DK>& sm,
                                            bool qk = true) {
  const int tid = tid_lin(), nt = nthreads();
  const int lane = tid & 31, warp = tid >> 5;
  const int dk = A.dk, dv = A.dv;
  const int m = h - T.g * G.r;
  __syncthreads();  // earlier readers of sm.qs / sm.ks / sm.red / sm.vs / sm.gates are done
  // v_j (conv + SiLU) of value head h, and the gates, of each row of the block.
  if (tid < dv) {
    const int vc = 2 * G.keyDim + h * dv + tid;
    const int vcol = T.g * G.grp + 2 * dk + m * dv + tid;
#pragma unroll kPrologueUnroll
    for (int u = 0; u < GDN_RB; ++u)
      if (u < nb) sm.vs[u][tid] = conv_silu(A, G, T, vc, vcol, T.P0 + t0 + u);
  }
  for (int u = tid; u < nb; u += nt) {
    const float* bar = A.qkvz + (size_t)(T.row0 + t0 + u) * G.width + G.baCol + T.g * 2 * G.r;
    const float gate = -expf(A.aLog[h]) * softplusf_(bar[G.r + m] + A.dtBias[h]);
    sm.gates[u][0] = sigmoidf_(bar[m]);
    sm.gates[u][1] = expf(gate);
    sm.gates[u][2] = gate;
  }
#pragma unroll kPrologueUnroll
  for (int u = 0; u < (qk ? GDN_RB : 0); ++u) {
    float pq = 0.0f, pk = 0.0f, pqk = 0.0f;
    for (int i = tid; i < DK; i += nt) {
      float qv = 0.0f, kv = 0.0f;
      if (i < dk && u < nb) {
        const int cq = T.g * dk + i, ck = G.keyDim + T.g * dk + i;
        const int colq = T.g * G.grp + i;
        const int pos = T.P0 + t0 + u;
        qv = conv_silu(A, G, T, cq, colq, pos);
        kv = conv_silu(A, G, T, ck, colq + dk, pos);
      }
      sm.qs[u][i] = qv;
      sm.ks[u][i] = kv;
      pq += qv * qv;
      pk += kv * kv;
      pqk += qv * kv;
    }
    pq = warp_sum_to_lane0(pq);
    pk = warp_sum_to_lane0(pk);
    pqk = warp_sum_to_lane0(pqk);
    if (lane == 0) {
      sm.red[(3 * u + 0) * 32 + warp] = pq;
      sm.red[(3 * u + 1) * 32 + warp] = pk;
      sm.red[(3 * u + 2) * 32 + warp] = pqk;
    }
  }
  __syncthreads();
}

// Norm factors of row u of the block: fq (with 1/√d_k), fk, and kq = k̂·q̂.
__device__ __forceinline__ void qk_factors(const float* red, int u, int dk, float& fq, float& fk, float& kq) {
  const int nw = (nthreads() + 31) >> 5;
  float sq = 0.0f, sk = 0.0f, sqk = 0.0f;
  for (int w = 0; w < nw; ++w) {
    sq += red[(3 * u + 0) * 32 + w];
    sk += red[(3 * u + 1) * 32 + w];
    sqk += red[(3 * u + 2) * 32 + w];
  }
  fq = (1.0f / sqrtf((float)dk)) / sqrtf(sq + 1e-6f);
  fk = 1.0f / sqrtf(sk + 1e-6f);
  kq = sqk * fq * fk;
}

// One value head of a task: state column j in registers through pending fold and rows.
// ROWS = false: the fold kernel's build, without the row code (fewer registers).
// RELOAD: a row block after the first runs its prologue with the state out of registers (the
// 168-register build of gdn_recurrent_general); without it the state stays live (the row-by-row
// prefill oracle, ~246).
template <int DK, bool ROWS, bool RELOAD>
__device__ __forceinline__ void run_head(const Args& A, const Geo& G, const Task& T, int h, Smem<DK>& sm) {
  const int tid = tid_lin();
  const int j = tid;
  const int dk = A.dk, dv = A.dv;
  const bool active = j < dv;
  const int m = h - T.g * G.r;
  float* Scol = A.state + ((size_t)T.slot * A.hv + h) * (size_t)dk * dv + j;

  const bool needState = T.nrows > 0 || T.nPendFold > 0;
  if (!needState) return;
  // The state's DRAM fetch starts now, into L2; the registers load it after the prologue, so
  // the prologue's registers and the state's never overlap (3 CTAs of 128 threads per SM).
  const size_t headBytes = (size_t)dk * dv * sizeof(float);
  prefetch_l2(Scol - j, headBytes);
  if (T.nh > 1 && h + 1 < T.h0 + T.nh) prefetch_l2(Scol - j + (size_t)dk * dv, headBytes);  // group mode: the next head
  // Group mode: q and k of the key head are the same for its r value heads; when every row fits
  // one block, the first head's q, k and their norms stay in shared memory for the others.
  if (ROWS && T.nrows > 0) qk_prologue<DK>(A, G, T, h, 0, min(GDN_RB, T.nrows), sm, h == T.h0 || T.nrows > GDN_RB);

  float s[DK];
  load_col<DK>(s, Scol, &sm.dvStride, active);

  // Carried pending rows (or the fold kernel's accepted rows).
  if (T.nPendFold > 0) {
    const float* sh = T.pendK + (size_t)h * A.maxK * G.stashRow;
    fold_rows<DK>(s, sh, T.nPendFold, A, G, sm, j, active);
    // Mode 1 keeps the folded state: the new rows are not committed, the pending ones are.
    if (!T.commit || T.nrows == 0) store_col<DK>(s, Scol, &sm.dvStride, active);
  }
  if (!ROWS || T.nrows == 0) return;

  const int zcol = T.g * G.grp + 2 * dk + (G.r + m) * dv + j;  // qkvz column of z_j
  const float nw_j = active ? A.normWeight[j] : 0.0f;
  float* stashH = T.record ? A.stash + (size_t)T.slot * G.stashSeq + (size_t)h * A.maxK * G.stashRow : nullptr;
  float gam = 0.0f;

  for (int t0 = 0; t0 < T.nrows; t0 += GDN_RB) {
    const int nb = min(GDN_RB, T.nrows - t0);
    if (t0 > 0 && !RELOAD) {
      qk_prologue<DK>(A, G, T, h, t0, nb, sm);
    } else if (t0 > 0) {
      // The next block's prologue runs with no state in registers (it would not fit beside it):
      // commit: the state so far goes to memory and comes back; verify: S_0 comes back and the
      // block's earlier rows are replayed from the stash this CTA just wrote (the fold formula).
      if (T.commit) store_col<DK>(s, Scol, &sm.dvStride, active);
      qk_prologue<DK>(A, G, T, h, t0, nb, sm);
      load_col<DK>(s, Scol, &sm.dvStride, active);
      if (!T.commit) fold_rows<DK>(s, stashH, t0, A, G, sm, j, active);
    }
    // Rolled over the rows (register pressure): each row's raw o goes to sm.vs (the thread's own
    // v, read just before), its Σo² warp partials to sm.ored; the gated RMSNorm writes y from them
    // after one barrier (y may be a 16-bit row type: o stays f32 until then).
#pragma unroll 1
    for (int u = 0; u < nb; ++u) {
      const int t = t0 + u;
      float fq, fk, kq;
      qk_factors(sm.red, u, dk, fq, fk, kq);
      const float beta = sm.gates[u][0];
      const float alpha = sm.gates[u][1];
      gam += sm.gates[u][2];
      const float v = active ? sm.vs[u][j] : 0.0f;
      // a = Sᵀk / fk, b = Sᵀq / fq (raw k, q), on the state before this row.
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f, b0 = 0.f, b1 = 0.f, b2 = 0.f, b3 = 0.f;
      pass_fence();
#pragma unroll
      for (int i = 0; i < DK; i += 4) {
        const float4 kk = lds4(&sm.ks[u][i]);
        const float4 qq = lds4(&sm.qs[u][i]);
        a0 += s[i] * kk.x;
        a1 += s[i + 1] * kk.y;
        a2 += s[i + 2] * kk.z;
        a3 += s[i + 3] * kk.w;
        b0 += s[i] * qq.x;
        b1 += s[i + 1] * qq.y;
        b2 += s[i + 2] * qq.z;
        b3 += s[i + 3] * qq.w;
      }
      const float a = ((a0 + a1) + (a2 + a3)) * fk;
      const float bq = ((b0 + b1) + (b2 + b3)) * fq;
      const float uu = active ? beta * (v - alpha * a) : 0.0f;
      const float o = active ? alpha * bq + uu * kq : 0.0f;
      if (active) sm.vs[u][j] = o;
      const float osq = warp_sum_to_lane0(o * o);
      if ((tid & 31) == 0) sm.ored[u * 32 + (tid >> 5)] = osq;
      // S ← α S + k̂ uᵀ (not needed after the last row of a verify).
      if (T.commit || t + 1 < T.nrows) {
        const float ku = uu * fk;
        pass_fence();
#pragma unroll
        for (int i = 0; i < DK; i += 4) {
          const float4 kk = lds4(&sm.ks[u][i]);
          s[i] = alpha * s[i] + kk.x * ku;
          s[i + 1] = alpha * s[i + 1] + kk.y * ku;
          s[i + 2] = alpha * s[i + 2] + kk.z * ku;
          s[i + 3] = alpha * s[i + 3] + kk.w * ku;
        }
      }
      if (stashH) {
        float* srow = stashH + (size_t)t * G.stashRow;
        if (active) srow[dk + j] = uu;
        for (int i = tid; i < dk; i += nthreads()) srow[i] = sm.ks[u][i] * fk;
        if (tid == 0) srow[dk + dv] = gam;
      }
    }
    // Gated RMSNorm over d_v of each row of the block (sm.vs holds this thread's own raw o).
    __syncthreads();
    if (active) {
      const int nw = (nthreads() + 31) >> 5;
#pragma unroll 1
      for (int u = 0; u < nb; ++u) {
        const int row = T.row0 + t0 + u;
        float ss = 0.0f;
        for (int w = 0; w < nw; ++w) ss += sm.ored[u * 32 + w];
        const float inv = 1.0f / sqrtf(ss / (float)dv + A.eps);
        const float z = A.qkvz[(size_t)row * G.width + zcol];
        store_y(A, (size_t)row * A.hv * dv + (size_t)h * dv + j, nw_j * sm.vs[u][j] * inv * siluf_(z));
      }
    }
  }
  if (T.commit) store_col<DK>(s, Scol, &sm.dvStride, active);
}

template <int DK, bool ROWS = true, bool RELOAD = true>
__device__ __forceinline__ void run_task(const Args& A, const Geo& G, const Task& T) {
  __shared__ Smem<DK> sm;
  if (tid_lin() == 0) {
    sm.dvStride = A.dv;
    sm.dkRows = A.dk;
  }
  __syncthreads();
  for (int h = T.h0; h < T.h0 + T.nh; ++h) run_head<DK, ROWS, RELOAD>(A, G, T, h, sm);
  __syncthreads();  // every read of history by this CTA is done
  write_conv_state(A, G, T);
}

template <int DK>
__device__ __forceinline__ void recurrent_entry(const Args& A, int mode, int batch, int k) {
  int b, h;
  cta_coords(batch, A.hv, b, h);
  if (b >= batch || h >= A.hv) return;
  const Geo G = geo_of(A);
  if (mode == 1 && k > A.maxK) return;
  Task T;
  if (!make_task(A, G, b, h, A.rowStarts[b], k, mode == 0, mode == 1, T)) return;
  run_task<DK>(A, G, T);
}

// The write-on-accept fold of gdn_fold_general: S ← e^{γ_{n−1}} S + Σ_{t<n} e^{γ_{n−1}−γ_t} k_t u_tᵀ with
// the column in registers (run_head without its row code), and the ring.
template <int DK>
__device__ __forceinline__ void fold_entry(const Args& A, const uint32_t* naTab, int batch, int k) {
  int b, h, slot, na;
  if (!fold_cta(A, naTab, batch, k, b, h, slot, na)) return;
  const Geo G = geo_of(A);
  Task T;
  fold_task(A, G, b, h, slot, na, k, T);
  run_task<DK, false>(A, G, T);
}

}  // namespace gdn
