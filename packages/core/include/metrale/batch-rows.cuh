// Where a row of a step's packed rows belongs: the batch position whose rows hold it, by the
// rows' starts (`rowStarts[p]`, ascending: sequence p's first row). Shared by the packages'
// attention kernels (layer-std's, layer-dsa's); plain code, so the CPU emulator (tools/cuda-emu)
// compiles it as nvcc does.
#pragma once

#include <cstdint>

namespace metrale {

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

}  // namespace metrale
