// Full causal attention over the paged KV cache (src/attention-kernels.ts; reference
// src/attention.cpu.ts; KERNELS.md):
//   std_attn_prep  per row: q heads RMS-normed ((offset + w), optional; x̂ rounded to the row type
//                  before the weight when roundNormalized) and rotated (NeoX halves on
//                  the first rotaryDim dims) into q [rows][H][d]; when the layer owns its KV
//                  (ownKv), k likewise, and v as is (or RMS-normalised without a weight: vNorm), into
//                  the cache at the row's (slot, position); padding rows (slot < 0) zero their q row
//   std_attn_core  per (row, kv head, chunk of keys): softmax(q·k_t · scale) v_t for the GQA group's
//                  query heads over t = lo..pos of the row's sequence (lo = pos − window + 1 with a
//                  sliding window, else 0), × sigmoid(gate) when gated; padding rows write zeros.
//                  A row whose keys make several chunks leaves one partial record per (head, chunk)
//   std_attn_combine  per (row, head) of several chunks: the records merged into the output
//
// Types: qkv, q, the K and V caches and out are of the row type T (f32, bf16, f16), one symbol per
// type (std_attn_prep / _core / _combine for f32, suffixed _bf16 and _f16; each checks its dtype
// argument); norm weights, cos, sin and the partial records f32. Norms, RoPE, scores, softmax and
// the weighted sum of V are f32. The normed q and k are rounded to T before RoPE, as Hugging Face's
// q_norm / k_norm return the row type (rms_out in std-common.cuh); each stored value is rounded once.
//
// std_attn_prep: CTAs (row, head slot) (min(1024, d rounded up to 32) threads); slot y takes the
// row's heads y, y + gridDim.y, … (q heads, then the k heads that write the cache), a thread per
// element; the row's slot and position come from the step tables.
//
// std_attn_core (split-KV, flash-decoding): grid [rows, kvHeads, splits], 256 threads. A CTA takes a
// whole GQA group, so each key row is read once for all the group's query heads. A row's keys are
// cut into chunks by key_chunks, from the row's key count and the launch's `chunks` (the most a row
// is cut into) only, so a row's result never depends on the batch or the grid; CTA z takes chunks
// z, z + splits, …. In a chunk, K and V tiles of kStageBytes stream into shared memory by cp.async,
// kStages in flight; each warp takes a tile's keys warp, warp + 8, …, with every head's q and its
// online softmax (running max in log2 units, sum, d / 32 output values a lane) in registers; then
// the warps' sums are rescaled to the common max and added in warp order (deterministic). A row of
// one chunk gets its normalised, gated output at once; otherwise each (head, chunk) writes its
// record to `partials` ([rows][heads][chunks] × (max, sum, d sums), f32) and std_attn_combine
// (grid [rows, heads]) merges the row's records in chunk order. Keys past pos are never read
// (their cache rows may hold anything).
#include "std-attention-keys.cuh"
#include "std-common.cuh"
#include "std-mma.cuh"

using namespace stdk;

