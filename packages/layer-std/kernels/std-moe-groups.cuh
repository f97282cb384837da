// The int32 `groups` buffer std_moe_group writes (moeGroupsLength ints; KERNELS.md), as the expert
// kernels of std-moe.cu and std-moe-gemm.cu read it.
#pragma once

#include <cstdint>

namespace stdk {

struct Groups {
  int nActive, nInvalid, nValid;
  const int32_t* expert;  // [nActive] the experts chosen, ascending
  const int32_t* start;   // [nActive + 1] start of each one's entries in `order`
  const int32_t* order;   // [nValid] entries rj by expert then rj; then the nInvalid ids outside [0, E)
  __device__ __forceinline__ Groups(const int32_t* g, int E)
      : nActive(g[0]), nInvalid(g[1]), nValid(g[2]), expert(g + 3), start(g + 3 + E), order(g + 4 + 2 * E) {}
};

}  // namespace stdk
