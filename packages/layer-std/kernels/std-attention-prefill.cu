// Causal attention of a prefill chunk on tensor cores (src/attention-kernels.ts; reference: the
// same `coreCpu` as std_attn_core, src/attention.cpu.ts; KERNELS.md), after std_attn_prep has
// written the chunk's q rows and its keys and values into the paged cache:
//   std_attn_prefill  per (tile of 64 rows of one sequence, q head): softmax(q·k_t · scale) v_t over
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
// the 8-element pad makes the fragment loads conflict-free.
#include "std-common.cuh"
#include "std-mma.cuh"

using namespace stdk;

namespace {

constexpr int kRows = 64;  // query rows per CTA: 4 warps × 16
constexpr int kThreads = 128;

template <int D>
constexpr int key_tile() { return D > 128 ? 32 : 64; }

__device__ __forceinline__ uint32_t smem_word(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }

template <typename T, int D>
__device__ __forceinline__ void prefill_tile(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                             const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots,
                                             const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,
                                             int kvHeads, int d, int pageSize, int maxPages, int gated, int ownKv, const T* __restrict__ q,
                                             T* __restrict__ out, float scale, int window, unsigned char* smem, int* maxPosS, int* minPosS) {
  constexpr int BN = key_tile<D>();
  constexpr int LD = D + 8;
  constexpr int C8 = D / 8;  // 16-byte chunks of a shared row
  // Q, then two (K, V) buffers: the next key tile lands by cp.async while this one is used.
  T* Qs = reinterpret_cast<T*>(smem);
  T* KV = Qs + kRows * LD;
  if (dynamic_smem_bytes() < (unsigned)((kRows + 4 * BN) * LD * sizeof(T))) __trap();

  // This CTA's sequence and rows: the tiles of each sequence in batch order.
  int idx = blockIdx.x, p = 0, first = -1, count = 0;
  for (; p < batch; p++) {
    const int n = rowStarts[p + 1] - rowStarts[p];
    const int tiles = (n + kRows - 1) / kRows;
    if (idx < tiles) {
      first = rowStarts[p] + idx * kRows;
      count = min(kRows, n - idx * kRows);
      break;
    }
    idx -= tiles;
  }
  if (first < 0) return;
  const int h = blockIdx.y, kvh = h / (heads / kvHeads);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
  const int slot = slots[p];
  if (slot < 0) {
    for (int i = tid; i < count * d; i += kThreads) {
      const int r = i / d;
      store_value(out, ((size_t)(first + r) * heads + h) * d + (i - r * d), 0.f);
    }
    return;
  }
  const int32_t* table = blockTable + (size_t)slot * maxPages;
  const int W = heads * d * (gated ? 2 : 1) + (ownKv ? 2 * kvHeads * d : 0);

  if (tid == 0) *maxPosS = -1, *minPosS = 0x7fffffff;
  __syncthreads();
  if (tid < count) atomicMax(maxPosS, positions[first + tid]), atomicMin(minPosS, positions[first + tid]);
  for (int i = tid; i < kRows * C8; i += kThreads) {
    const int r = i / C8, c = (i - r * C8) * 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (r < count && c < d) v = *reinterpret_cast<const uint4*>(q + ((size_t)(first + r) * heads + h) * d + c);
    *reinterpret_cast<uint4*>(Qs + r * LD + c) = v;
  }
  __syncthreads();
  const int maxPos = *maxPosS;
  // The tile's first key: the window's start of its earliest row (key tiles stay aligned to key 0).
  const int firstTile = window > 0 ? max(0, *minPosS - window + 1) / BN : 0;
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const int pos0 = r0 < count ? positions[first + r0] : -1;
  const int pos1 = r1 < count ? positions[first + r1] : -1;
  // Keys before lo0 / lo1 are outside rows r0 / r1's window.
  const int lo0 = window > 0 ? pos0 - window + 1 : 0, lo1 = window > 0 ? pos1 - window + 1 : 0;
  int warpMax = max(pos0, pos1);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) warpMax = max(warpMax, __shfl_xor_sync(0xffffffffu, warpMax, o));