namespace {

constexpr int kMaxHeadDim = 1024;      // std_attn_prep
constexpr int kMaxCoreHeadDim = 512;   // std_attn_core
/** Query heads std_attn_core attends at once (fewer where a lane's slices would pass 64 values). */
constexpr int kMaxHeadsAtOnce = 8;
constexpr int kMaxWarps = 8;
/** Floats of the cross-warp combine buffer (heads at once × d: at most 64 values a lane × 32 lanes). */
constexpr int kComb = 2048;
/** K and V tiles in flight, and the bytes of one tile's K and V rows (attention-kernels.ts sizes the launch's shared memory from both). */
constexpr int kStages = 4;
constexpr int kStageBytes = 32768;

/**
 * A warp's slice of a d-vector: E values per lane. V4 (d a multiple of 4): lane l holds the groups
 * of 4 elements l, l + 32, … (zero past d); otherwise elements l, l + 32, … (zero past d).
 */
template <int E, bool V4>
__device__ __forceinline__ int frag_index(int k, int lane) {
  if constexpr (V4) return 4 * ((k >> 2) * 32 + lane) + (k & 3);
  else return k * 32 + lane;
}

/** A lane's slice of a d-vector (the layout of frag_index) from global memory (`kGlobal`) or shared memory. */
template <int E, bool V4, bool kGlobal, typename T>
__device__ __forceinline__ void read_frag(float (&f)[E], const T* __restrict__ p, int d, int lane) {
  if constexpr (V4) {
#pragma unroll
    for (int c = 0; c < E / 4; c++) {
      const int i = c * 32 + lane;
      const float4 t = 4 * i < d ? (kGlobal ? ldg4(p, i) : load4(p, i)) : make_float4(0.f, 0.f, 0.f, 0.f);
      f[4 * c] = t.x, f[4 * c + 1] = t.y, f[4 * c + 2] = t.z, f[4 * c + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int c = 0; c < E; c++) {
      const int i = c * 32 + lane;
      f[c] = i < d ? (kGlobal ? ldg_value(p, i) : load_value(p, i)) : 0.f;
    }
  }
}

/** Keys of one shared-memory tile: its K and V rows take kStageBytes (at least 8 keys). */
__device__ __forceinline__ int tile_keys(int d, int bytes) { return max(8, kStageBytes / (2 * d * bytes)); }

/**
 * Keys t0 … t0 + n − 1 of one kv head into a tile: K rows [kt][d], then V rows [kt][d]. 16-byte
 * cp.async pieces when rows are whole pieces (rows n … kt − 1 zero-filled), else element copies.
 */
template <typename T>
__device__ __forceinline__ void load_tile(T* __restrict__ tile, const T* __restrict__ kCache, const T* __restrict__ vCache, const int32_t* __restrict__ table,
                                          int pageSize, int kvHeads, int kvh, int d, int t0, int n, int kt, bool pieces) {
  const int tid = threadIdx.x, B = blockDim.x;
  T* vTile = tile + (size_t)kt * d;
  if (pieces) {
    const int per = d * (int)sizeof(T) / 16;
    for (int i = tid; i < kt * per; i += B) {
      const int r = i / per, c = i - r * per;
      const bool valid = r < n;
      const size_t off = valid ? cache_offset(table, pageSize, kvHeads, d, t0 + r, kvh) : 0;
      cp_async16(reinterpret_cast<char*>(tile + (size_t)r * d) + 16 * c, reinterpret_cast<const char*>(kCache + off) + 16 * c, valid);
      cp_async16(reinterpret_cast<char*>(vTile + (size_t)r * d) + 16 * c, reinterpret_cast<const char*>(vCache + off) + 16 * c, valid);
    }
  } else {
    for (int i = tid; i < n * d; i += B) {
      const int r = i / d, c = i - r * d;
      const size_t off = cache_offset(table, pageSize, kvHeads, d, t0 + r, kvh);
      tile[(size_t)r * d + c] = kCache[off + c];
      vTile[(size_t)r * d + c] = vCache[off + c];
    }
  }
}

/** Shared memory of std_attn_core outside its tiles. */
struct CoreShared {
  float* comb;  // [heads at once][d]: the warps' sums, added in warp order
  float* mS;    // [warps][heads at once]
  float* lS;
  float* MA;  // [heads at once]: common max and sum
  float* LA;
};

/**
 * One CTA's chunk c of one row for `ng` query heads h0 … of kv head kvh: keys a … a + nkeys − 1
 * through kStages tiles in flight; each warp takes a tile's keys warp, warp + warps, … and keeps an
 * online softmax per head (q of every head in registers); then the warps' sums are rescaled to the
 * common max and added in warp order (deterministic). Writes the normalised, gated output when the
 * row has one chunk, else the chunk's partial record.
 */
template <int E, bool V4, int HG, typename T>
__device__ __forceinline__ void attend_chunk(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                             const int32_t* __restrict__ table, int pageSize, int heads, int kvHeads, int kvh, int d, int W, int gated,
                                             const T* __restrict__ q, T* __restrict__ out, float* __restrict__ partials, float scale, int row, int h0, int ng,
                                             int a, int nkeys, int c, int nChunks, int maxChunks, T* tiles, const CoreShared& sh) {
  const int lane = lane_id(), warp = warp_id(), nw = num_warps(), tid = threadIdx.x, B = blockDim.x;
  const int kt = tile_keys(d, (int)sizeof(T));
  const bool pieces = (d * (int)sizeof(T)) % 16 == 0 && aligned16(kCache) && aligned16(vCache);
  const size_t tileElems = 2 * (size_t)kt * d;
  // Scores in log2 units: e^(x · scale) = 2^(x · scale · log2 e).
  const float scale2 = scale * 1.4426950408889634f;
  float qf[HG][E], acc[HG][E], m[HG], l[HG];
#pragma unroll
  for (int g = 0; g < HG; g++) {
    if (g < ng) read_frag<E, V4, true, T>(qf[g], q + ((size_t)row * heads + h0 + g) * d, d, lane);
    else {
#pragma unroll
      for (int k = 0; k < E; k++) qf[g][k] = 0.f;
    }
#pragma unroll
    for (int k = 0; k < E; k++) acc[g][k] = 0.f;
    m[g] = -INFINITY, l[g] = 0.f;
  }
  const int nt = (nkeys + kt - 1) / kt;
#pragma unroll
  for (int s = 0; s < kStages - 1; s++) {
    if (s < nt) load_tile<T>(tiles + s * tileElems, kCache, vCache, table, pageSize, kvHeads, kvh, d, a + s * kt, min(kt, nkeys - s * kt), kt, pieces);
    cp_async_commit();
  }
  for (int i = 0; i < nt; i++) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile i is in; every warp is done with tile i − 1, whose stage is refilled next
    const int j = i + kStages - 1;
    if (j < nt) load_tile<T>(tiles + (j % kStages) * tileElems, kCache, vCache, table, pageSize, kvHeads, kvh, d, a + j * kt, min(kt, nkeys - j * kt), kt, pieces);
    cp_async_commit();
    const T* kTile = tiles + (i % kStages) * tileElems;
    const T* vTile = kTile + (size_t)kt * d;
    const int n = min(kt, nkeys - i * kt);
    for (int u = warp; u < n; u += nw) {
      float kf[E], vf[E], s[HG];
      read_frag<E, V4, false, T>(kf, kTile + (size_t)u * d, d, lane);
      read_frag<E, V4, false, T>(vf, vTile + (size_t)u * d, d, lane);
#pragma unroll
      for (int g = 0; g < HG; g++) {
        float x = 0.f;
#pragma unroll
        for (int k = 0; k < E; k++) x += qf[g][k] * kf[k];
        s[g] = x;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
        for (int g = 0; g < HG; g++) s[g] += __shfl_xor_sync(kFull, s[g], o);
      }
#pragma unroll
      for (int g = 0; g < HG; g++) {
        if (g >= ng) continue;
        const float sc = s[g] * scale2;
        const float mn = fmaxf(m[g], sc);
        const float corr = exp2f(m[g] - mn);  // 0 at the first key (m = −∞)
        const float p = exp2f(sc - mn);
        l[g] = l[g] * corr + p;
#pragma unroll
        for (int k = 0; k < E; k++) acc[g][k] = acc[g][k] * corr + p * vf[k];
        m[g] = mn;
      }
    }
  }
  cp_async_wait<0>();
  // The warps' results: each head's common max, every warp's sum rescaled to it, added in warp order.
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < HG; g++) sh.mS[warp * HG + g] = m[g], sh.lS[warp * HG + g] = l[g];
  }
  __syncthreads();
  float f[HG];
