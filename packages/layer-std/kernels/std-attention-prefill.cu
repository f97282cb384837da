// Causal attention of a prefill chunk on tensor cores (src/attention-kernels.ts; reference: the
// same `coreCpu` as std_attn_core, src/attention.cpu.ts; KERNELS.md), after std_attn_prep has
// written the chunk's q rows and its keys and values into the paged cache:
//   std_attn_prefill  per (tile of rows of one sequence, q head): softmax(q·k_t · scale) v_t over
//                     t = lo..pos of each row (lo = pos − window + 1 with a sliding window, else 0),
//                     × sigmoid(gate) when gated; padding sequences (slot < 0) write zeros
//
// Flash-attention style: 4 warps, each owning 16 query rows; the CTA walks the sequence's keys in
// tiles of BN (64, or 32 for head dims above 128, for registers) up to the tile's largest position:
// K and V rows are gathered from their pages into shared memory by cp.async, two buffers so the next
// tile lands while this one is used; S = Q Kᵀ by mma.sync m16n8k16
// (row-type inputs, f32 accumulators), an online softmax per row in f32 (exp2 with log2 e folded
// into the scale), then O += P V with P rounded to the row type (as flash-attention does), V's
// fragments read transposed by ldmatrix. The output is O / l × gate, rounded once. Row type bf16 or
// f16 only (the f32 reference path keeps std_attn_core); head dims multiples of 8 up to 256,
// computed in the template of the next power of two ≥ 32 with the columns past d zero.
//
// Grid [⌈rows / 64⌉ + batch, heads] (an upper bound of the tiles: CTAs past the last exit), 128
// threads, dynamic shared memory (64 + 4·BN) × (D + 8) row-type elements (attnPrefillLaunch);
// the 8-element pad makes the fragment loads conflict-free. On sm_90a, head dims 128 and 256 take
// the wgmma version below (256 threads: attnPrefillLaunch on compute capability 9.0).
#include "std-attention-tiles.cuh"
#include "std-common.cuh"
#include "std-mma.cuh"

using namespace stdk;

