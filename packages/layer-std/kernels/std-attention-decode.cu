// Split-KV attention of decode and verify rows on tensor cores (src/attention-kernels.ts; twin
// decodeCpu in src/attention.cpu.ts; KERNELS.md), after std_attn_prep has written the rows' q and
// their keys and values into the paged cache:
//   std_attn_decode  per (row, kv head, chunk of keys): softmax(q·k_t · scale) v_t for the GQA
//                    group's query heads over the chunk's keys, × sigmoid(gate) when gated, for a row
//                    of one chunk; a row of several leaves one partial record per (head, chunk) for
//                    std_attn_combine (std-attention.cu), the records std_attn_core leaves
//
// The group's query heads are the rows of one m16 tile (a group above 16 takes several passes; rows
// past the group are zeros), so each key row is read once for all of them and the products run on
// mma.sync m16n8k16 (row-type inputs, f32 accumulators). Rows are cut into chunks by key_chunks
// (std-attention-keys.cuh: the row's key count only, so a row's bits never depend on the batch or the
// grid); CTA z of [rows, kvHeads, splits] takes chunks z, z + splits, …. A chunk's keys are tiles of
// 16; warp w takes tiles w, w + 4, … through its own two-buffer cp.async ring (its keys' pages looked
// up once a row), S = Q Kᵀ, an online softmax per head in f32 (exp2, log2 e folded into the scale),
// O += P V with P rounded to the row type (flash-attention's rounding; V's fragments by ldmatrix
// .trans). The four warps' (max, sum, O) are then merged through shared memory in warp order
// (deterministic) into the output or the chunk's record.
//
// 128 threads; dynamic shared memory (16 + 4 warps · 2 buffers · 2 · 16) × (D + 8) row-type elements
// (attnDecodeLaunch), D the head dim's template (the next power of two ≥ 32, columns past d zero);
// the 8-element pad makes the fragment loads conflict-free. Row type bf16 or f16; head dims
// multiples of 8 up to 256 (the layer keeps std_attn_core for others and for f32).
#include "std-attention-keys.cuh"
#include "std-attention-tiles.cuh"
#include "std-common.cuh"
#include "std-mma.cuh"

using namespace stdk;

