// Full causal attention over the paged KV cache (src/attention-kernels.ts; reference
// src/attention.cpu.ts; KERNELS.md):
//   std_attn_prep  per row: q heads RMS-normed ((offset + w), optional; x̂ rounded to the row type
//                  before the weight when roundNormalized) and rotated (NeoX halves on
//                  the first rotaryDim dims) into q [rows][H][d]; when the layer owns its KV
//                  (ownKv), k likewise, and v as is (or RMS-normalised without a weight: vNorm), into
//                  the cache at the row's (slot, position); padding rows (slot < 0) zero their q row
//   std_attn_core  per (row, head): softmax(q·k_t · scale) v_t over t = lo..pos of the row's
//                  sequence (lo = pos − window + 1 with a sliding window, else 0), × sigmoid(gate)
//                  when gated; padding rows write zeros
//
// Types: qkv, q, the K and V caches and out are of the row type T (f32, bf16, f16), one symbol per
// type (std_attn_prep / std_attn_core for f32, suffixed _bf16 and _f16; each checks its dtype
// argument); norm weights, cos and sin f32. Norms, RoPE, scores, softmax and the weighted sum of V
// are f32. The normed q and k are rounded to T before RoPE, as Hugging Face's q_norm / k_norm
// return the row type (rms_out in std-common.cuh); each stored value is rounded once.
//
// std_attn_prep: one CTA per row (min(1024, d rounded up to 32) threads), the heads one after
// another, a thread per element; the row's slot and position come from the step tables.
//
// std_attn_core: grid [rows, heads] (the layer's launch; grid [rows, kvHeads] also works: a CTA then
// takes the whole GQA group and reads each key once for all its heads), 256 threads. Split-K
// inside the CTA, flash-decoding style: the CTA's warps share the keys 0..pos (warp s takes key
// groups s, s + S, … of KPI consecutive keys), each warp keeps an online softmax (running max,
// sum, and its lanes' slice of the output, d / 32 values per lane in registers, 4-element loads
// when d is a multiple of 4 and above 64) and loads the K and V rows of KPI keys before using any, so 8 warps ×
// KPI rows are in flight per CTA; then the warps' partial results are rescaled to the common max
// and summed in warp order in shared memory (deterministic), and the CTA writes the normalised,
// gated output. Keys past pos are never read (their cache rows may hold anything).
#include "std-common.cuh"

using namespace stdk;

