// Helpers shared by layer-ple's kernels (ple-project.cu, ple-gate.cu, altup.cu, gemma3n-rows.cu).
// Layouts and the math: ../KERNELS.md.
#pragma once

// Under the CPU emulator (tools/cuda-emu, METRALE_CUDA_EMU; test/gpu/emu/device.mjs) the element
// types, their conversions and core's elements.cuh come from the emulator's header.
#ifndef METRALE_CUDA_EMU
#include <metrale/elements.cuh>
#endif

#include <cstdint>
#include <type_traits>

namespace ple {

// Storage dtypes of rows read in place (embedding, table): 0 f32, 1 bf16, 2 f16.
__device__ __forceinline__ float load_elem(const void* base, size_t i, int dtype) {
  if (dtype == 1) {
    const uint32_t bits = reinterpret_cast<const uint16_t*>(base)[i];
    return __uint_as_float(bits << 16);
  }
  if (dtype == 2) return __half2float(reinterpret_cast<const __half*>(base)[i]);
  return reinterpret_cast<const float*>(base)[i];
}

// Batch position of a row: the last p with rowStarts[p] <= row (rowStarts has batch + 1 entries).
__device__ __forceinline__ int position_of_row(const int32_t* rowStarts, int batch, int row) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (rowStarts[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// True for a row of a padding position (slot -1) or past the step's rows: such rows are written as zeros.
__device__ __forceinline__ bool is_padding(const int32_t* slots, const int32_t* rowStarts, int batch, int row) {
  if (row >= rowStarts[batch]) return true;
  return slots[position_of_row(rowStarts, batch, row)] < 0;
}

// Sum over the block; every thread gets the total. `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  const int warps = (blockDim.x + 31) >> 5;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

// ---- rows of a row type (the Gemma 3n kernels) -------------------------------------------------

using bf16 = __nv_bfloat16;
using f16 = __half;

/** v as stored in T and read back: the rounding a kernel applies where Hugging Face holds a value in T. */
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, bf16>) return __bfloat162float(__float2bfloat16_rn(v));
  else return __half2float(__float2half_rn(v));
}

/** Element i of a T array as f32. */
template <typename T>
__device__ __forceinline__ float load(const T* p, size_t i) {
  return metrale::Element<T>::load(p, i);
}

/** Stores v as element i of a T array (round to nearest even). */
template <typename T>
__device__ __forceinline__ void store(T* p, size_t i, float v) {
  metrale::Element<T>::store(p, i, v);
}

}  // namespace ple

/**
 * Calls fn<T>(args…) with T the row type of dtype code `code` (0 f32, 1 bf16, 2 f16; the arguments
 * may name T); traps on any other code, as the CPU twins throw.
 */
#define PLE_BY_ROW_TYPE(code, fn, ...)   \
  do {                                   \
    switch (code) {                      \
      case metrale::kF32: {              \
        using T = float;                 \
        fn<T>(__VA_ARGS__);              \
      } break;                           \
      case metrale::kBF16: {             \
        using T = ::ple::bf16;           \
        fn<T>(__VA_ARGS__);              \
      } break;                           \
      case metrale::kF16: {              \
        using T = ::ple::f16;            \
        fn<T>(__VA_ARGS__);              \
      } break;                           \
      default: __trap();                 \
    }                                    \
  } while (0)