namespace {

constexpr int kRows = 64;  // query rows per CTA: 4 warps × 16
constexpr int kThreads = 128;

template <int D>
constexpr int key_tile() { return D > 128 ? 32 : 64; }

/** Rows [first, first + count) of sequence p: the idx-th tile of `rowsPerTile` rows, counting each sequence's tiles in batch order (first −1 past the last). */
struct SeqTile {
  int p, first, count;
};
__device__ __forceinline__ SeqTile seq_tile(const int32_t* __restrict__ rowStarts, int batch, int rowsPerTile, int idx) {
  for (int p = 0; p < batch; p++) {
    const int n = rowStarts[p + 1] - rowStarts[p];
    const int tiles = (n + rowsPerTile - 1) / rowsPerTile;
    if (idx < tiles) return {p, rowStarts[p] + idx * rowsPerTile, min(rowsPerTile, n - idx * rowsPerTile)};
    idx -= tiles;
  }
  return {batch, -1, 0};
}

/** Zeros for head h of a padding sequence's rows (the CTA's threads). */
template <typename T>
__device__ __forceinline__ void zero_rows(T* __restrict__ out, int first, int count, int heads, int h, int d) {
  for (int i = threadIdx.x; i < count * d; i += blockDim.x) {
    const int r = i / d;
    store_value(out, ((size_t)(first + r) * heads + h) * d + (i - r * d), 0.f);
  }
}

template <typename T, int D>
__device__ __forceinline__ void prefill_tile(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                             const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots,
                                             const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,
                                             int kvHeads, int d, int pageSize, int maxPages, int gated, int ownKv, const T* __restrict__ q,
                                             T* __restrict__ out, float scale, int window, unsigned char* smem, int* maxPosS, int* minPosS) {
  constexpr int BN = key_tile<D>();
  constexpr int LD = D + 8;
  // Q, then two (K, V) buffers: the next key tile lands by cp.async while this one is used.
  T* Qs = reinterpret_cast<T*>(smem);
  T* KV = Qs + kRows * LD;
  if (dynamic_smem_bytes() < (unsigned)((kRows + 4 * BN) * LD * sizeof(T))) __trap();

  // This CTA's sequence and rows: the tiles of each sequence in batch order.
  const SeqTile st = seq_tile(rowStarts, batch, kRows, blockIdx.x);
  if (st.first < 0) return;
  const int p = st.p, first = st.first, count = st.count;
  const int h = blockIdx.y, kvh = h / (heads / kvHeads);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
  const int slot = slots[p];
  if (slot < 0) return zero_rows(out, first, count, heads, h, d);
  const int32_t* table = blockTable + (size_t)slot * maxPages;
  const int W = heads * d * (gated ? 2 : 1) + (ownKv ? 2 * kvHeads * d : 0);

  if (tid == 0) *maxPosS = -1, *minPosS = 0x7fffffff;
  __syncthreads();
  if (tid < count) atomicMax(maxPosS, positions[first + tid]), atomicMin(minPosS, positions[first + tid]);
  load_q_tile<kRows, D, kThreads>(Qs, count, d, [&](int r) { return q + ((size_t)(first + r) * heads + h) * d; });
  __syncthreads();
  const int maxPos = *maxPosS;
  // The tile's first key: the window's start of its earliest row (key tiles stay aligned to key 0).
  const int firstTile = window > 0 ? max(0, *minPosS - window + 1) / BN : 0;
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  RowPair rp;
  rp.pos0 = r0 < count ? positions[first + r0] : -1;
  rp.pos1 = r1 < count ? positions[first + r1] : -1;
  // Keys before lo0 / lo1 are outside rows r0 / r1's window.
  rp.lo0 = window > 0 ? rp.pos0 - window + 1 : 0, rp.lo1 = window > 0 ? rp.pos1 - window + 1 : 0;
  int warpMax = max(rp.pos0, rp.pos1);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) warpMax = max(warpMax, __shfl_xor_sync(0xffffffffu, warpMax, o));

  const float scale2 = scale * 1.4426950408889634f;
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

  // Keys 0 … maxPos: zeros past the tile's last key (their P is 0).
  auto load_keys = [&](int buf, int k0) {
    gather_keys<BN, D, kThreads>(KV + buf * 2 * BN * LD, tid, kCache, vCache, table, pageSize, kvHeads, kvh, d, 0, maxPos + 1, k0);
  };
  const int keyTiles = maxPos < 0 ? 0 : maxPos / BN + 1;
  if (firstTile < keyTiles) load_keys(firstTile & 1, firstTile * BN);
  cp_async_commit();
  for (int kt = firstTile; kt < keyTiles; kt++) {
    if (kt + 1 < keyTiles) load_keys((kt + 1) & 1, (kt + 1) * BN);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // tile kt is in shared memory for every thread
    const int k0 = kt * BN;
    const T* Ks = KV + (kt & 1) * 2 * BN * LD;
    const T* Vs = Ks + BN * LD;
    if (k0 <= warpMax) {  // else every row of this warp ends before this tile
      float s[BN / 8][4];
      qk_tile<T, D>(s, Qs + warp * 16 * LD, Ks, d, g, tig);
      float c0, c1;
      rp.softmax_tile(s, k0, tig, scale2, c0, c1);
#pragma unroll
      for (int n = 0; n < D / 8; n++) acc[n][0] *= c0, acc[n][1] *= c0, acc[n][2] *= c1, acc[n][3] *= c1;
      pv_tile<T, D>(acc, s, Vs, d, lane);
    }
    __syncthreads();  // every warp is done with buffer kt & 1 before the load two tiles on
  }
  cp_async_wait<0>();

  float inv0, inv1;
  rp.finish(inv0, inv1);
#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    const int c = n * 8 + 2 * tig;
    if (c >= d) break;
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const int r = half ? r1 : r0;
      const float inv = half ? inv1 : inv0;
      if (r < count) store_pair(out, qkv, first + r, h, heads, d, c, gated, W, acc[n][2 * half] * inv, acc[n][2 * half + 1] * inv);
    }
  }
}