namespace {

constexpr int kMaxHeadDim = 1024;      // std_attn_prep
constexpr int kMaxCoreHeadDim = 512;   // std_attn_core
/** Floats of the cross-warp combine buffer (heads processed at once × d). */
constexpr int kComb = 4096;

__device__ __forceinline__ int qkv_width(int heads, int kvHeads, int d, int gated, int ownKv) {
  return heads * d * (gated ? 2 : 1) + (ownKv ? 2 * kvHeads * d : 0);
}

/** The first key a row at `pos` sees: the window's start, or 0. */
__device__ __forceinline__ int first_key(int pos, int window) { return window > 0 ? max(0, pos - window + 1) : 0; }

/**
 * A warp's slice of a d-vector: E values per lane. V4 (d a multiple of 4): lane l holds the groups
 * of 4 elements l, l + 32, … (zero past d); otherwise elements l, l + 32, … (zero past d).
 */
template <int E, bool V4>
__device__ __forceinline__ int frag_index(int k, int lane) {
  if constexpr (V4) return 4 * ((k >> 2) * 32 + lane) + (k & 3);
  else return k * 32 + lane;
}

template <int E, bool V4, typename T>
__device__ __forceinline__ void load_frag(float (&f)[E], const T* __restrict__ p, int d, int lane) {
  if constexpr (V4) {
#pragma unroll
    for (int c = 0; c < E / 4; c++) {
      const int i = c * 32 + lane;
      const float4 t = 4 * i < d ? ldg4(p, i) : make_float4(0.f, 0.f, 0.f, 0.f);
      f[4 * c] = t.x, f[4 * c + 1] = t.y, f[4 * c + 2] = t.z, f[4 * c + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int c = 0; c < E; c++) {
      const int i = c * 32 + lane;
      f[c] = i < d ? ldg_value(p, i) : 0.f;
    }
  }
}

/**
 * One warp's share of one head: keys t0 = slice·KPI, (slice + slices)·KPI, … (KPI consecutive keys
 * each) up to pos; returns the running max m, the sum l of e^(s − m) and acc = Σ e^(s − m) v.
 */
template <int E, bool V4, typename T>
__device__ __forceinline__ void attend(const T* __restrict__ qv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                       const int32_t* __restrict__ table, int pageSize, int kvHeads, int kvh, int d, int lo, int pos, int slice,
                                       int slices, float scale, float (&acc)[E], float& m, float& l) {
  // Keys per warp step: K and V rows of KPI keys are loaded before any is used (registers allow).
  constexpr int KPI = V4 ? (E >= 16 ? 1 : (E >= 8 ? 2 : 4)) : (E >= 8 ? 1 : (E >= 4 ? 2 : 4));
  const int lane = lane_id();
  float qf[E];
  load_frag<E, V4, T>(qf, qv, d, lane);
#pragma unroll
  for (int k = 0; k < E; k++) acc[k] = 0.f;
  m = -INFINITY;
  l = 0.f;
  // Whole rounds of the warps' key groups before the window's first key are skipped.
  const int round = slices * KPI;
  for (int t0 = (lo / round) * round + slice * KPI; t0 <= pos; t0 += round) {
    float kf[KPI][E], vf[KPI][E], s[KPI];
#pragma unroll
    for (int u = 0; u < KPI; u++) {
      const int t = t0 + u;
      if (t >= lo && t <= pos) {
        const size_t off = cache_offset(table, pageSize, kvHeads, d, t, kvh);
        load_frag<E, V4, T>(kf[u], kCache + off, d, lane);
        load_frag<E, V4, T>(vf[u], vCache + off, d, lane);
      } else {
#pragma unroll
        for (int k = 0; k < E; k++) kf[u][k] = 0.f, vf[u][k] = 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < KPI; u++) {
      float a = 0.f;
#pragma unroll
      for (int k = 0; k < E; k++) a += qf[k] * kf[u][k];
      s[u] = a;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int u = 0; u < KPI; u++) s[u] += __shfl_xor_sync(kFull, s[u], o);
    }
    float mn = m;
#pragma unroll
    for (int u = 0; u < KPI; u++) {
      s[u] = t0 + u >= lo && t0 + u <= pos ? s[u] * scale : -INFINITY;
      mn = fmaxf(mn, s[u]);
    }
    if (mn == -INFINITY) continue;  // every key of this group is before the window (and none seen yet)
    const float corr = expf(m - mn);
    l *= corr;
#pragma unroll
    for (int k = 0; k < E; k++) acc[k] *= corr;
#pragma unroll
    for (int u = 0; u < KPI; u++) {
      const float p = expf(s[u] - mn);
      l += p;
#pragma unroll
      for (int k = 0; k < E; k++) acc[k] += p * vf[u][k];
    }
    m = mn;
  }
}

template <int E, bool V4, typename T>
__device__ __forceinline__ void core_body(const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache,
                                          const int32_t* __restrict__ blockTable, const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts,
                                          const int32_t* __restrict__ positions, int batch, int heads, int kvHeads, int d, int pageSize, int maxPages,
                                          int gated, int ownKv, const T* __restrict__ q, T* __restrict__ out, float scale, int window,
                                          float* comb, float* mS, float* lS, float* LA) {
  const int rows = rowStarts[batch];
  const int hpc = heads / (int)gridDim.y;  // heads per CTA: 1, or the GQA group
  const int group = heads / kvHeads;
  const int W = qkv_width(heads, kvHeads, d, gated, ownKv);
  const int lane = lane_id(), warp = warp_id(), nw = num_warps(), tid = threadIdx.x;
  const int A = min(min(hpc, nw), max(1, kComb / d));  // heads at once
  const int slices = nw / A;
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const int p = batch_pos_of_row(rowStarts, batch, row);
    const int slot = slots[p];
    const int pos = positions[row];
    const int hBase = blockIdx.y * hpc;
    if (slot < 0) {
      for (int i = tid; i < hpc * d; i += blockDim.x) store_value(out, ((size_t)row * heads + hBase) * d + i, 0.f);
      continue;
    }
    const int32_t* table = blockTable + (size_t)slot * maxPages;
    for (int h0 = 0; h0 < hpc; h0 += A) {
      const int a = warp % A, sl = warp / A;
      const int h = hBase + h0 + a;
      const bool active = warp < A * slices && h0 + a < hpc;
      float acc[E];
      float m = -INFINITY, l = 0.f;
      if (active) {
        attend<E, V4, T>(q + ((size_t)row * heads + h) * d, kCache, vCache, table, pageSize, kvHeads, h / group, d, first_key(pos, window), pos, sl, slices,
                         scale, acc, m, l);
      } else {
#pragma unroll
        for (int k = 0; k < E; k++) acc[k] = 0.f;
      }
      if (lane == 0) mS[warp] = m, lS[warp] = l;
      __syncthreads();
      // Each head's common max; the warps rescale to it and add up in warp order.
      float f = 0.f;
      if (active) {
        float M = -INFINITY;
        for (int s = 0; s < slices; s++) M = fmaxf(M, mS[s * A + a]);
        f = m == -INFINITY ? 0.f : expf(m - M);
      }
      if (tid < A && h0 + tid < hpc) {
        float M = -INFINITY, L = 0.f;
        for (int s = 0; s < slices; s++) M = fmaxf(M, mS[s * A + tid]);
        for (int s = 0; s < slices; s++) {
          const float ms = mS[s * A + tid];
          if (ms != -INFINITY) L += lS[s * A + tid] * expf(ms - M);
        }
        LA[tid] = L;
      }
      for (int s = 0; s < slices; s++) {
        if (active && sl == s) {
#pragma unroll
          for (int k = 0; k < E; k++) {
            const int idx = frag_index<E, V4>(k, lane);
            if (idx < d) comb[a * d + idx] = (s == 0 ? 0.f : comb[a * d + idx]) + acc[k] * f;
          }
        }
        __syncthreads();
      }
      const int nA = min(A, hpc - h0);
      for (int i = tid; i < nA * d; i += blockDim.x) {
        const int a2 = i / d, c = i - a2 * d;
        const int h2 = hBase + h0 + a2;
        const float g = gated ? sigmoid(ldg_value(qkv, (size_t)row * W + (size_t)h2 * 2 * d + d + c)) : 1.f;
        store_value(out, ((size_t)row * heads + h2) * d + c, comb[i] / LA[a2] * g);
      }
      __syncthreads();
    }
  }
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
      for (int i = tid; i < heads * d; i += B) store_value(qrow, i, 0.f);
      continue;
    }
    const int32_t* table = blockTable + (size_t)slot * maxPages;
    const int pc = min(max(pos, 0), maxPositions - 1);  // the table's range (a valid row is inside it)
    const float* cs = cos + (size_t)pc * half;
    const float* sn = sin + (size_t)pc * half;
    const T* src = qkv + (size_t)row * W;
    for (int hd = 0; hd < heads + (ownKv ? kvHeads : 0); hd++) {
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
                                          int window) {
  STD_SHARED(float, comb, kComb);  // one buffer for every instantiation of core_body
  STD_SHARED(float, mS, 32);
  STD_SHARED(float, lS, 32);
  STD_SHARED(float, LA, 32);
  const int d = headDim;
  if (heads % (int)gridDim.y != 0 || (gridDim.y != (unsigned)heads && gridDim.y != (unsigned)kvHeads)) __trap();
#define STD_CORE(E, V4) \
  core_body<E, V4, T>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, d, pageSize, maxPages, gated, ownKv, q, out, scale, \
                      window, comb, mS, lS, LA)
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

}  // namespace