namespace {

constexpr int kWarps = kDecodeWarps;  // std-attention-keys.cuh: the chunks' alignment is made of them
constexpr int kThreads = 32 * kWarps;
constexpr int kTileKeys = kDecodeTileKeys;
constexpr int kHeadsAtOnce = 16;  // the m16 tile
constexpr int kMaxHeadDim = 256;

/** Row-type elements of the dynamic shared memory at template D: the Q tile, then each warp's two (K, V) tiles. */
template <int D>
constexpr int smem_elements() { return (kHeadsAtOnce + kWarps * 2 * 2 * kTileKeys) * (D + 8); }

/**
 * One pass: heads h0 … h0 + ng − 1 of `row` over keys a … a + nkeys − 1 of kv head kvh. Writes the
 * normalised, gated output when the row has one chunk, else the chunk's partial records.
 */
template <typename T, int D>
__device__ __forceinline__ void decode_pass(const ChunkPass& ps, const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                            const int32_t* __restrict__ table, int pageSize, int heads, int kvHeads, int d, int W, int gated,
                                            const T* __restrict__ q, T* __restrict__ out, float* __restrict__ partials, float scale2, int maxChunks,
                                            T* smem, float* mW, float* lW) {
  constexpr int LD = D + 8;
  constexpr int RING = 2 * 2 * kTileKeys * LD;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
  T* Qs = smem;
  T* ring = Qs + kHeadsAtOnce * LD + warp * RING;

  load_q_tile<kHeadsAtOnce, D, kThreads>(Qs, ps.ng, d, [&](int r) { return q + ((size_t)ps.row * heads + ps.h0 + r) * d; });
  __syncthreads();

  const int tiles = (ps.nkeys + kTileKeys - 1) / kTileKeys;
  const int mine = warp < tiles ? (tiles - warp + kWarps - 1) / kWarps : 0;
  // Keys of tile i into buffer b of the warp's ring, by its lanes (zeros past the chunk).
  auto load = [&](int b, int i) {
    gather_keys<kTileKeys, D, 32>(ring + b * 2 * kTileKeys * LD, lane, kCache, vCache, table, pageSize, kvHeads, ps.kvh, d, ps.a, ps.nkeys,
                                  i * kTileKeys);
  };

  RowPair rp;
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  if (mine > 0) load(0, warp);
  cp_async_commit();
  for (int j = 0; j < mine; j++) {
    const int i = warp + j * kWarps;
    if (j + 1 < mine) load((j + 1) & 1, i + kWarps);
    cp_async_commit();
    cp_async_wait<1>();
    __syncwarp();  // tile i is in shared memory for every lane
    const T* Ks = ring + (j & 1) * 2 * kTileKeys * LD;
    const T* Vs = Ks + kTileKeys * LD;
    float s[2][4];
    qk_tile<T, D>(s, Qs, Ks, d, g, tig);
    // Every head row sees the chunk's keys 0 … nkeys − 1 (tile-local keys k0 + …).
    rp.pos0 = rp.pos1 = ps.nkeys - 1;
    rp.lo0 = rp.lo1 = 0;
    float c0, c1;
    rp.softmax_tile(s, i * kTileKeys, tig, scale2, c0, c1);
#pragma unroll
    for (int n = 0; n < D / 8; n++) acc[n][0] *= c0, acc[n][1] *= c0, acc[n][2] *= c1, acc[n][3] *= c1;
    pv_tile<T, D>(acc, s, Vs, d, lane);
    __syncwarp();  // every lane is done with buffer j & 1 before the load two tiles on
  }
  cp_async_wait<0>();

  // The warps' results through shared memory (the rings are free once every warp is here): each
  // head's common max, and each warp's sum and O rescaled to it, added in warp order.
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    rp.l0 += __shfl_xor_sync(0xffffffffu, rp.l0, o);
    rp.l1 += __shfl_xor_sync(0xffffffffu, rp.l1, o);
  }
  __syncthreads();
  float* Os = reinterpret_cast<float*>(Qs + kHeadsAtOnce * LD);  // [warps][16][D]
  if (tig == 0) {
    mW[warp * kHeadsAtOnce + g] = rp.m0, mW[warp * kHeadsAtOnce + g + 8] = rp.m1;
    lW[warp * kHeadsAtOnce + g] = rp.l0, lW[warp * kHeadsAtOnce + g + 8] = rp.l1;
  }
#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    const int c = n * 8 + 2 * tig;
    float* o0 = Os + ((size_t)warp * kHeadsAtOnce + g) * D + c;
    o0[0] = acc[n][0], o0[1] = acc[n][1];
    o0[8 * D] = acc[n][2], o0[8 * D + 1] = acc[n][3];
  }
  __syncthreads();
  for (int i = tid; i < ps.ng * d; i += kThreads) {
    const int r = i / d, e = i - r * d;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; w++) M = fmaxf(M, mW[w * kHeadsAtOnce + r]);
    float L = 0.f, O = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; w++) {
      const float mw = mW[w * kHeadsAtOnce + r];
      if (mw == -INFINITY) continue;  // a warp without tiles
      const float f = exp2f(mw - M);
      L += lW[w * kHeadsAtOnce + r] * f;
      O += Os[((size_t)w * kHeadsAtOnce + r) * D + e] * f;
    }
    const int h = ps.h0 + r;
    if (ps.nChunks == 1) {
      const float gate = gated ? sigmoid(ldg_value(qkv, (size_t)ps.row * W + (size_t)h * 2 * d + d + e)) : 1.f;
      store_value(out, ((size_t)ps.row * heads + h) * d + e, O / L * gate);
    } else {
      float* rec = partials + partial_offset(ps.row, heads, h, maxChunks, ps.c, d);
      if (e == 0) rec[0] = M, rec[1] = L;
      rec[2 + e] = O;
    }
  }
  __syncthreads();  // the Q tile, the rings and the merge buffers are reused by the CTA's next pass
}