#pragma unroll
  for (int g = 0; g < HG; g++) {
    float M = -INFINITY;
    for (int w = 0; w < nw; w++) M = fmaxf(M, sh.mS[w * HG + g]);
    f[g] = m[g] == -INFINITY ? 0.f : exp2f(m[g] - M);
  }
  if (tid < ng) {
    float M = -INFINITY, L = 0.f;
    for (int w = 0; w < nw; w++) M = fmaxf(M, sh.mS[w * HG + tid]);
    for (int w = 0; w < nw; w++) {
      const float mw = sh.mS[w * HG + tid];
      if (mw != -INFINITY) L += sh.lS[w * HG + tid] * exp2f(mw - M);
    }
    sh.MA[tid] = M, sh.LA[tid] = L;
  }
  for (int w = 0; w < nw; w++) {
    if (warp == w) {
#pragma unroll
      for (int g = 0; g < HG; g++) {
        if (g >= ng) continue;
#pragma unroll
        for (int k = 0; k < E; k++) {
          const int idx = frag_index<E, V4>(k, lane);
          if (idx < d) sh.comb[g * d + idx] = (w == 0 ? 0.f : sh.comb[g * d + idx]) + acc[g][k] * f[g];
        }
      }
    }
    __syncthreads();
  }
  for (int i = tid; i < ng * d; i += B) {
    const int g = i / d, e = i - g * d;
    const int h = h0 + g;
    if (nChunks == 1) {
      const float gate = gated ? sigmoid(ldg_value(qkv, (size_t)row * W + (size_t)h * 2 * d + d + e)) : 1.f;
      store_value(out, ((size_t)row * heads + h) * d + e, sh.comb[i] / sh.LA[g] * gate);
    } else {
      float* rec = partials + partial_offset(row, heads, h, maxChunks, c, d);
      if (e == 0) rec[0] = sh.MA[g], rec[1] = sh.LA[g];
      rec[2 + e] = sh.comb[i];
    }
  }
  __syncthreads();  // comb, MA, LA and the tiles are reused by the CTA's next chunk or heads
}