  const float scale2 = scale * 1.4426950408889634f;
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  auto load_keys = [&](int buf, int k0) {
    T* Kb = KV + buf * 2 * BN * LD;
    for (int i = tid; i < BN * C8; i += kThreads) {
      const int r = i / C8, c = (i - r * C8) * 8;
      const int t = k0 + r;
      const bool valid = t <= maxPos && c < d;  // zeros past the tile's last key (their P is 0) and past d
      const size_t off = valid ? cache_offset(table, pageSize, kvHeads, d, t, kvh) + c : 0;
      cp_async16(Kb + r * LD + c, kCache + off, valid);
      cp_async16(Kb + BN * LD + r * LD + c, vCache + off, valid);
    }
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
#pragma unroll
      for (int j = 0; j < BN / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        if (kk * 16 >= d) break;
        const T* qa = Qs + (warp * 16 + g) * LD + kk * 16 + 2 * tig;
        const uint32_t a[4] = {smem_word(qa), smem_word(qa + 8 * LD), smem_word(qa + 8), smem_word(qa + 8 * LD + 8)};
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
          const T* kb = Ks + (j * 8 + g) * LD + kk * 16 + 2 * tig;
          mma16816<T>(s[j], a, smem_word(kb), smem_word(kb + 8));
        }
      }
      // Online softmax in base 2; the four lanes of a quad share rows r0 and r1.
      float x0 = m0, x1 = m1;
#pragma unroll
      for (int j = 0; j < BN / 8; j++) {
        const int t = k0 + j * 8 + 2 * tig;
        s[j][0] = t >= lo0 && t <= pos0 ? s[j][0] * scale2 : -INFINITY;
        s[j][1] = t + 1 >= lo0 && t + 1 <= pos0 ? s[j][1] * scale2 : -INFINITY;
        s[j][2] = t >= lo1 && t <= pos1 ? s[j][2] * scale2 : -INFINITY;
        s[j][3] = t + 1 >= lo1 && t + 1 <= pos1 ? s[j][3] * scale2 : -INFINITY;
        x0 = fmaxf(x0, fmaxf(s[j][0], s[j][1]));
        x1 = fmaxf(x1, fmaxf(s[j][2], s[j][3]));
      }
#pragma unroll
      for (int o = 1; o <= 2; o <<= 1) {
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, o));
        x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, o));
      }
      const float b0 = x0 == -INFINITY ? 0.f : x0, b1 = x1 == -INFINITY ? 0.f : x1;
      const float c0 = exp2f(m0 - b0), c1 = exp2f(m1 - b1);  // 0 while a row has seen no key
      m0 = x0, m1 = x1;
      l0 *= c0, l1 *= c1;
#pragma unroll
      for (int n = 0; n < D / 8; n++) acc[n][0] *= c0, acc[n][1] *= c0, acc[n][2] *= c1, acc[n][3] *= c1;
#pragma unroll
      for (int j = 0; j < BN / 8; j++) {
        s[j][0] = exp2f(s[j][0] - b0), s[j][1] = exp2f(s[j][1] - b0);
        s[j][2] = exp2f(s[j][2] - b1), s[j][3] = exp2f(s[j][3] - b1);
        l0 += s[j][0] + s[j][1];
        l1 += s[j][2] + s[j][3];
      }
      // O += P V: two n8 tiles of S make one k16 A fragment.
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++) {
        const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]), pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
        const T* vrow = Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8;
#pragma unroll
        for (int n = 0; n < D / 16; n++) {
          if (n * 16 >= d) break;
          uint32_t b[4];
          ldmatrix_x4_trans(b, vrow + n * 16);
          mma16816<T>(acc[2 * n], a, b[0], b[1]);
          mma16816<T>(acc[2 * n + 1], a, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with buffer kt & 1 before the load two tiles on
  }
  cp_async_wait<0>();

#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o);
  }
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    const int c = n * 8 + 2 * tig;
    if (c >= d) break;
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const int r = half ? r1 : r0;
      if (r >= count) continue;
      const int row = first + r;
      const float inv = half ? inv1 : inv0;
      float v0 = acc[n][2 * half] * inv, v1 = acc[n][2 * half + 1] * inv;
      if (gated) {
        const size_t gate = (size_t)row * W + (size_t)h * 2 * d + d + c;
        v0 *= sigmoid(ldg_value(qkv, gate));
        v1 *= sigmoid(ldg_value(qkv, gate + 1));
      }
      *reinterpret_cast<uint32_t*>(out + ((size_t)row * heads + h) * d + c) = pack2<T>(v0, v1);
    }
  }
}

template <typename T>
__device__ __forceinline__ void prefill_rows(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                             const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots,
                                             const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,
                                             int kvHeads, int d, int pageSize, int maxPages, int gated, int ownKv, const T* __restrict__ q,
                                             T* __restrict__ out, float scale, int window) {
  STD_DYNAMIC_SMEM(smem);
  __shared__ int maxPosS, minPosS;
  if (blockDim.x != kThreads || (d & 7) != 0 || d > 256 || heads % kvHeads != 0 || gridDim.y != (unsigned)heads) __trap();
  if (!aligned16(q) || !aligned16(kCache) || !aligned16(vCache)) __trap();
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

// One symbol per row type (attention-kernels.ts declares them, with std_attn_core's parameters).
#define STD_ATTENTION_PREFILL(SUFFIX, T)                                                                                                           \
  extern "C" __global__ void __launch_bounds__(kThreads) std_attn_prefill##SUFFIX(                                                                 \
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
