// Where a prefill CTA's rows come from: its sequence (slot, committed length, pending rows), the
// launch's chunk range of a piece, and the conv inputs by position (step rows, conv stash, ring).
#pragma once
#include "gdn-chunk-base.cuh"

namespace gdnp {

// Conv stash row of position p (a ring by position, KERNELS.md).
__device__ __forceinline__ long long cs_index(const Args& A, const Geo& G, int slot, int p, int c) {
  return ((long long)slot * G.csRows + (p % G.csRows)) * G.convDim + c;
}

// The sequence of a CTA's work: batch position b, its committed length P0 = seqLens[b] (pending
// rows included), the first pending position L, its rows in the step.
struct Seq {
  int b, slot, P0, L, row0, nrows;
};

__device__ __forceinline__ bool seq_of(const Args& A, int b, Seq& s) {
  s.b = b;
  s.slot = A.slots[b];
  if (s.slot < 0) return false;
  s.P0 = A.seqLens[b];
  const int nPend = A.pending ? (int)A.pending[s.slot] : 0;
  s.L = s.P0 - nPend;
  s.row0 = A.rowStarts[b];
  s.nrows = A.rowStarts[b + 1] - s.row0;
  return true;
}

// Pre-conv input of channel c (qkvz column col) at position p: the step's rows, pending rows
// (conv stash), or history (ring).
__device__ __forceinline__ float conv_in(const Args& A, const Geo& G, const Seq& s, int c, int col, int p) {
  if (p < 0) return 0.0f;
  if (p >= s.P0) return A.qkvz[(size_t)(s.row0 + (p - s.P0)) * G.width + col];
  if (p >= s.L) return A.convStash[cs_index(A, G, s.slot, p, c)];
  return A.convRing[((size_t)s.slot * A.K + (p % A.K)) * G.convDim + c];
}
__device__ __forceinline__ float4 conv_in4(const Args& A, const Geo& G, const Seq& s, int c, int col, int p) {
  if (p < 0) return make_float4(0.f, 0.f, 0.f, 0.f);
  if (p >= s.P0) return *reinterpret_cast<const float4*>(A.qkvz + (size_t)(s.row0 + (p - s.P0)) * G.width + col);
  if (p >= s.L) return *reinterpret_cast<const float4*>(A.convStash + cs_index(A, G, s.slot, p, c));
  return *reinterpret_cast<const float4*>(A.convRing + ((size_t)s.slot * A.K + (p % A.K)) * G.convDim + c);
}


// The launch's chunks [lo, hi) of a sequence of n rows: [chunk0, chunkEnd) clipped to its chunks.
__device__ __forceinline__ void launch_chunks(const Args& A, int n, int& lo, int& hi) {
  const int nc = n > 0 ? (n + C - 1) / C : 0;
  lo = min(nc, A.chunk0);
  hi = min(nc, A.chunkEnd);
}

// The (sequence, chunk) of CTA x: the launch's chunks of each real sequence, in batch order.
__device__ __forceinline__ bool chunk_of(const Args& A, int x, int& b, int& c) {
  for (int i = 0; i < A.batch; ++i) {
    int lo, hi;
    launch_chunks(A, A.rowStarts[i + 1] - A.rowStarts[i], lo, hi);
    if (x < hi - lo) {
      b = i;
      c = lo + x;
      return true;
    }
    x -= hi - lo;
  }
  return false;
}

}  // namespace gdnp
