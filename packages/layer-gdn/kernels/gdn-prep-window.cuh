// The two-kernel preps' conv (gdn-decode-prep.cuh, gdn-verify-prep.cuh): a lane takes 4 channels
// of a key head at a time and moves every input as a float4 — the window's positions, the conv
// weights, the committed entries — so a key head's q and k fit one warp (d_k ≤ 128) and its norms
// and Gram entries reduce inside it. Needs d_k and d_v multiples of 4 (a group of 4 channels then
// never straddles the key head's q, k and v parts, and every row is 16-byte aligned).
#pragma once
#include "gdn-common.cuh"
#include "gdn-fast.cuh"

namespace gdn {
namespace prep {

__device__ __forceinline__ void st4(float* p, const float4& v) { *reinterpret_cast<float4*>(p) = v; }
#ifndef GDN_PREP_FAST_SILU
#define GDN_PREP_FAST_SILU 1
#endif
// SiLU of the conv outputs through __expf and __fdividef (GDN_PREP_FAST_SILU 0: expf and a
// division): faster write-on-accept verify and carried cycle on the H200 (docs/benchmarks.md, GDN
// decode). The prefill's siluf_ (gdn-chunk-base.cuh) has since moved to ex2/rcp.approx.ftz; not
// measured here.
__device__ __forceinline__ float prep_silu(float x) {
#if GDN_PREP_FAST_SILU
  return __fdividef(x, 1.0f + __expf(-x));
#else
  return siluf_(x);
#endif
}
__device__ __forceinline__ float4 silu4(const float4& x) { return make_float4(prep_silu(x.x), prep_silu(x.y), prep_silu(x.z), prep_silu(x.w)); }
__device__ __forceinline__ float dot4(const float4& a, const float4& b) { return fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, a.w * b.w))); }

// Conv channel of channel l of key head g (its q, k, then the v of its r value heads); its qkvz
// column is g·grp + l (a key head's q, k and v are contiguous in its group of the row).
__device__ __forceinline__ int key_head_channel(const Args& A, const Geo& G, int g, int l) {
  return l < A.dk ? g * A.dk + l : l < 2 * A.dk ? G.keyDim + g * A.dk + l - A.dk : 2 * G.keyDim + g * G.r * A.dv + l - 2 * A.dk;
}

// NW consecutive conv input positions of one slot: where position w reads (src: a qkvz row when
// `row`, at the channel's column; else a conv stash or ring row, at its channel; null: zero) and
// where the step commits it (dst, at its channel; null: nowhere). Each prep builds its own (the
// rule is gdn-common.cuh conv_source's; what is committed where is the prep's).
template <int NW>
struct Window {
  const float* src[NW];
  bool row[NW];
  float* dst[NW];
};

// Conv + SiLU of key head g's channels l .. l + 3 (l a multiple of 4) for ROWS rows, zero from
// row `rows` on: row t's tap j reads window position LEAD + t + j (tap K − 1 the row itself). Every
// load is issued before the first use; then the window's entries go to their dst. Position w of
// the window is P0 − K + 1 − LEAD + w for a step at P0 (conv kernel K).
template <int ROWS, int LEAD, int NW>
__device__ __forceinline__ void conv_group(const Args& A, const Geo& G, const Window<NW>& W, int g, int l, int rows, float4 (&out)[ROWS]) {
  static_assert(NW >= LEAD + ROWS + fast::kMaxConv - 1, "the window holds every tap of every row");
  const int c = key_head_channel(A, G, g, l), col = g * G.grp + l;
  float4 x[NW];
#pragma unroll
  for (int w = 0; w < NW; ++w) x[w] = W.src[w] ? fast::ld4s(W.src[w] + (W.row[w] ? col : c)) : fast::f4(0.0f);
  // Tap t of channel c + e at convWeight[(c + e)·K + t]: 4·K floats from c·K, float4 loads when K = 4.
  float wt[4][fast::kMaxConv];
  const float* cw = A.convWeight + (size_t)c * A.K;
  if (A.K == fast::kMaxConv) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float4 v = fast::ld4s(cw + 4 * e);
      wt[e][0] = v.x, wt[e][1] = v.y, wt[e][2] = v.z, wt[e][3] = v.w;
    }
  } else {
    // K < kMaxConv: taps from K on weigh nothing (the window starts at P0 − K + 1 − LEAD, so tap
    // K − 1 meets the row; what lies past it is finite or zero).
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int t = 0; t < fast::kMaxConv; ++t) wt[e][t] = t < A.K ? cw[e * A.K + t] : 0.0f;
  }
#pragma unroll
  for (int t = 0; t < ROWS; ++t) {
    float4 acc = fast::f4(0.0f);
#pragma unroll
    for (int j = 0; j < fast::kMaxConv; ++j) {
      const float4 v = x[LEAD + t + j];
      acc = make_float4(fmaf(wt[0][j], v.x, acc.x), fmaf(wt[1][j], v.y, acc.y), fmaf(wt[2][j], v.z, acc.z), fmaf(wt[3][j], v.w, acc.w));
    }
    out[t] = t < rows ? silu4(acc) : fast::f4(0.0f);
  }
#pragma unroll
  for (int w = 0; w < NW; ++w)
    if (W.dst[w]) st4(W.dst[w] + c, x[w]);
}

}  // namespace prep
}  // namespace gdn
