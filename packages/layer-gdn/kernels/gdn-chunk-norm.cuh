// Kernel 3 of the chunked prefill (gdn_prefill_norm, entry point in gdn-chunk.cu): the gated
// RMSNorm of the scan's raw O rows (A.o, f32) into y in the row type, where the scan did not fuse
// it; one CTA per step row. With an f32 y, o is y and the norm runs in place.
#pragma once
#include "gdn-chunk-seq.cuh"

namespace gdnp {

// The step row of norm CTA x in a piece (KERNELS.md "Pieces") and its batch position b: the rows
// of the launch's chunks of each sequence, in batch order; false past them.
__device__ __forceinline__ bool piece_row(const Args& A, int x, int& row, int& b) {
  for (int i = 0; i < A.batch; ++i) {
    const int r0 = A.rowStarts[i], n = A.rowStarts[i + 1] - r0;
    int lo, hi;
    launch_chunks(A, n, lo, hi);
    const int rlo = C * lo, rhi = min(n, C * hi);  // rows of the chunks (the last may be short)
    if (x < rhi - rlo) {
      row = r0 + rlo + x;
      b = i;
      return true;
    }
    x -= max(0, rhi - rlo);
  }
  return false;
}

// The batch position b of a step row (rowStarts ascending); false past the step's rows.
__device__ __forceinline__ bool row_position(const Args& A, int row, int& b) {
  if (row >= A.rows || row >= A.rowStarts[A.batch]) return false;
  int lo = 0, hi = A.batch;  // find b with rowStarts[b] ≤ row < rowStarts[b + 1]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (A.rowStarts[mid] <= row) lo = mid;
    else hi = mid;
  }
  while (lo < A.batch && A.rowStarts[lo + 1] <= row) ++lo;  // empty positions
  b = lo;
  return lo < A.batch;
}

__device__ __forceinline__ void norm_row(const Args& A) {
  const Geo G = geo_of(A);
  // A whole step: CTA x takes row x; a piece: the x-th row of its chunks. Padding positions' rows
  // are left alone.
  const bool whole = A.chunk0 == 0 && (long long)C * A.chunkEnd >= A.rows;
  int row = blockIdx.x, b;
  if (!(whole ? row_position(A, row, b) : piece_row(A, blockIdx.x, row, b)) || A.slots[b] < 0) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int dk = A.dk, dv = A.dv;
  const size_t y0 = (size_t)row * A.hv * dv;
  const float* orow = A.o + y0;
  const float* zrow = A.qkvz + (size_t)row * G.width;  // + z_col(h): z of head h
  if (dv == 128 && dk % 2 == 0 && G.width % 4 == 0 && G.grp % 4 == 0) {
    // A float4 of o and z per lane and head; a warp loads its heads NH at a time before any store
    // (o may be y, read and written in place: the compiler cannot hoist the next head's loads itself).
    constexpr int NH = 4;
    const float4 w4 = reinterpret_cast<const float4*>(A.normWeight)[lane];
    for (int h0 = warp; h0 < A.hv; h0 += NH * nw) {
      float4 yv[NH], zv[NH];
#pragma unroll
      for (int u = 0; u < NH; ++u) {
        const int h = h0 + u * nw;
        if (h < A.hv) {
          yv[u] = reinterpret_cast<const float4*>(orow + (size_t)h * dv)[lane];
          zv[u] = reinterpret_cast<const float4*>(zrow + z_col(A, G, h))[lane];
        }
      }
#pragma unroll
      for (int u = 0; u < NH; ++u) {
        const int h = h0 + u * nw;
        if (h >= A.hv) continue;
        const float4 v = yv[u], z = zv[u];
        float ss = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float inv = 1.0f / sqrtf(ss / (float)dv + A.eps);
        const float4 out = make_float4(w4.x * v.x * inv * siluf_(z.x), w4.y * v.y * inv * siluf_(z.y), w4.z * v.z * inv * siluf_(z.z),
                                       w4.w * v.w * inv * siluf_(z.w));
        const size_t at = y0 + (size_t)h * dv + 4 * lane;
        if (A.yDtype == 0) {
          reinterpret_cast<float4*>(A.y + at)[0] = out;
        } else {
          store_y(A, at, out.x), store_y(A, at + 1, out.y), store_y(A, at + 2, out.z), store_y(A, at + 3, out.w);
        }
      }
    }
    return;
  }
  for (int h = warp; h < A.hv; h += nw) {
    const float* orh = orow + (size_t)h * dv;
    float ss = 0.f;
    for (int j = lane; j < dv; j += 32) ss += orh[j] * orh[j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = 1.0f / sqrtf(ss / (float)dv + A.eps);
    const float* zr = zrow + z_col(A, G, h);
    for (int j = lane; j < dv; j += 32) store_y(A, y0 + (size_t)h * dv + j, A.normWeight[j] * orh[j] * inv * siluf_(zr[j]));
  }
}

}  // namespace gdnp