#ifdef STD_WGMMA
// sm_90a, head dims 128 and 256 (attnPrefillLaunch picks it): a CTA of two warpgroups per (tile of
// 128 rows of one sequence, q head), grid [heads, tiles] with the tiles in reverse so the longest
// (latest rows) start first. Each warpgroup owns 64 rows: S = Q Kᵀ by wgmma m64n64k16 on shared Q
// and K tiles (K-major, 128-byte swizzle, 64-element column blocks), the online softmax in
// registers (the accumulators are mma.sync's n8 tiles, so the code is the mma.sync path's), then
// O += P V by wgmma m64n128k16 with P from registers (rounded to the row type) and V taken
// transposed (MN-major) from the same swizzled tile layout as K, so one cp.async gather fills both.
// Key tiles of 64, double-buffered: every thread gathers tile kt + 1 while the warpgroups compute
// tile kt; a warpgroup whose rows all end before a tile skips it (the barriers still bind it).
constexpr int kWgRows = 128, kWgThreads = 256, kWgKeys = 64;

template <int D>
constexpr unsigned wg_smem_bytes() { return (unsigned)((kWgRows + 4 * kWgKeys) * D * 2 + 1024); }

template <typename T, int D>
__device__ __forceinline__ void prefill_tile_wg(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                                const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots,
                                                const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,
                                                int kvHeads, int d, int pageSize, int maxPages, int gated, int ownKv, const T* __restrict__ q,
                                                T* __restrict__ out, float scale, int window, unsigned char* smemRaw, int* posS) {
  static_assert(D == 128 || D == 256, "the wgmma prefill takes head dims 128 and 256");
  constexpr int C = D / 8;                     // 16-byte chunks of a row
  constexpr int QBYTES = kWgRows * D * 2;      // Q: D / 64 column blocks of 128 rows × 128 bytes
  constexpr int KBYTES = kWgKeys * D * 2;      // one K (or V) tile: D / 64 column blocks of 64 rows
  constexpr int KBLOCK = kWgKeys * 128;        // bytes of one column block of a K / V tile
  if (d != D || dynamic_smem_bytes() < wg_smem_bytes<D>()) __trap();
  unsigned char* smem = smemRaw + ((1024u - (smem_u32(smemRaw) & 1023u)) & 1023u);
  const uint32_t base = smem_u32(smem);

  // This CTA's sequence and rows: tile (total − 1 − blockIdx.y) of the tiles of each sequence in batch order.
  int total = 0;
  for (int b = 0; b < batch; b++) total += (rowStarts[b + 1] - rowStarts[b] + kWgRows - 1) / kWgRows;
  if ((int)blockIdx.y >= total) return;
  const SeqTile st = seq_tile(rowStarts, batch, kWgRows, total - 1 - (int)blockIdx.y);
  const int p = st.p, first = st.first, count = st.count;
  const int h = blockIdx.x, kvh = h / (heads / kvHeads);
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, g = lane >> 2, tig = lane & 3;
  const int slot = slots[p];
  if (slot < 0) return zero_rows(out, first, count, heads, h, d);
  const int32_t* table = blockTable + (size_t)slot * maxPages;
  const int W = heads * d * (gated ? 2 : 1) + (ownKv ? 2 * kvHeads * d : 0);

  // posS: [0] the CTA's largest position, [1] its smallest, [2 + w] warpgroup w's largest.
  if (tid < 4) posS[tid] = tid == 1 ? 0x7fffffff : -1;
  __syncthreads();
  if (tid < count) {
    const int pos = positions[first + tid];
    atomicMax(&posS[0], pos), atomicMin(&posS[1], pos), atomicMax(&posS[2 + tid / 64], pos);
  }
  // Q rows (zeros past the tile) into the swizzled column blocks.
  for (int i = tid; i < kWgRows * C; i += kWgThreads) {
    const int r = i / C, c = i - r * C;
    const bool valid = r < count;
    cp_async16(smem + (c >> 3) * (kWgRows * 128) + sw128_offset(r, c & 7), valid ? q + ((size_t)(first + r) * heads + h) * d + c * 8 : q, valid);
  }
  __syncthreads();
  const int maxPos = posS[0], wgMax = posS[2 + wg];
  const int firstTile = window > 0 ? max(0, posS[1] - window + 1) / kWgKeys : 0;
  const int keyTiles = maxPos < 0 ? 0 : maxPos / kWgKeys + 1;
  const int r0 = wg * 64 + ((tid >> 5) & 3) * 16 + g, r1 = r0 + 8;
  RowPair rp;
  rp.pos0 = r0 < count ? positions[first + r0] : -1;
  rp.pos1 = r1 < count ? positions[first + r1] : -1;
  rp.lo0 = window > 0 ? rp.pos0 - window + 1 : 0, rp.lo1 = window > 0 ? rp.pos1 - window + 1 : 0;

  auto load_keys = [&](int buf, int k0) {
    unsigned char* Kb = smem + QBYTES + buf * 2 * KBYTES;
    for (int i = tid; i < kWgKeys * C; i += kWgThreads) {
      const int r = i / C, c = i - r * C;
      const int t = k0 + r;
      const bool valid = t <= maxPos;  // zeros past the tile's last key (their P is 0)
      const size_t off = valid ? cache_offset(table, pageSize, kvHeads, d, t, kvh) + c * 8 : 0;
      const uint32_t at = (c >> 3) * KBLOCK + sw128_offset(r, c & 7);
      cp_async16(Kb + at, kCache + off, valid);
      cp_async16(Kb + KBYTES + at, vCache + off, valid);
    }
  };

  const float scale2 = scale * 1.4426950408889634f;
  float o[D / 128][64];
#pragma unroll
  for (int n = 0; n < D / 128; n++)
#pragma unroll
    for (int i = 0; i < 64; i++) o[n][i] = 0.f;

  if (firstTile < keyTiles) load_keys(firstTile & 1, firstTile * kWgKeys);
  cp_async_commit();
  for (int kt = firstTile; kt < keyTiles; kt++) {
    if (kt + 1 < keyTiles) load_keys((kt + 1) & 1, (kt + 1) * kWgKeys);
    cp_async_commit();
    cp_async_wait<1>();  // Q and tile kt have landed for this thread
    fence_proxy_async();  // visible to the tensor cores' reads
    __syncthreads();      // for every thread
    const int k0 = kt * kWgKeys;
    const uint32_t Kb = base + (uint32_t)(QBYTES + (kt & 1) * 2 * KBYTES), Vb = Kb + (uint32_t)KBYTES;
    if (k0 <= wgMax) {
      float s[8][4];  // n8 tiles of the m64n64 accumulators
      float(&sFlat)[32] = reinterpret_cast<float(&)[32]>(s);
#pragma unroll
      for (int i = 0; i < 32; i++) sFlat[i] = 0.f;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t col = (uint32_t)((kk & 3) * 32);  // k16 step within the 128-byte row
        wgmma_m64n64k16<T>(sFlat, smem_desc_sw128(base + (uint32_t)((kk >> 2) * (kWgRows * 128) + wg * 64 * 128) + col),
                           smem_desc_sw128(Kb + (uint32_t)((kk >> 2) * KBLOCK) + col));
      }
      wgmma_commit();
      wgmma_wait<0>();
      float c0, c1;
      rp.softmax_tile(s, k0, tig, scale2, c0, c1);
      uint32_t pa[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; kk++) p_fragment<T>(pa[kk], s, kk);
#pragma unroll
      for (int n = 0; n < D / 128; n++)
#pragma unroll
        for (int j = 0; j < 16; j++) o[n][4 * j] *= c0, o[n][4 * j + 1] *= c0, o[n][4 * j + 2] *= c1, o[n][4 * j + 3] *= c1;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int n = 0; n < D / 128; n++) wgmma_m64n128k16_rs_tb<T>(o[n], pa[kk], smem_desc_sw128_mn(Vb + (uint32_t)(n * 2 * KBLOCK + kk * 2048), KBLOCK));
      wgmma_commit();
      wgmma_wait<0>();
    }
    __syncthreads();  // both warpgroups are done with buffer kt & 1 before the load two tiles on
  }
  cp_async_wait<0>();

  float inv0, inv1;
  rp.finish(inv0, inv1);
