// Shared device code of the layer-std kernels (std-rows.cu, std-moe.cu, std-attention.cu,
// std-sample.cu). Layouts and semantics: ../KERNELS.md; the reference is src/*.cpu.ts. Every kernel
// file includes this header and each .cu is its own fatbin (metrale-build-kernels), so everything
// here is static / inline.
//
// Conventions of every kernel: blockDim.x is a multiple of 32 (warp collectives use the full
// mask); row loops stride by gridDim.x, so a grid smaller than the row count still covers every
// row; pointers are f32 / i32 device buffers, 16-byte vector paths are taken only when the row
// length and the base pointers allow them.
#pragma once

#include <cstdint>

#define STD_SHARED(type, name, count) __shared__ __align__(16) type name[count]

namespace stdk {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ int lane_id() { return (int)(threadIdx.x & 31u); }
__device__ __forceinline__ int warp_id() { return (int)(threadIdx.x >> 5); }
__device__ __forceinline__ int num_warps() { return (int)(blockDim.x >> 5); }

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

/** Sum over the warp (float, double or unsigned long long), returned to every lane. */
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

/**
 * Reduction over the CTA with `op` (warp shuffles, then the warp results in warp order, so the
 * result is deterministic), returned to every thread; `red` is 32 words of shared memory. Barriers
 * before and after: `red` may be reused at once.
 */
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, T* red, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  __syncthreads();
  if (lane_id() == 0) red[warp_id()] = v;
  __syncthreads();
  T total = red[0];
  for (int w = 1; w < num_warps(); w++) total = op(total, red[w]);
  return total;
}

/** Sum over the CTA (float, double or unsigned long long), returned to every thread. */
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* red) {
  return block_reduce(v, red, [](T x, T y) { return x + y; });
}

/** Max over the CTA (NaN-ignoring, as fmaxf), returned to every thread. */
__device__ __forceinline__ float block_max(float v, float* red) {
  return block_reduce(v, red, [](float x, float y) { return fmaxf(x, y); });
}

/** SiLU in f32: x / (1 + e^−x) (0 for x → −∞, x for x → +∞). */
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/** Batch position of a row: the last p in [0, batch) with rowStarts[p] <= row (rowStarts ascending). */
__device__ __forceinline__ int batch_pos_of_row(const int32_t* __restrict__ rowStarts, int batch, int row) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (rowStarts[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace stdk
