// dsa_topk: the top-k candidates of each row of a block by the tie rule of KERNELS.md, expanded to
// ascending token positions. CPU twin: ../src/dsa-index.cpu.ts (topkCpu).
//
// Launch (src/dsa-launch.ts topkLaunch): grid [8, rowCount], 512 threads, dynamic shared memory
// kTkFixed + 4·cache bytes. On sm_90 the 8 CTAs of a row are one thread-block cluster: CTA c owns
// the candidates [c·⌈n/8⌉, (c+1)·⌈n/8⌉) and keeps them in shared memory (as order-preserving u32
// keys; candidates past the cache are re-read from the score buffer), histograms are merged
// into CTA 0's shared memory through distributed shared memory, and the per-CTA counts are
// exchanged the same way. Without clusters (sm_80) CTA 0 does the whole row alone.
//
// Radix select over the 32-bit keys, three digits (11, 11, 10 bits) from the top: each level
// histograms the digit among the keys that match the threshold's prefix so far, and picks the bin
// that holds the k-th largest. That gives the threshold key T and `need`, how many keys equal to
// T are kept (keys > T are all kept). Then a count pass and a write pass in index order: a kept
// key's output slot is (keys > T before it) + min(keys == T before it, need) + its rank among
// the kept keys of its 32-key group (warp ballots). So the output is ascending by construction
// and ties go to the lower index, exactly as the CPU twin's sort. A row with n ≤ K/P keeps every
// candidate with no select.
#include "dsa-common.cuh"

namespace dsa {

constexpr int kTkThreads = 512;
constexpr int kTkWarps = kTkThreads / 32;
constexpr int kTkBins = 2048;
// Fixed part of the dynamic shared memory: local histogram, 3 merged histograms, small arrays.
constexpr int kTkFixed = 4 * kTkBins + 3 * 4 * kTkBins + 512;

/**
 * The bin of `h` (nbins = 512·PER counts, possibly in another CTA's shared memory) that holds the
 * kRem-th largest key: bins above it hold fewer than kRem keys, it and the bins above at least
 * kRem. Returns the bin and kRem minus the keys above it. Every thread of the block calls it.
 */
template <int PER>
__device__ __forceinline__ void select_bin(const uint32_t* h, uint32_t kRem, uint32_t* scan, uint32_t* result, int& bin, uint32_t& rem) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint32_t c[PER];
  uint32_t s = 0;
#pragma unroll
  for (int k = 0; k < PER; k++) {
    c[k] = h[tid * PER + k];
    s += c[k];
  }
  // Inclusive suffix sum within the warp (lanes ≥ lane).
  uint32_t incl = s;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t v = __shfl_down_sync(0xffffffffu, incl, o);
    if (lane + o < 32) incl += v;
  }
  if (lane == 0) scan[warp] = incl;
  __syncthreads();
  uint32_t above = incl - s;
  for (int w = warp + 1; w < kTkWarps; w++) above += scan[w];
  uint32_t acc = above;
#pragma unroll
  for (int k = PER - 1; k >= 0; k--) {
    if (acc < kRem && acc + c[k] >= kRem) {
      result[0] = (uint32_t)(tid * PER + k);
      result[1] = kRem - acc;
    }
    acc += c[k];
  }
  __syncthreads();
  bin = (int)result[0];
  rem = result[1];
  __syncthreads();
}

}  // namespace dsa

using namespace dsa;

