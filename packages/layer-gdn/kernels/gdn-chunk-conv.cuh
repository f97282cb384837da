// The WY kernel's causal conv + SiLU of a chunk's channels into bf16 tiles (gdn-chunk-wy.cuh): the
// vectorised K = 4 path and the general one. A file of its own: it was the largest part of the WY
// kernel's instructions before its rework (docs/benchmarks.md, GDN prefill) and is tuned by itself.
#pragma once
#include "gdn-chunk-prims.cuh"
#include "gdn-chunk-seq.cuh"

namespace gdnp {

// Writes four conv outputs (f32) of row `row`, columns e..e+3, into a bf16 tile (P planes).
template <int P>
__device__ __forceinline__ void put4(unsigned char* tile, int planeBytes, int stride, int row, int e, float4 v) {
  uint32_t a[2], b[2];
  to_planes<P>(v.x, v.y, a);
  to_planes<P>(v.z, v.w, b);
  uint2* d = reinterpret_cast<uint2*>(tile + 2 * (row * stride + e));
  *d = make_uint2(a[0], b[0]);
  if (P == 2) *reinterpret_cast<uint2*>(reinterpret_cast<unsigned char*>(d) + planeBytes) = make_uint2(a[1], b[1]);
}
template <int P>
__device__ __forceinline__ void put1(unsigned char* tile, int planeBytes, int stride, int row, int e, float v) {
  uint32_t pl[2];
  to_planes<P>(v, 0.f, pl);
  bf16_t* d = reinterpret_cast<bf16_t*>(tile + 2 * (row * stride + e));
  *d = (bf16_t)(pl[0] & 0xffffu);
  if (P == 2) *reinterpret_cast<bf16_t*>(reinterpret_cast<unsigned char*>(d) + planeBytes) = (bf16_t)(pl[1] & 0xffffu);
}

// The vectorised conv at K = 4 when the threads are a multiple of the 4-channel groups: a
// thread's channels, their 16 weights (four float4) and its tile column are fixed, its row
// segments step by nt / nq, and a window's rows come from one pointer stepped by the row width.
// The general loop (conv_tile) was, with the SiLUs' range tests, the largest part of
// gdn_prefill_wy's instructions at the 80B shape (ncu): per work item a division (item / nq), 16
// scalar weight loads and a 64-bit index product per input row.
template <int P, typename ChOf, typename ColOf>
__device__ __forceinline__ void conv_tile_k4(const Args& A, const Geo& G, const Seq& s, int Pc, int n, int nch, ChOf chOf, ColOf colOf,
                                             unsigned char* tile, int planeBytes, int stride, int me, int nt, int split,
                                             unsigned char* tile2) {
  const int nq = nch >> 2;
  const int e = (me % nq) * 4, seg0 = me / nq, segStep = nt / nq;
  const int c = chOf(e), col = colOf(e);
  unsigned char* dst = e < split ? tile : tile2;
  const int de = e < split ? e : e - split;
  float4 w[4];  // w[u]: channel c + u, taps 0..3 (x: the oldest input)
#pragma unroll
  for (int u = 0; u < 4; ++u) w[u] = *reinterpret_cast<const float4*>(A.convWeight + (size_t)(c + u) * 4);
  for (int seg = seg0; seg < C / SEG; seg += segStep) {
    const int r0 = seg * SEG;
    float4 x[SEG + 3];  // input rows r0 − 3 .. r0 + SEG − 1 of the chunk
    if (Pc + r0 - 3 >= s.P0) {
      const float* src = A.qkvz + (size_t)(s.row0 + (Pc - s.P0) + r0 - 3) * G.width + col;
#pragma unroll
      for (int i = 0; i < SEG + 3; ++i) {
        x[i] = r0 - 3 + i < n ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
        src += G.width;
      }
    } else {
#pragma unroll
      for (int i = 0; i < SEG + 3; ++i) {
        const int rr = r0 - 3 + i;
        x[i] = rr < n ? conv_in4(A, G, s, c, col, Pc + rr) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int o = 0; o < SEG; ++o) {
      const int row = r0 + o;
      float4 acc;
      acc.x = w[0].x * x[o].x + w[0].y * x[o + 1].x + w[0].z * x[o + 2].x + w[0].w * x[o + 3].x;
      acc.y = w[1].x * x[o].y + w[1].y * x[o + 1].y + w[1].z * x[o + 2].y + w[1].w * x[o + 3].y;
      acc.z = w[2].x * x[o].z + w[2].y * x[o + 1].z + w[2].z * x[o + 2].z + w[2].w * x[o + 3].z;
      acc.w = w[3].x * x[o].w + w[3].y * x[o + 1].w + w[3].z * x[o + 2].w + w[3].w * x[o + 3].w;
      const float4 out = row < n ? make_float4(siluf_(acc.x), siluf_(acc.y), siluf_(acc.z), siluf_(acc.w)) : make_float4(0.f, 0.f, 0.f, 0.f);
      put4<P>(dst, planeBytes, stride, row, de, out);
    }
  }
}

// Conv + SiLU of `nch` channels (chunk-relative channel e → conv channel chOf(e), qkvz column
// colOf(e)) for the chunk's 64 rows (zeros past its n rows) into a bf16 tile. Work items: (4
// channels or 1, 8 rows), spread over threads [t0, t0 + nt).
template <int P, typename ChOf, typename ColOf>
__device__ __forceinline__ void conv_tile(const Args& A, const Geo& G, const Seq& s, int Pc, int n, int nch, bool vec, ChOf chOf, ColOf colOf,
                                          unsigned char* tile, int planeBytes, int stride, int tid, int t0, int nt, int split = 1 << 30,
                                          unsigned char* tile2 = nullptr) {
  // Channels e ≥ split go to tile2, column e − split (q and k of one key head in one pass).
  const int K = A.K;
  if (tid < t0 || tid >= t0 + nt) return;
  const int me = tid - t0;
  if (vec && K == 4 && nt % (nch >> 2) == 0) {
    conv_tile_k4<P>(A, G, s, Pc, n, nch, chOf, colOf, tile, planeBytes, stride, me, nt, split, tile2);
    return;
  }
  if (vec) {
    const int nq = nch >> 2;
    for (int item = me; item < nq * (C / SEG); item += nt) {
      const int seg = item / nq, e = (item - seg * nq) * 4;
      const int c = chOf(e), col = colOf(e);
      // Taps right-aligned to KMAX4 (zero weights first when K < 4): input row of tap tp is
      // row − 3 + tp, x index o + tp (compile-time indices: the window stays in registers).
      float w[4][KMAX4];
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int tp = 0; tp < KMAX4; ++tp) {
          const int tap = tp - (KMAX4 - K);
          w[u][tp] = tap >= 0 ? A.convWeight[(size_t)(c + u) * K + tap] : 0.f;
        }
      const int r0 = seg * SEG;
      float4 x[SEG + KMAX4 - 1];
      if (Pc + r0 - (K - 1) >= s.P0) {
        // Every input is a row of this step (all but a sequence's first rows): one row pointer, no
        // per-load choice between the step, the conv stash and the ring.
        const float* src = A.qkvz + (size_t)(s.row0 + (Pc - s.P0) + r0 - (KMAX4 - 1)) * G.width + col;
#pragma unroll
        for (int i = 0; i < SEG + KMAX4 - 1; ++i) {
          const int rr = r0 - (KMAX4 - 1) + i;
          x[i] = (rr < n && rr >= r0 - (K - 1)) ? *reinterpret_cast<const float4*>(src + (size_t)i * G.width) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      } else {
#pragma unroll
        for (int i = 0; i < SEG + KMAX4 - 1; ++i) {
          const int rr = r0 - (KMAX4 - 1) + i;  // chunk-relative row of input i
          x[i] = (rr < n && rr >= r0 - (K - 1)) ? conv_in4(A, G, s, c, col, Pc + rr) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int o = 0; o < SEG; ++o) {
        const int row = r0 + o;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int tp = 0; tp < KMAX4; ++tp) {
          acc.x += w[0][tp] * x[o + tp].x;
          acc.y += w[1][tp] * x[o + tp].y;
          acc.z += w[2][tp] * x[o + tp].z;
          acc.w += w[3][tp] * x[o + tp].w;
        }
        float4 out = row < n ? make_float4(siluf_(acc.x), siluf_(acc.y), siluf_(acc.z), siluf_(acc.w)) : make_float4(0.f, 0.f, 0.f, 0.f);
        if (e < split) put4<P>(tile, planeBytes, stride, row, e, out);
        else put4<P>(tile2, planeBytes, stride, row, e - split, out);
      }
    }
  } else {
    for (int item = me; item < nch * (C / SEG); item += nt) {
      const int seg = item / nch, e = item - seg * nch;
      const int c = chOf(e), col = colOf(e);
      const float* w = A.convWeight + (size_t)c * K;
      for (int o = 0; o < SEG; ++o) {
        const int row = seg * SEG + o;
        float v = 0.f;
        if (row < n) {
          float acc = 0.f;
          for (int tap = 0; tap < K; ++tap) acc += w[tap] * conv_in(A, G, s, c, col, Pc + row - K + 1 + tap);
          v = siluf_(acc);
        }
        if (e < split) put1<P>(tile, planeBytes, stride, row, e, v);
        else put1<P>(tile2, planeBytes, stride, row, e - split, v);
      }
    }
  }
}

}  // namespace gdnp