template <typename T, int D>
__device__ __forceinline__ void decode_rows(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                            const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots,
                                            const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,
                                            int kvHeads, int d, int pageSize, int maxPages, int gated, int ownKv, const T* __restrict__ q,
                                            T* __restrict__ out, float scale, int window, int maxChunks, float* __restrict__ partials, T* smem,
                                            float* mW, float* lW) {
  const int W = qkv_width(heads, kvHeads, d, gated, ownKv);
  const float scale2 = scale * 1.4426950408889634f;
  for_each_chunk<kHeadsAtOnce>(blockTable, slots, rowStarts, positions, batch, heads, kvHeads, d, maxPages, window, maxChunks, out,
                               [&](const ChunkPass& ps, const int32_t* table) {
                                 decode_pass<T, D>(ps, qkv, kCache, vCache, table, pageSize, heads, kvHeads, d, W, gated, q, out, partials, scale2,
                                                   maxChunks, smem, mW, lW);
                               });
}

template <typename T>
__device__ __forceinline__ void decode_entry(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                             const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots,
                                             const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,
                                             int kvHeads, int d, int pageSize, int maxPages, int gated, int ownKv, const T* __restrict__ q,
                                             T* __restrict__ out, float scale, int window, int maxChunks, float* __restrict__ partials) {
  STD_SHARED(float, mW, kWarps * kHeadsAtOnce);
  STD_SHARED(float, lW, kWarps * kHeadsAtOnce);
  STD_DYNAMIC_SMEM(smem);
  if (blockDim.x != kThreads || gridDim.y != (unsigned)kvHeads || heads % kvHeads != 0 || d % 8 != 0 || d > kMaxHeadDim || maxChunks < 1 ||
      maxChunks > kMaxChunks) {
    __trap();
  }
  T* s = reinterpret_cast<T*>(smem);
#define STD_DECODE(D)                                                                                                                          \
  do {                                                                                                                                         \
    if (dynamic_smem_bytes() < (unsigned)(smem_elements<D>() * sizeof(T))) __trap();                                                         \
    decode_rows<T, D>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, d, pageSize, maxPages, gated, ownKv, \
                      q, out, scale, window, maxChunks, partials, s, mW, lW);                                                                  \
  } while (0)
  if (d <= 32) STD_DECODE(32);
  else if (d <= 64) STD_DECODE(64);
  else if (d <= 128) STD_DECODE(128);
  else STD_DECODE(256);
#undef STD_DECODE
}

}  // namespace

// One symbol per row type (attention-kernels.ts declares them, with std_attn_core's parameters).
#define STD_ATTENTION_DECODE(SUFFIX, T)                                                                                                            \
  extern "C" __global__ void __launch_bounds__(kThreads) std_attn_decode##SUFFIX(                                                                   \
      const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache, const int32_t* __restrict__ blockTable,                \
      const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,       \
      int kvHeads, int headDim, int pageSize, int maxPages, int gated, int dtype, int ownKv, const T* __restrict__ q, T* __restrict__ out,      \
      float scale, int window, int chunks, float* __restrict__ partials) {                                                                        \
    early_start();                                                                                                                                 \
    if (dtype != row_code<T>) __trap();                                                                                                            \
    decode_entry<T>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, headDim, pageSize, maxPages, gated,     \
                    ownKv, q, out, scale, window, chunks, partials);                                                                               \
  }

STD_ATTENTION_DECODE(_bf16, bf16)
STD_ATTENTION_DECODE(_f16, f16)

#undef STD_ATTENTION_DECODE