#pragma unroll
  for (int half = 0; half < 2; half++) {
    const int r = half ? r1 : r0;
    if (r >= count) continue;
    const float inv = half ? inv1 : inv0;
#pragma unroll
    for (int n = 0; n < D / 128; n++)
#pragma unroll
      for (int j = 0; j < 16; j++)
        store_pair(out, qkv, first + r, h, heads, d, n * 128 + j * 8 + 2 * tig, gated, W, o[n][4 * j + 2 * half] * inv, o[n][4 * j + 2 * half + 1] * inv);
  }
}
#endif  // STD_WGMMA

template <typename T>
__device__ __forceinline__ void prefill_rows(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                             const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots,
                                             const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,
                                             int kvHeads, int d, int pageSize, int maxPages, int gated, int ownKv, const T* __restrict__ q,
                                             T* __restrict__ out, float scale, int window) {
  STD_DYNAMIC_SMEM(smem);
  __shared__ int maxPosS, minPosS;
  if (!aligned16(q) || !aligned16(kCache) || !aligned16(vCache) || heads % kvHeads != 0) __trap();
#ifdef STD_WGMMA
  if (blockDim.x == kWgThreads) {
    __shared__ int posS[4];
    if (gridDim.x != (unsigned)heads) __trap();
    if (d == 128) prefill_tile_wg<T, 128>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, d, pageSize, maxPages, gated, ownKv, q, out, scale, window, smem, posS);
    else prefill_tile_wg<T, 256>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, d, pageSize, maxPages, gated, ownKv, q, out, scale, window, smem, posS);
    return;
  }