// One prep and one core symbol per row type (attention-kernels.ts declares them).
#define STD_ATTENTION_KERNELS(SUFFIX, T)                                                                                                            \
  extern "C" __global__ void __launch_bounds__(1024) std_attn_prep##SUFFIX(                                                                        \
      const T* __restrict__ qkv, T* __restrict__ kCache, T* __restrict__ vCache, const int32_t* __restrict__ blockTable,                           \
      const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,       \
      int kvHeads, int headDim, int pageSize, int maxPages, int gated, int dtype, int ownKv, T* __restrict__ q,                                \
      const float* __restrict__ qNorm, const float* __restrict__ kNorm, const float* __restrict__ cos, const float* __restrict__ sin,             \
      int rotaryDim, int maxPositions, float eps, float normOffset, int roundNormalized, int vNorm) {                                              \
    if (dtype != row_code<T>) __trap();                                                                                                            \
    prep_rows<T>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, headDim, pageSize, maxPages, gated, ownKv,  \
                 q, qNorm, kNorm, cos, sin, rotaryDim, maxPositions, eps, normOffset, roundNormalized, vNorm);                                     \
  }                                                                                                                                                \
  extern "C" __global__ void __launch_bounds__(256, 2) std_attn_core##SUFFIX(                                                                      \
      const T* __restrict__ qkv, const T* __restrict__ kCache, const T* __restrict__ vCache, const int32_t* __restrict__ blockTable,                \
      const int32_t* __restrict__ slots, const int32_t* __restrict__ rowStarts, const int32_t* __restrict__ positions, int batch, int heads,       \
      int kvHeads, int headDim, int pageSize, int maxPages, int gated, int dtype, int ownKv, const T* __restrict__ q, T* __restrict__ out,      \
      float scale, int window) {                                                                                                                   \
    if (dtype != row_code<T>) __trap();                                                                                                            \
    core_rows<T>(qkv, kCache, vCache, blockTable, slots, rowStarts, positions, batch, heads, kvHeads, headDim, pageSize, maxPages, gated, ownKv,  \
                 q, out, scale, window);                                                                                                           \
  }

STD_ATTENTION_KERNELS(, float)
STD_ATTENTION_KERNELS(_bf16, bf16)
STD_ATTENTION_KERNELS(_f16, f16)

#undef STD_ATTENTION_KERNELS
