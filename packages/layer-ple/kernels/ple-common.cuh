// Helpers shared by layer-ple's kernels (ple-project.cu, ple-gate.cu, altup.cu, gemma3n-rows.cu).
// Layouts and the math: ../KERNELS.md.
#pragma once

// Under the CPU emulator (tools/cuda-emu, METRALE_CUDA_EMU; test/gpu/emu/device.mjs) the element
// types, their conversions and core's elements.cuh come from the emulator's header.
#ifndef METRALE_CUDA_EMU
#include <metrale/elements.cuh>
#endif

#include <cstdint>

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

// Row types, their rounding and typed loads / stores: core's <metrale/elements.cuh>.
using metrale::bf16;
using metrale::f16;
using metrale::load_value;
using metrale::round_to;
using metrale::store_value;

}  // namespace ple