template <int E, bool V4, typename T>
__device__ __forceinline__ void core_body(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                          const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts,
                                          const int32_t* __restrict__ positions, int batch, int heads, int kvHeads, int d, int pageSize, int maxPages,
                                          int gated, int ownKv, const T* __restrict__ q, T* __restrict__ out, float scale, int window, int maxChunks,
                                          float* __restrict__ partials, T* tiles, const CoreShared& sh) {
  // Query heads at once: their q and sums stay in registers (64 values a lane).
  constexpr int HG = 64 / E < kMaxHeadsAtOnce ? 64 / E : kMaxHeadsAtOnce;
  const int W = qkv_width(heads, kvHeads, d, gated, ownKv);
  for_each_chunk<HG>(blockTable, slots, rowStarts, positions, batch, heads, kvHeads, d, maxPages, window, maxChunks, out,
                     [&](const ChunkPass& ps, const int32_t* table) {
                       attend_chunk<E, V4, HG, T>(qkv, kCache, vCache, table, pageSize, heads, kvHeads, ps.kvh, d, W, gated, q, out, partials, scale,
                                                  ps.row, ps.h0, ps.ng, ps.a, ps.nkeys, ps.c, ps.nChunks, maxChunks, tiles, sh);
                     });
}

template <typename T>
__device__ __forceinline__ void prep_rows(const T* __restrict__ qkv, T* __restrict__ kCache, T* __restrict__ vCache, const int32_t* __restrict__ blockTable,
                                          const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions,
                                          int batch, int heads, int kvHeads, int headDim, int pageSize, int maxPages, int gated, int ownKv,
                                          T* __restrict__ q, const float* __restrict__ qNorm, const float* __restrict__ kNorm,
                                          const float* __restrict__ cos, const float* __restrict__ sin, int rotaryDim, int maxPositions, float eps,
                                          float normOffset, int roundNormalized, int vNorm) {
  STD_SHARED(float, buf, kMaxHeadDim);
  STD_SHARED(float, red, 32);
  const int d = headDim;
  if (d > kMaxHeadDim) __trap();
  const int rows = rowStarts[batch];
  const int W = qkv_width(heads, kvHeads, d, gated, ownKv);
  const int half = rotaryDim / 2;
  const int qStride = gated ? 2 * d : d;
  const int kBase = heads * qStride, vBase = kBase + kvHeads * d;
  const int tid = threadIdx.x, B = blockDim.x;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const int p = batch_pos_of_row(rowStarts, batch, row);
    const int slot = slots[p];
    const int pos = positions[row];
    T* qrow = q + (size_t)row * heads * d;
    if (slot < 0) {
      for (int hd = blockIdx.y; hd < heads; hd += gridDim.y) {
        for (int i = tid; i < d; i += B) store_value(qrow, (size_t)hd * d + i, 0.f);
      }
      continue;
    }
    const int32_t* table = blockTable + (size_t)slot * maxPages;
    const int pc = min(max(pos, 0), maxPositions - 1);  // the table's range (a valid row is inside it)
    const float* cs = cos + (size_t)pc * half;
    const float* sn = sin + (size_t)pc * half;
    const T* src = qkv + (size_t)row * W;
    for (int hd = blockIdx.y; hd < heads + (ownKv ? kvHeads : 0); hd += gridDim.y) {
      const bool isK = hd >= heads;
      const int kh = hd - heads;
      const T* x = src + (isK ? kBase + kh * d : hd * qStride);
      const float* w = isK ? kNorm : qNorm;
      float ss = 0.f;
      for (int i = tid; i < d; i += B) {
        const float v = ldg_value(x, i);
        buf[i] = v;
        ss += v * v;
      }
      if (w) {
        const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)d + eps);
        for (int i = tid; i < d; i += B) buf[i] = round_to<T>(rms_out<T>(buf[i] * inv, w[i], normOffset, roundNormalized));
      }
      __syncthreads();
      const size_t off = isK ? cache_offset(table, pageSize, kvHeads, d, pos, kh) : 0;
      T* dst = isK ? kCache + off : qrow + (size_t)hd * d;
      for (int i = tid; i < d; i += B) {
        const float v = buf[i];
        float o = v;
        if (i < half) o = v * cs[i] - buf[i + half] * sn[i];
        else if (i < rotaryDim) o = v * cs[i - half] + buf[i - half] * sn[i - half];
        store_value(dst, i, o);
      }
      if (isK && !vNorm) {
        const T* vs = src + vBase + kh * d;
        for (int i = tid; i < d; i += B) vCache[off + i] = vs[i];
      } else if (isK) {
        // v / sqrt(mean(v²) + eps), no weight (Gemma 3n's v_norm), rounded once into the cache.
        __syncthreads();  // buf is reused
        const T* vs = src + vBase + kh * d;
        float vs2 = 0.f;
        for (int i = tid; i < d; i += B) {
          const float v = ldg_value(vs, i);
          buf[i] = v;
          vs2 += v * v;
        }
        const float inv = 1.0f / sqrtf(block_sum(vs2, red) / (float)d + eps);
        for (int i = tid; i < d; i += B) store_value(vCache + off, i, buf[i] * inv);
      }
      __syncthreads();
    }
  }
}

