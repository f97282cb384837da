// std_moe_group (src/moe-kernels.ts; reference groupCpu in src/moe.cpu.ts; KERNELS.md): the
// (row, slot) entries of a step grouped by expert, on the device (no host sync, graph-safe), into
// the int32 `groups` buffer the expert kernels read (std-moe-groups.cuh):
//   [0] experts chosen (nActive), [1] entries outside [0, E) (nInvalid), [2] entries inside (nValid),
//   [3, 3 + nActive) the experts chosen, ascending; [3 + E, 3 + E + nActive] where each one's
//   entries start in `order`, then nValid; [4 + 2E, …) `order`: the entries rj of each expert in
//   ascending rj, expert after expert, then the ids outside the experts in ascending rj.
// Nothing else of the buffer is written.
//
// One CTA of up to 1024 threads (groupLaunch: a warp per 64 entries). The entries are cut into W
// contiguous segments, one per warp (W = the warps, or fewer where the per-warp counts of E
// experts would not fit: W · E ≤ 8192): each warp counts its segment's entries per expert, the
// counts are turned into each (warp, expert)'s first place (experts in order, warps in order within
// an expert), and each warp places its segment 32 entries at a time (lanes with the same expert
// found by __match_any_sync, ranked by lane). The result is the one order above whatever the
// scheduling, and the same as one warp walking every entry.
//
// Written against the CPU emulator too (tools/cuda-emu, METRALE_CUDA_EMU: test/gpu/emu/device.mjs),
// so it needs nothing of std-common.cuh.
#ifdef METRALE_CUDA_EMU
#define GROUP_SHARED(type, name, count) type* name = ::cuda_emu::static_smem<type>((count), __LINE__)
#else
#include <cstdint>
#define GROUP_SHARED(type, name, count) __shared__ type name[count]
#endif

namespace {

constexpr int kMaxExperts = 2048;
/** Ints of the per-(warp, expert) counts: W · E ≤ this. */
constexpr int kCountInts = 8192;
constexpr unsigned kAll = 0xffffffffu;

/** A lane's entry of a 32-entry chunk of a segment ending at s1, and the lanes with the same expert. */
struct Entry {
  int rj, e;
  bool in, valid;
  unsigned peers;
};

__device__ __forceinline__ Entry entry_at(const int32_t* __restrict__ ids, int base, int s1, int lane, int E) {
  Entry x;
  x.rj = base + lane;
  x.in = x.rj < s1;
  x.e = x.in ? ids[x.rj] : -1;
  x.valid = x.in && x.e >= 0 && x.e < E;
  x.peers = __match_any_sync(kAll, !x.in ? -2 : x.valid ? x.e : -1);
  return x;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024) std_moe_group(const int32_t* __restrict__ ids, int32_t* __restrict__ groups, int rows, int experts,
                                                                 int topK) {
  GROUP_SHARED(int, place, kCountInts);          // [W][E]: a segment's entries per expert, then their first place
  GROUP_SHARED(int, total, kMaxExperts);         // entries per expert, then its first place
  GROUP_SHARED(int, outside, 33);                // a segment's ids outside the experts, then their first place; [32] the total
  GROUP_SHARED(unsigned long long, red, 32);
  const int E = experts;
  if (E > kMaxExperts || E < 1 || (blockDim.x & 31) != 0) __trap();
  if (blockIdx.x != 0) return;  // one CTA does it all
  const int n = rows * topK, tid = threadIdx.x, B = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = B >> 5;
  const int W = min(nw, max(1, kCountInts / E));
  const int seg = (n + W - 1) / W;
  const int s0 = min(n, warp * seg), s1 = min(n, s0 + seg);  // this warp's segment (warps ≥ W: empty)
  for (int i = tid; i < W * E; i += B) place[i] = 0;
  for (int e = tid; e < E; e += B) total[e] = 0;
  if (tid < 33) outside[tid] = 0;
  __syncthreads();

  // Each warp counts its segment: one lane per distinct expert of a 32-entry chunk adds its peers.
  if (warp < W) {
    int* mine = place + warp * E;
    int out = 0;
    for (int base = s0; base < s1; base += 32) {
      const Entry x = entry_at(ids, base, s1, lane, E);
      if (x.valid && (x.peers & ((1u << lane) - 1u)) == 0) mine[x.e] += __popc(x.peers);
      out += __popc(__ballot_sync(kAll, x.in && !x.valid));
      __syncwarp();
    }
    if (lane == 0) outside[warp] = out;
  }
  __syncthreads();
  // Per expert: its total, and each segment's offset within the expert's entries.
  for (int e = tid; e < E; e += B) {
    int run = 0;
    for (int w = 0; w < W; w++) {
      const int c = place[w * E + e];
      place[w * E + e] = run;
      run += c;
    }
    total[e] = run;
  }
  if (tid == 0) {
    int run = 0;
    for (int w = 0; w < W; w++) {
      const int c = outside[w];
      outside[w] = run;
      run += c;
    }
    outside[32] = run;
  }
  __syncthreads();
  // Exclusive scan over the experts of (entries << 32 | chosen): thread t owns experts [t·c, t·c + c).
  const int c = (E + B - 1) / B;
  const int e0 = min(E, tid * c), e1 = min(E, e0 + c);
  unsigned long long local = 0;
  for (int e = e0; e < e1; e++) local += ((unsigned long long)total[e] << 32) | (total[e] > 0 ? 1ull : 0ull);
  unsigned long long incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long v = __shfl_up_sync(kAll, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) red[warp] = incl;
  __syncthreads();
  unsigned long long run = incl - local, sum = 0;
  for (int w = 0; w < nw; w++) {
    if (w < warp) run += red[w];
    sum += red[w];
  }
  int32_t* expertOf = groups + 3;
  int32_t* start = groups + 3 + E;
  for (int e = e0; e < e1; e++) {
    const int cnt = total[e];
    if (cnt > 0) expertOf[(int)(run & 0xffffffffu)] = e, start[(int)(run & 0xffffffffu)] = (int)(run >> 32);
    total[e] = (int)(run >> 32);
    run += ((unsigned long long)cnt << 32) | (cnt > 0 ? 1ull : 0ull);
  }
  const int nActive = (int)(sum & 0xffffffffu), nValid = (int)(sum >> 32);
  if (tid == 0) groups[0] = nActive, groups[1] = outside[32], groups[2] = nValid, start[nActive] = nValid;
  __syncthreads();
  for (int i = tid; i < W * E; i += B) place[i] += total[i % E];
  __syncthreads();

  // Each warp places its segment in order of rj.
  if (warp < W) {
    int* cursor = place + warp * E;
    int32_t* order = groups + 4 + 2 * E;
    int out = nValid + outside[warp];
    for (int base = s0; base < s1; base += 32) {
      const Entry x = entry_at(ids, base, s1, lane, E);
      const int rank = __popc(x.peers & ((1u << lane) - 1u));
      const unsigned outsiders = __ballot_sync(kAll, x.in && !x.valid);
      if (x.valid) order[cursor[x.e] + rank] = x.rj;
      else if (x.in) order[out + __popc(outsiders & ((1u << lane) - 1u))] = x.rj;
      __syncwarp();
      if (x.valid && rank == __popc(x.peers) - 1) cursor[x.e] += __popc(x.peers);
      out += __popc(outsiders);
      __syncwarp();
    }
  }
}