#endif
  if (blockDim.x != kThreads || (d & 7) != 0 || d > 256 || gridDim.y != (unsigned)heads) __trap();
#define STD_PREFILL(D) \
  prefill_tile<T, D>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, d, pageSize, maxPages, gated, ownKv, q, out, scale, \
                     window, smem, &maxPosS, &minPosS)
  if (d <= 32) STD_PREFILL(32);
  else if (d <= 64) STD_PREFILL(64);
  else if (d <= 128) STD_PREFILL(128);
  else STD_PREFILL(256);
#undef STD_PREFILL
}

}  // namespace

// One symbol per row type (attention-kernels.ts declares them, with std_attn_core's parameters);
// on sm_90a it takes both launches (128 threads: mma.sync; 256: wgmma).
#ifdef STD_WGMMA
constexpr int kMaxThreads = kWgThreads;
#else
constexpr int kMaxThreads = kThreads;
#endif

#define STD_ATTENTION_PREFILL(SUFFIX, T)                                                                                                           \
  extern "C" __global__ void __launch_bounds__(kMaxThreads) std_attn_prefill##SUFFIX(                                                                 \
      const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache, const int32_t* __restrict__ blockTable,                \
      const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,       \
      int kvHeads, int headDim, int pageSize, int maxPages, int gated, int dtype, int ownKv, const T* __restrict__ q, T* __restrict__ out,      \
      float scale, int window) {                                                                                                                   \
    if (dtype != row_code<T>) __trap();                                                                                                            \
    prefill_rows<T>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, headDim, pageSize, maxPages, gated,     \
                    ownKv, q, out, scale, window);                                                                                                 \
  }

STD_ATTENTION_PREFILL(_bf16, bf16)
STD_ATTENTION_PREFILL(_f16, f16)

#undef STD_ATTENTION_PREFILL