template <typename T>
__device__ __forceinline__ void core_rows(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                          const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts,
                                          const int32_t* __restrict__ positions, int batch, int heads, int kvHeads, int headDim, int pageSize,
                                          int maxPages, int gated, int ownKv, const T* __restrict__ q, T* __restrict__ out, float scale,
                                          int window, int maxChunks, float* __restrict__ partials) {
  STD_SHARED(float, comb, kComb);  // one buffer for every instantiation of core_body
  STD_SHARED(float, mS, kMaxWarps * kMaxHeadsAtOnce);
  STD_SHARED(float, lS, kMaxWarps * kMaxHeadsAtOnce);
  STD_SHARED(float, MA, kMaxHeadsAtOnce);
  STD_SHARED(float, LA, kMaxHeadsAtOnce);
  STD_DYNAMIC_SMEM(smem);
  const int d = headDim;
  if (gridDim.y != (unsigned)kvHeads || heads % kvHeads != 0 || num_warps() > kMaxWarps || maxChunks < 1 || maxChunks > kMaxChunks) __trap();
  if (dynamic_smem_bytes() < (unsigned)(kStages * 2 * tile_keys(d, (int)sizeof(T)) * d * (int)sizeof(T))) __trap();
  const CoreShared sh{comb, mS, lS, MA, LA};
  T* tiles = reinterpret_cast<T*>(smem);
#define STD_CORE(E, V4) \
  core_body<E, V4, T>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, d, pageSize, maxPages, gated, ownKv, q, out, scale, \
                      window, maxChunks, partials, tiles, sh)
  // Slices of d / 32 values per lane: 4-element loads from d = 65 on (d a multiple of 4), scalar below.
  const bool v4 = (d & 3) == 0 && aligned16(q) && aligned16(kCache) && aligned16(vCache);
  if (d <= 32) STD_CORE(1, false);
  else if (d <= 64) STD_CORE(2, false);
  else if (d <= 128 && !v4) STD_CORE(4, false);
  else if (!v4) __trap();  // d > 128 needs a multiple of 4 (head dims are)
  else if (d <= 128) STD_CORE(4, true);
  else if (d <= 256) STD_CORE(8, true);
  else if (d <= kMaxCoreHeadDim) STD_CORE(16, true);
  else __trap();  // d > 512: a lane's slice would no longer fit in registers
#undef STD_CORE
}