extern "C" __global__ void DSA_CLUSTER_DIMS(8) __launch_bounds__(kTkThreads, 2) dsa_topk(
    const float* __restrict__ scores, int32_t* __restrict__ sel, int32_t* __restrict__ selCount, const int32_t* __restrict__ slots,
    const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int rowBase, int rowCount, int scoreStride,
    int selWidth, int topk, int kpool) {
  DSA_DYNAMIC_SMEM(smem);
#if !DSA_HAS_CLUSTER
  if (blockIdx.x != 0) return;  // no clusters: CTA 0 of each row works alone
#endif
  const int bi = blockIdx.y;
  const int row = rowBase + bi;
  if (bi >= rowCount || row >= rowStarts[batch]) return;  // the same for every CTA of a row
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int p = batch_pos_of_row(rowStarts, batch, row);
  const int slot = slots[p];
  const int rank = Coop::rank(), NC = Coop::size();
  if (slot < 0) {
    if (rank == 0 && tid == 0) selCount[row] = 0;
    return;
  }
  const int t = positions[row];
  const int n = (t + 1) / kpool;
  const int K = topk / kpool;
  const int tail = t + 1 - n * kpool;
  int32_t* out = sel + (size_t)row * selWidth;
  const float* sc = scores + (size_t)bi * scoreStride;
  const int seg = (n + NC - 1) / NC;
  const int s0 = min(n, rank * seg), s1 = min(n, s0 + seg), len = s1 - s0;

  if (n <= K) {
    // Every candidate is kept: the output is the identity.
    for (int j = s0 + tid; j < s1; j += kTkThreads)
      for (int q = 0; q < kpool; q++) out[j * kpool + q] = j * kpool + q;
    if (rank == 0) {
      for (int i = tid; i < tail; i += kTkThreads) out[n * kpool + i] = n * kpool + i;
      if (tid == 0) selCount[row] = n * kpool + tail;
    }
    return;
  }

  uint32_t* hist = reinterpret_cast<uint32_t*>(smem);
  uint32_t* merged = hist + kTkBins;  // [3][kTkBins], used in CTA 0
  uint32_t* ex = merged + 3 * kTkBins;  // [2·16]: (greater, equal) per CTA
  uint32_t* wG = ex + 32;               // [16]
  uint32_t* wE = wG + kTkWarps;         // [16]
  uint32_t* scan = wE + kTkWarps;       // [16]
  uint32_t* result = scan + kTkWarps;   // [2]
  uint32_t* cache = reinterpret_cast<uint32_t*>(smem + kTkFixed);
  const int cap = (int)((dynamic_smem_bytes() - (uint32_t)kTkFixed) / 4u);
  auto key_at = [&](int i) -> uint32_t { return i < cap ? cache[i] : ordered_key(sc[s0 + i]); };

  for (int i = tid; i < 4 * kTkBins; i += kTkThreads) hist[i] = 0u;  // hist and the merged histograms
  Coop::sync();  // CTA 0's merged histograms are zero before anyone adds to them

  // Level 0: load (into the cache) and histogram the top 11 bits.
  for (int i = tid; i < len; i += kTkThreads) {
    const uint32_t k = ordered_key(sc[s0 + i]);
    if (i < cap) cache[i] = k;
    atomicAdd(&hist[k >> 21], 1u);
  }
  __syncthreads();
  for (int b = tid; b < kTkBins; b += kTkThreads) {
    const uint32_t v = hist[b];
    if (v) atomicAdd(Coop::map(merged + b, 0), v);
  }
  Coop::sync();
  int b0, b1, b2;
  uint32_t kRem;
  select_bin<4>(Coop::map(merged, 0), (uint32_t)K, scan, result, b0, kRem);

  // Level 1: bits 10..20 of the keys whose top 11 bits are b0.
  for (int i = tid; i < kTkBins; i += kTkThreads) hist[i] = 0u;
  __syncthreads();
  for (int i = tid; i < len; i += kTkThreads) {
    const uint32_t k = key_at(i);
    if ((int)(k >> 21) == b0) atomicAdd(&hist[(k >> 10) & 2047u], 1u);
  }
  __syncthreads();
  for (int b = tid; b < kTkBins; b += kTkThreads) {
    const uint32_t v = hist[b];
    if (v) atomicAdd(Coop::map(merged + kTkBins + b, 0), v);
  }
  Coop::sync();
  select_bin<4>(Coop::map(merged + kTkBins, 0), kRem, scan, result, b1, kRem);

  // Level 2: bits 0..9 of the keys whose top 22 bits are (b0, b1).
  const uint32_t pre22 = ((uint32_t)b0 << 11) | (uint32_t)b1;
  for (int i = tid; i < kTkBins / 2; i += kTkThreads) hist[i] = 0u;
  __syncthreads();
  for (int i = tid; i < len; i += kTkThreads) {
    const uint32_t k = key_at(i);
    if ((k >> 10) == pre22) atomicAdd(&hist[k & 1023u], 1u);
  }
  __syncthreads();
  for (int b = tid; b < kTkBins / 2; b += kTkThreads) {
    const uint32_t v = hist[b];
    if (v) atomicAdd(Coop::map(merged + 2 * kTkBins + b, 0), v);
  }
  Coop::sync();
  select_bin<2>(Coop::map(merged + 2 * kTkBins, 0), kRem, scan, result, b2, kRem);
  const uint32_t T = (pre22 << 10) | (uint32_t)b2;
  const uint32_t need = kRem;  // keys == T to keep, in index order (≥ 1)

  // Count pass: keys > T and == T per warp range, per CTA, then across the CTAs of the row.
  const int wlen = ((len + kTkWarps * 32 - 1) / (kTkWarps * 32)) * 32;
  const int ws = min(len, warp * wlen), we = min(len, ws + wlen);
  uint32_t cg = 0, ce = 0;
  for (int i = ws + lane; i < we; i += 32) {
    const uint32_t k = key_at(i);
    cg += k > T;
    ce += k == T;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    cg += __shfl_xor_sync(0xffffffffu, cg, o);
    ce += __shfl_xor_sync(0xffffffffu, ce, o);
  }
  if (lane == 0) {
    wG[warp] = cg;
    wE[warp] = ce;
  }
  __syncthreads();
  if (tid == 0) {
    uint32_t G = 0, E = 0;
    for (int w = 0; w < kTkWarps; w++) {
      G += wG[w];
      E += wE[w];
    }
    for (int r = 0; r < NC; r++) {
      uint32_t* dst = Coop::map(ex, r);
      dst[2 * rank] = G;
      dst[2 * rank + 1] = E;
    }
  }
  Coop::sync();
  uint32_t gRun = 0, eRun = 0;
  for (int r = 0; r < rank; r++) {
    gRun += ex[2 * r];
    eRun += ex[2 * r + 1];
  }
  for (int w = 0; w < warp; w++) {
    gRun += wG[w];
    eRun += wE[w];
  }

  // Write pass, 32 keys at a time in index order.
  const uint32_t lt = (1u << lane) - 1u;
  for (int base = ws; base < we; base += 32) {
    const int i = base + lane;
    const bool valid = i < we;
    const uint32_t k = valid ? key_at(i) : 0u;
    const bool isG = valid && k > T, isE = valid && k == T;
    const uint32_t bG = __ballot_sync(0xffffffffu, isG), bE = __ballot_sync(0xffffffffu, isE);
    const uint32_t eRank = eRun + __popc(bE & lt);
    const bool keepMe = isG || (isE && eRank < need);
    const uint32_t bK = __ballot_sync(0xffffffffu, keepMe);
    if (keepMe) {
      const uint32_t pos = gRun + min(eRun, need) + __popc(bK & lt);
      const int j = s0 + i;
      for (int q = 0; q < kpool; q++) out[(size_t)pos * kpool + q] = j * kpool + q;
    }
    gRun += __popc(bG);
    eRun += __popc(bE);
  }
  if (rank == 0) {
    for (int i = tid; i < tail; i += kTkThreads) out[K * kpool + i] = n * kpool + i;
    if (tid == 0) selCount[row] = K * kpool + tail;
  }
}
