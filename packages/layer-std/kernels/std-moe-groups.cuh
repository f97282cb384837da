// The int32 `groups` buffer std_moe_group writes (moeGroupsLength ints; KERNELS.md), as the expert
// kernels of std-moe.cu, std-moe-gemm.cu and std-moe-gemm-16bit.cu read it, the tile a grouped
// GEMM's CTA takes, and the same buffer written by one CTA for the few entries of a few-row step
// (the route's last CTA, std-moe-route.cu).
#pragma once

#include <cstdint>

#include "std-common.cuh"

namespace stdk {

struct Groups {
  int nActive, nInvalid, nValid;
  const int32_t* expert;  // [nActive] the experts chosen, ascending
  const int32_t* start;   // [nActive + 1] start of each one's entries in `order`
  const int32_t* order;   // [nValid] entries rj by expert then rj; then the nInvalid ids outside [0, E)
  __device__ __forceinline__ Groups(const int32_t* g, int E)
      : nActive(g[0]), nInvalid(g[1]), nValid(g[2]), expert(g + 3), start(g + 3 + E), order(g + 4 + 2 * E) {}
};

/**
 * Which (expert slot, BM-entry tile) the CTA of grid column `t` takes (the tiles of the experts in
 * the order chosen): warp 0 scans the experts' tile counts. False past the last tile.
 */
template <int BM>
__device__ __forceinline__ bool find_tile(const Groups& gr, int t, int* shared3, int& a, int& q0, int& q1) {
  if (warp_id() == 0) {
    const int lane = lane_id();
    int base = 0, found = -1, first = 0;
    for (int a0 = 0; a0 < gr.nActive && found < 0; a0 += 32) {
      const int i = a0 + lane;
      const int tiles = i < gr.nActive ? (gr.start[i + 1] - gr.start[i] + BM - 1) / BM : 0;
      int incl = tiles;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(kFull, incl, o);
        if (lane >= o) incl += v;
      }
      const int excl = incl - tiles;
      const bool mine = tiles > 0 && t >= base + excl && t < base + incl;
      const unsigned who = __ballot_sync(kFull, mine);
      if (who) {
        const int src = __ffs(who) - 1;
        found = a0 + src;
        first = __shfl_sync(kFull, gr.start[min(i, gr.nActive - 1)] + (t - base - excl) * BM, src);
      }
      base += __shfl_sync(kFull, incl, 31);
    }
    if (lane == 0) {
      shared3[0] = found;
      shared3[1] = first;
      shared3[2] = found >= 0 ? min(first + BM, gr.start[found + 1]) : 0;
    }
  }
  __syncthreads();
  a = shared3[0], q0 = shared3[1], q1 = shared3[2];
  return a >= 0;
}

/** CTAs of tile slot 0: zeros for the entries whose expert id is outside the experts, columns n0 … n0 + NC − 1. */
template <int NC, typename T>
__device__ __forceinline__ void zero_invalid(const Groups& gr, T* __restrict__ out, int N, int n0) {
  for (int q = threadIdx.x / NC; q < gr.nInvalid; q += blockDim.x / NC) {
    const int n = n0 + threadIdx.x % NC;
    if (n < N) store_value(out, (size_t)gr.order[gr.nValid + q] * N + n, 0.f);
  }
}

/**
 * A grouped GEMM CTA's start (grid [tile slots, column blocks of NC]): the CTAs of tile slot 0 zero
 * the entries outside the experts in columns n0 … n0 + NC − 1; then the CTA's tile (find_tile),
 * entries q0 … q1 − 1 of `order`, all of expert e. False past the last tile.
 */
template <int BM, int NC, typename T>
__device__ __forceinline__ bool start_gemm_tile(const Groups& gr, T* __restrict__ out, int N, int n0, int& e, int& q0, int& q1) {
  __shared__ int tileOf[3];
  if (blockIdx.x == 0) zero_invalid<NC>(gr, out, N, n0);
  int a;
  if (!find_tile<BM>(gr, blockIdx.x, tileOf, a, q0, q1)) return false;
  e = gr.expert[a];
  return true;
}

/** Entries group_few takes: the few-row route forms' rows × (slots + the shared expert's). */
constexpr int kFewGroupEntries = 8 * 33;

/**
 * std_moe_group's buffer for n ≤ kFewGroupEntries entries `ids`, by the whole CTA (`key`: 2n ints of
 * shared memory). Each entry's place is the count of entries before it in (expert, rj) order, ids
 * outside [0, E) after every expert in rj order; an expert's first entry also counts the distinct
 * experts before it for its slot in `expert` / `start`. Quadratic in n, which is a few hundred at
 * most: no scan and no per-expert counts. The same buffer as std_moe_group's.
 */
__device__ __forceinline__ void group_few(const int32_t* ids, int n, int E, int32_t* __restrict__ groups, int* key) {
  int* first = key + n;  // 1 where no earlier entry has the same expert
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int e = ids[i];
    key[i] = e >= 0 && e < E ? e : E;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int ki = key[i];
    int f = ki < E;
    for (int j = 0; j < i && f; j++) f = key[j] != ki;
    first[i] = f;
  }
  __syncthreads();
  int32_t* order = groups + 4 + 2 * E;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int ki = key[i];
    int place = 0, before = 0;
    for (int j = 0; j < n; j++) {
      const int kj = key[j];
      place += kj < ki || (kj == ki && j < i);
      before += kj < ki && first[j];
    }
    order[place] = i;
    if (first[i]) groups[3 + before] = ki, groups[3 + E + before] = place;
  }
  if (threadIdx.x == 0) {
    int valid = 0, active = 0;
    for (int j = 0; j < n; j++) valid += key[j] < E, active += first[j];
    groups[0] = active, groups[1] = n - valid, groups[2] = valid, groups[3 + E + active] = valid;
  }
}

}  // namespace stdk