/** The chunks of each (row, head) with more than one: their partial records merged, normalised and gated into out. */
template <typename T>
__device__ __forceinline__ void combine_rows(const T* __restrict__ qkv, const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts,
                                             const int32_t* __restrict__ positions, int batch, int heads, int kvHeads, int d, int gated, int ownKv,
                                             T* __restrict__ out, int window, int maxChunks, const float* __restrict__ partials) {
  STD_SHARED(float, weight, kMaxChunks);
  STD_SHARED(float, red, 32);
  if (maxChunks < 1 || maxChunks > kMaxChunks || gridDim.y != (unsigned)heads) __trap();
  const int rows = rowStarts[batch];
  const int W = qkv_width(heads, kvHeads, d, gated, ownKv);
  const int h = blockIdx.y, tid = threadIdx.x;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const int p = batch_pos_of_row(rowStarts, batch, row);
    if (slots[p] < 0) continue;  // std_attn_core wrote its zeros
    const int pos = positions[row];
    const KeyChunks ch = key_chunks(pos - first_key(pos, window) + 1, maxChunks);
    if (ch.n == 1) continue;  // std_attn_core wrote the output
    const float* rec = partials + partial_offset(row, heads, h, maxChunks, 0, d);
    const size_t R = (size_t)d + 2;
    float M = -INFINITY;
    for (int c = tid; c < ch.n; c += blockDim.x) M = fmaxf(M, rec[c * R]);
    M = block_max(M, red);
    float L = 0.f;
    for (int c = tid; c < ch.n; c += blockDim.x) {
      const float w = exp2f(rec[c * R] - M);
      weight[c] = w;
      L += rec[c * R + 1] * w;
    }
    L = block_sum(L, red);  // its barrier also publishes `weight`
    for (int e = tid; e < d; e += blockDim.x) {
      float o = 0.f;
      for (int c = 0; c < ch.n; c++) o += rec[c * R + 2 + e] * weight[c];
      const float gate = gated ? sigmoid(ldg_value(qkv, (size_t)row * W + (size_t)h * 2 * d + d + e)) : 1.f;
      store_value(out, ((size_t)row * heads + h) * d + e, o / L * gate);
    }
    __syncthreads();  // weight is rewritten by the CTA's next row
  }
}

}  // namespace

// One prep, core and combine symbol per row type (attention-kernels.ts declares them).
#define STD_ATTENTION_KERNELS(SUFFIX, T)                                                                                                            \
  extern "C" __global__ void __launch_bounds__(1024) std_attn_prep##SUFFIX(                                                                        \
      const T* __restrict__ qkv, T* __restrict__ kCache, T* __restrict__ vCache, const int32_t* __restrict__ blockTable,                           \
      const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,       \
      int kvHeads, int headDim, int pageSize, int maxPages, int gated, int dtype, int ownKv, T* __restrict__ q,                                \
      const float* __restrict__ qNorm, const float* __restrict__ kNorm, const float* __restrict__ cos, const float* __restrict__ sin,             \
      int rotaryDim, int maxPositions, float eps, float normOffset, int roundNormalized, int vNorm) {                                              \
    early_start();                                                                                                                                 \
    if (dtype != row_code<T>) __trap();                                                                                                            \
    prep_rows<T>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, headDim, pageSize, maxPages, gated, ownKv,  \
                 q, qNorm, kNorm, cos, sin, rotaryDim, maxPositions, eps, normOffset, roundNormalized, vNorm);                                     \
  }                                                                                                                                                \
  extern "C" __global__ void __launch_bounds__(256, 1) std_attn_core##SUFFIX(                                                                      \
      const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache, const int32_t* __restrict__ blockTable,                \
      const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,       \
      int kvHeads, int headDim, int pageSize, int maxPages, int gated, int dtype, int ownKv, const T* __restrict__ q, T* __restrict__ out,      \
      float scale, int window, int chunks, float* __restrict__ partials) {                                                                        \
    early_start();                                                                                                                                 \
    if (dtype != row_code<T>) __trap();                                                                                                            \
    core_rows<T>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, headDim, pageSize, maxPages, gated, ownKv,  \
                 q, out, scale, window, chunks, partials);                                                                                         \
  }                                                                                                                                                \
  extern "C" __global__ void __launch_bounds__(256) std_attn_combine##SUFFIX(                                                                      \
      const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache, const int32_t* __restrict__ blockTable,                \
      const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,       \
      int kvHeads, int headDim, int pageSize, int maxPages, int gated, int dtype, int ownKv, const T* __restrict__ q, T* __restrict__ out,      \
      float scale, int window, int chunks, float* __restrict__ partials) {                                                                        \
    early_start();                                                                                                                                 \
    if (dtype != row_code<T>) __trap();                                                                                                            \
    combine_rows<T>(qkv, slots, rowStarts, positions, batch, heads, kvHeads, headDim, gated, ownKv, out, window, chunks, partials);              \
  }

STD_ATTENTION_KERNELS(, float)
STD_ATTENTION_KERNELS(_bf16, bf16)
STD_ATTENTION_KERNELS(_f16, f16)

#undef STD_ATTENTION_KERNELS
