// The passes over a column of S (the math of gdn-fast.cuh): pass A (the dot products a_t, b_t, the
// pending fold on the way) and pass B (the commit), from the shared copy. Its own file: the inner
// loops, where the registers and the time go.
#pragma once
#include "gdn-common.cuh"
#include "gdn-fast-layout.cuh"
#include "gdn-fast-source.cuh"

namespace gdn {
namespace fast {

// ---- the passes over a column of S --------------------------------------------------------------

// s ← c s + Σ_{m<N} keys[m][i0 .. i0 + 3] w[m] on a group of 4 rows of a column (keys: [N][dkp] in
// shared memory): the pending fold of pass A and the commit of pass B.
template <int N>
__device__ __forceinline__ void rank_update4(float (&s)[4], float c, const float* keys, int dkp, int i0, const float* w) {
#pragma unroll
  for (int q = 0; q < 4; ++q) s[q] *= c;
#pragma unroll
  for (int m = 0; m < N; ++m) {
    const float4 kk = ld4s(keys + m * dkp + i0);
    s[0] = fmaf(kk.x, w[m], s[0]);
    s[1] = fmaf(kk.y, w[m], s[1]);
    s[2] = fmaf(kk.z, w[m], s[2]);
    s[3] = fmaf(kk.w, w[m], s[3]);
  }
}

// Dot products (TB rows) and the pending fold (MB terms) on a group of 4 rows i0..i0+3 of the
// column: s ← c0 s + Σ_m kf[m][i] uf[m]; a_t += s kd[t][i]; b_t += s qd[t][i].
template <int TB, int MB>
struct PassA {
  float a[TB > 0 ? TB : 1], b[TB > 0 ? TB : 1];
  float uf[MB > 0 ? MB : 1];
  float c0;

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int t = 0; t < TB; ++t) a[t] = b[t] = 0.0f;
  }

  __device__ __forceinline__ void group(float (&s)[4], int i0, const Lay& L, int dkp) {
    if (MB > 0) rank_update4<MB>(s, c0, L.kf, dkp, i0, uf);
#pragma unroll
    for (int t = 0; t < TB; ++t) {
      const float4 kk = ld4s(L.kd + t * dkp + i0);
      const float4 qq = ld4s(L.qd + t * dkp + i0);
      a[t] = fmaf(s[0], kk.x, a[t]);
      b[t] = fmaf(s[0], qq.x, b[t]);
      a[t] = fmaf(s[1], kk.y, a[t]);
      b[t] = fmaf(s[1], qq.y, b[t]);
      a[t] = fmaf(s[2], kk.z, a[t]);
      b[t] = fmaf(s[2], qq.z, b[t]);
      a[t] = fmaf(s[3], kk.w, a[t]);
      b[t] = fmaf(s[3], qq.w, b[t]);
    }
  }
};

// The commit of a block on 4 rows: s ← cl s + Σ_t kd[t][i] ub[t].
template <int TB>
__device__ __forceinline__ void commit_group(float (&s)[4], int i0, const Lay& L, int dkp, float cl, const float (&ub)[TB]) {
  rank_update4<TB>(s, cl, L.kd, dkp, i0, ub);
}

// Per-thread view of its column: j, the global column pointer (S[i][j] at g[i·dv]), d_k, d_v.
// DKC, DVC: d_k, d_v known at compile time (the 80B shape, 128 × 128: row offsets become
// immediates, so a pass keeps one address register instead of one per row in flight), or 0.
template <int DKC, int DVC>
struct Col {
  static constexpr int kUnroll = DKC ? 2 : 1;  // row groups of 4 per loop trip (smem passes)
  float* g;
  int j, dk_, dv_;
  bool active;
  __device__ __forceinline__ int dk() const { return DKC ? DKC : dk_; }
  __device__ __forceinline__ int dv() const { return DVC ? DVC : dv_; }
  __device__ __forceinline__ int dkp() const { return DKC ? pad4(DKC) : pad4(dk_); }
};

__device__ __forceinline__ void store_rows(float* p, int stride, int i0, int dk, const float (&s)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (i0 + q < dk) p[(size_t)(i0 + q) * stride] = s[q];
}

// Pass A from the shared copy. first: wait for each chunk of the copy before its rows.
// wHold: the folded values go back to the shared copy; wGlob: and to global memory.
template <int TB, int MB, class Cl>
__device__ __forceinline__ void pass_a(SmemSrc& src, PassA<TB, MB>& P, const Cl& C, const Lay& L, bool first, bool wHold, bool wGlob) {
  const int dk = C.dk(), dv = C.dv(), dkp = C.dkp();
  const float* col = src.S + C.j;
  for (int c = 0; c < kNChunk; ++c) {
    const int r0 = c * src.cr, r1 = min(dk, r0 + src.cr);
    if (r1 <= r0) break;
    if (first) src.wait(c);
#pragma unroll(Cl::kUnroll)
    for (int i0 = r0; i0 < r1; i0 += 4) {
      float s[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) s[q] = (C.active && i0 + q < dk) ? col[(i0 + q) * dv] : 0.0f;
      P.group(s, i0, L, dkp);
      if (C.active) {
        if (wHold) store_rows(src.S + C.j, dv, i0, dk, s);
        if (wGlob) store_rows(C.g, dv, i0, dk, s);
      }
    }
  }
}

// Pass B from the shared copy: the block's commit, into the shared copy (toHold) or global memory.
template <int TB, class Cl>
__device__ __forceinline__ void pass_b(SmemSrc& src, const Cl& C, const Lay& L, float cl, const float (&ub)[TB], bool toHold) {
  const int dk = C.dk(), dv = C.dv(), dkp = C.dkp();
  const float* col = src.S + C.j;
  float* out = toHold ? src.S + C.j : C.g;
  if (!C.active) return;
#pragma unroll(Cl::kUnroll * 2)
  for (int i0 = 0; i0 < dk; i0 += 4) {
    float s[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) s[q] = (i0 + q < dk) ? col[(i0 + q) * dv] : 0.0f;
    commit_group<TB>(s, i0, L, dkp, cl, ub);
    store_rows(out, dv, i0, dk, s);
  }
}

}  // namespace fast
}  // namespace gdn
