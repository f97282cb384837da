// GEMMs whose B is a block-FP8 weight (GemmArgs.bDtype 'f8e4m3'): C[m][n] = alpha · A[m][k] ·
// Bᵀ + beta · C, A bf16 or f16 (row-major, lda), B E4M3 codes [n][k] packed with f32 scales
// [⌈n/128⌉][⌈k/128⌉], C f32 / bf16 / f16 (ldc). Each 128-wide slice of k is summed on its own and
// multiplied by its block scale in f32, so the result is the product with the dequantized B.
//   backend_gemm_fp8_rows   m ≤ 8: a warp per output column at a time, B read once (decode);
//                           where k and A's rows allow, 16-byte loads of codes, the next ones in
//                           flight while the last are summed (gemm_fp8_rows_vec)
//   backend_gemm_fp8_tiled  any m: 64 × 64 tiles on tensor cores (wmma), B's codes converted to
//                           A's type in shared memory (E4M3 values are exact in bf16 and f16);
//                           where k and the pointers allow, a 128-wide block of k a step with
//                           16-byte loads, the next block's loads in flight (gemm_fp8_tile_vec)
#include <mma.h>

#include <metrale/elements.cuh>

using namespace metrale;

namespace {

constexpr int kRowsMax = 8;
/** Codes a lane reads at once on the vector path (one 16-byte load, inside one 128-wide block). */
constexpr int kChunk = 16;
/** 16-byte loads of a lane per group; a group's loads are issued while the one before is summed. */
constexpr int kGroup = 4;

__device__ __forceinline__ float load_a(const void* a, size_t i, int code) { return load_element(a, i, code); }

/** Column j of C from the lanes' sums acc[r] of rows r < m: added over the warp, lane 0 stores. */
template <int M>
__device__ __forceinline__ void store_column(const float* acc, void* c, int cCode, int m, int j, int ldc, float alpha, float beta, int lane) {
#pragma unroll
  for (int r = 0; r < M; r++) {
    float v = acc[r];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && r < m) {
      const size_t at = (size_t)r * ldc + j;
      float out = alpha * v;
      if (beta != 0.f) out += beta * load_element(c, at, cCode);
      store_element(c, at, out, cCode);
    }
  }
}

/** 8 bf16 or f16 values from one 16-byte load, as f32. */
template <typename T>
__device__ __forceinline__ void load8(const T* p, float* out) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  T v[8];
  memcpy(v, &u, sizeof u);  // not a pointer cast: the bits of u as T without breaking aliasing rules
#pragma unroll
  for (int i = 0; i < 8; i++) out[i] = Element<T>::load(v, i);
}

/** The values of the 16 E4M3 codes of one 16-byte load. */
__device__ __forceinline__ void codes16(const uint4 u, float* out) {
  const uint8_t* v = reinterpret_cast<const uint8_t*>(&u);
#pragma unroll
  for (int i = 0; i < 16; i++) out[i] = e4m3_value(v[i]);
}

/**
 * The vector path: k a multiple of 16, A's rows 16-byte aligned, m ≤ M. A warp owns the columns
 * j ≡ warp (mod the grid's warps); lane l reads chunks l, l + 32, … of 16 codes of each. A lane's
 * chunks of all its columns form one sequence of items (`per` a column, the same count on every
 * lane: chunks past k are not loaded), taken kGroup at a time, the next group's loads issued
 * before this group is summed, so the loads stay in flight across the warp's columns. A chunk's
 * product is scaled by its block's scale; a column's lane sums are added when its last item is.
 */
template <typename T, int M>
__device__ void gemm_fp8_rows_vec(const T* __restrict__ a, const uint8_t* __restrict__ b, const float* __restrict__ scales, void* __restrict__ c,
                                  int cCode, int m, int n, int k, int lda, int ldc, float alpha, float beta) {
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int warps = gridDim.x * (blockDim.x >> 5);
  if (warp >= n) return;
  const int kBlocks = (k + kFp8Block - 1) / kFp8Block;
  const int chunks = k / kChunk;
  const int per = (chunks + 31) / 32;
  const int items = ((n - 1 - warp) / warps + 1) * per;

  // The loader's position: column j, its item i (chunk lane + 32·i).
  int lj = warp, li = 0;
  auto load_group = [&](uint4* q, int first) {
#pragma unroll
    for (int u = 0; u < kGroup; u++) {
      const int ch = lane + 32 * li;
      q[u] = first + u < items && ch < chunks ? __ldg(reinterpret_cast<const uint4*>(b + (size_t)lj * k) + ch) : make_uint4(0, 0, 0, 0);
      if (++li == per) li = 0, lj += warps;
    }
  };
  uint4 cur[kGroup], next[kGroup];
  load_group(cur, 0);

  int j = warp, i = 0;
  float acc[M];
#pragma unroll
  for (int r = 0; r < M; r++) acc[r] = 0.f;
  for (int t0 = 0; t0 < items; t0 += kGroup) {
    load_group(next, t0 + kGroup);
#pragma unroll
    for (int u = 0; u < kGroup; u++) {
      if (t0 + u >= items) break;
      const int ch = lane + 32 * i;
      if (ch < chunks) {
        float w[kChunk];
        codes16(cur[u], w);
        const float s = __ldg(scales + (size_t)(j / kFp8Block) * kBlocks + (ch * kChunk) / kFp8Block);
#pragma unroll
        for (int r = 0; r < M; r++) {
          if (r >= m) break;
          float x[kChunk];
          const T* ar = a + (size_t)r * lda + (size_t)ch * kChunk;
          load8(ar, x);
          load8(ar + 8, x + 8);
          float p = 0.f;
#pragma unroll
          for (int e = 0; e < kChunk; e++) p = fmaf(x[e], w[e], p);
          acc[r] = fmaf(s, p, acc[r]);
        }
      }
      if (++i == per) {  // column j's last item (the same step on every lane)
        store_column<M>(acc, c, cCode, m, j, ldc, alpha, beta, lane);
#pragma unroll
        for (int r = 0; r < M; r++) acc[r] = 0.f;
        i = 0, j += warps;
      }
    }
#pragma unroll
    for (int u = 0; u < kGroup; u++) cur[u] = next[u];
  }
}

template <typename T>
__device__ void gemm_fp8_rows_vec_m(const T* a, const uint8_t* b, const float* scales, void* c, int cCode, int m, int n, int k, int lda, int ldc,
                                    float alpha, float beta) {
  if (m == 1) gemm_fp8_rows_vec<T, 1>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta);
  else if (m == 2) gemm_fp8_rows_vec<T, 2>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta);
  else if (m <= 4) gemm_fp8_rows_vec<T, 4>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta);
  else gemm_fp8_rows_vec<T, kRowsMax>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256) backend_gemm_fp8_rows(
    const void* __restrict__ a, int aCode, const uint8_t* __restrict__ b, const float* __restrict__ scales, void* __restrict__ c,
    int cCode, int m, int n, int k, int lda, int ldc, float alpha, float beta) {
  const bool vec = aCode != kF32 && k % kChunk == 0 && lda % 8 == 0 && (reinterpret_cast<uintptr_t>(a) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(b) & 15) == 0;
  if (vec) {
    if (aCode == kBF16) gemm_fp8_rows_vec_m(static_cast<const bf16*>(a), b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta);
    else gemm_fp8_rows_vec_m(static_cast<const f16*>(a), b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta);
    return;
  }
  // Any other shape: lane l takes 4 codes of each 128-wide block.
  const int lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  const int kBlocks = (k + kFp8Block - 1) / kFp8Block;
  for (int j = blockIdx.x * warps + (threadIdx.x >> 5); j < n; j += gridDim.x * warps) {
    const uint8_t* row = b + (size_t)j * k;
    const float* srow = scales + (size_t)(j / kFp8Block) * kBlocks;
    float acc[kRowsMax];
#pragma unroll
    for (int r = 0; r < kRowsMax; r++) acc[r] = 0.f;
    for (int kb = 0; kb < kBlocks; kb++) {
      float part[kRowsMax];
#pragma unroll
      for (int r = 0; r < kRowsMax; r++) part[r] = 0.f;
      // Lane l takes k = kb·128 + 4l … 4l + 3: the warp reads the block's 128 codes of row j at once.
      const int k0 = kb * kFp8Block + 4 * lane;
#pragma unroll
      for (int t = 0; t < 4; t++) {
        const int q = k0 + t;
        if (q >= k) break;
        const float w = e4m3_value(row[q]);
#pragma unroll
        for (int r = 0; r < kRowsMax; r++)
          if (r < m) part[r] = fmaf(load_a(a, (size_t)r * lda + q, aCode), w, part[r]);
      }
      const float s = srow[kb];
#pragma unroll
      for (int r = 0; r < kRowsMax; r++) acc[r] = fmaf(s, part[r], acc[r]);
    }
    store_column<kRowsMax>(acc, c, cCode, m, j, ldc, alpha, beta, lane);
  }
}

namespace {

constexpr int kTileM = 64, kTileN = 64;
constexpr int kTileThreads = 128;  // 4 warps of 32 × 32 (2 × 2 fragments of 16 × 16)
constexpr int kPad = 8;            // shared rows of K + 8 elements: no bank conflicts on the fragment loads
constexpr int kAnyK = 32;          // k per step of the per-element path

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

/** Shared memory of one tile: A and B for a step of K, then (reused) the f32 tile of C. */
template <typename T, int K>
struct TileSmem {
  struct Stages {
    T a[kTileM][K + kPad];
    T b[kTileN][K + kPad];
  };
  union {
    Stages in;
    float out[kTileM][kTileN + 4];
  };
};
constexpr size_t kTileSmemBytes = sizeof(TileSmem<__half, kFp8Block>) > sizeof(TileSmem<__half, kAnyK>) ? sizeof(TileSmem<__half, kFp8Block>)
                                                                                                      : sizeof(TileSmem<__half, kAnyK>);

using namespace nvcuda;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/** A warp's 2 × 2 fragments of the K-wide step in shared memory, added into part. */
template <typename T, int K>
__device__ __forceinline__ void mma_step(const T (*as)[K + kPad], const T (*bs)[K + kPad], int wm, int wn, Acc (&part)[2][2]) {
#pragma unroll 2
  for (int kk = 0; kk < K; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb[2];
#pragma unroll
    for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], &as[wm + 16 * i][kk], K + kPad);
#pragma unroll
    for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], &bs[wn + 16 * j][kk], K + kPad);
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int j = 0; j < 2; j++) wmma::mma_sync(part[i][j], fa[i], fb[j], part[i][j]);
  }
}

__device__ __forceinline__ void fill(Acc (&f)[2][2]) {
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 2; j++) wmma::fill_fragment(f[i][j], 0.f);
}

/** acc += s · part: a 128-wide block's sums times its scale, in f32. */
__device__ __forceinline__ void add_scaled(Acc (&acc)[2][2], const Acc (&part)[2][2], float s) {
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
      for (int t = 0; t < acc[i][j].num_elements; t++) acc[i][j].x[t] = fmaf(s, part[i][j].x[t], acc[i][j].x[t]);
}

/** The tile's sums through shared memory to C (alpha, beta), the rows and columns inside C. */
__device__ __forceinline__ void store_tile(float (*out)[kTileN + 4], const Acc (&acc)[2][2], int wm, int wn, void* c, int cCode, int m, int n,
                                           int ldc, float alpha, float beta, int m0, int n0) {
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 2; j++) wmma::store_matrix_sync(&out[wm + 16 * i][wn + 16 * j], acc[i][j], kTileN + 4, wmma::mem_row_major);
  __syncthreads();
#pragma unroll 4
  for (int e = threadIdx.x; e < kTileM * kTileN; e += kTileThreads) {
    const int r = e / kTileN, q = e % kTileN;
    const int gr = m0 + r, gq = n0 + q;
    if (gr >= m || gq >= n) continue;
    const size_t at = (size_t)gr * ldc + gq;
    float v = alpha * out[r][q];
    if (beta != 0.f) v += beta * load_element(c, at, cCode);
    store_element(c, at, v, cCode);
  }
}

/**
 * The vector path (k a multiple of 16; A's rows and B 16-byte aligned): a step is one 128-wide
 * block of k. Each thread loads 8 chunks of A (8 values each) and 4 of B (16 codes each) with
 * 16-byte loads; the next block's loads are issued before this block's products, so they are in
 * flight while the tensor cores work. B's codes become A's type as they are stored (exact).
 */
template <typename T>
__device__ void gemm_fp8_tile_vec(unsigned char* smem, const T* __restrict__ a, const uint8_t* __restrict__ b, const float* __restrict__ scales,
                                  void* __restrict__ c, int cCode, int m, int n, int k, int lda, int ldc, float alpha, float beta) {
  constexpr int K = kFp8Block;
  constexpr int kAChunks = kTileM * K / 8 / kTileThreads;   // 8
  constexpr int kBChunks = kTileN * K / 16 / kTileThreads;  // 4
  TileSmem<T, K>& sm = *reinterpret_cast<TileSmem<T, K>*>(smem);
  const int m0 = blockIdx.y * kTileM, n0 = blockIdx.x * kTileN;
  const int warp = threadIdx.x >> 5, wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  const int kBlocks = (k + K - 1) / K;
  // n0 is a multiple of 64, so the tile's 64 columns share one 128-row block of B's scales.
  const float* srow = scales + (size_t)(n0 / kFp8Block) * kBlocks;

  uint4 qa[kAChunks], qb[kBChunks];
  auto load = [&](int kb) {
    const int k0 = kb * K;
#pragma unroll
    for (int u = 0; u < kAChunks; u++) {
      const int e = threadIdx.x + kTileThreads * u, r = e / (K / 8), q = k0 + 8 * (e % (K / 8));
      qa[u] = m0 + r < m && q < k ? __ldg(reinterpret_cast<const uint4*>(a + (size_t)(m0 + r) * lda + q)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kBChunks; u++) {
      const int e = threadIdx.x + kTileThreads * u, r = e / (K / 16), q = k0 + 16 * (e % (K / 16));
      qb[u] = n0 + r < n && q < k ? __ldg(reinterpret_cast<const uint4*>(b + (size_t)(n0 + r) * k + q)) : make_uint4(0, 0, 0, 0);
    }
  };
  auto stage = [&]() {
#pragma unroll
    for (int u = 0; u < kAChunks; u++) {
      const int e = threadIdx.x + kTileThreads * u;
      *reinterpret_cast<uint4*>(&sm.in.a[e / (K / 8)][8 * (e % (K / 8))]) = qa[u];
    }
#pragma unroll
    for (int u = 0; u < kBChunks; u++) {
      const int e = threadIdx.x + kTileThreads * u;
      const uint8_t* codes = reinterpret_cast<const uint8_t*>(&qb[u]);
      T v[16];
#pragma unroll
      for (int t = 0; t < 16; t++) v[t] = from_float<T>(e4m3_value(codes[t]));
      uint4 w[2];
      memcpy(w, v, sizeof w);
      uint4* dst = reinterpret_cast<uint4*>(&sm.in.b[e / (K / 16)][16 * (e % (K / 16))]);
      dst[0] = w[0];
      dst[1] = w[1];
    }
  };

  Acc acc[2][2], part[2][2];
  fill(acc);
  load(0);
  for (int kb = 0; kb < kBlocks; kb++) {
    stage();
    __syncthreads();
    if (kb + 1 < kBlocks) load(kb + 1);
    fill(part);
    mma_step<T, K>(sm.in.a, sm.in.b, wm, wn, part);
    add_scaled(acc, part, n0 < n ? srow[kb] : 0.f);
    __syncthreads();
  }
  store_tile(sm.out, acc, wm, wn, c, cCode, m, n, ldc, alpha, beta, m0, n0);
}

/** Any other shape: element by element, kAnyK of k a step. */
template <typename T>
__device__ void gemm_fp8_tile_any(unsigned char* smem, const T* __restrict__ a, const uint8_t* __restrict__ b, const float* __restrict__ scales,
                                  void* __restrict__ c, int cCode, int m, int n, int k, int lda, int ldc, float alpha, float beta) {
  constexpr int K = kAnyK;
  TileSmem<T, K>& sm = *reinterpret_cast<TileSmem<T, K>*>(smem);
  const int m0 = blockIdx.y * kTileM, n0 = blockIdx.x * kTileN;
  const int warp = threadIdx.x >> 5, wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  const int kBlocks = (k + kFp8Block - 1) / kFp8Block;
  const float* srow = scales + (size_t)(n0 / kFp8Block) * kBlocks;

  Acc acc[2][2], part[2][2];
  fill(acc);
  for (int kb = 0; kb < kBlocks; kb++) {
    fill(part);
    const int kEnd = min(k, (kb + 1) * kFp8Block);
    for (int k0 = kb * kFp8Block; k0 < kEnd; k0 += K) {
#pragma unroll 4
      for (int e = threadIdx.x; e < kTileM * K; e += kTileThreads) {
        const int r = e / K, q = e % K;
        const int gr = m0 + r, gq = k0 + q;
        sm.in.a[r][q] = (gr < m && gq < kEnd) ? a[(size_t)gr * lda + gq] : from_float<T>(0.f);
      }
#pragma unroll 4
      for (int e = threadIdx.x; e < kTileN * K; e += kTileThreads) {
        const int r = e / K, q = e % K;
        const int gr = n0 + r, gq = k0 + q;
        sm.in.b[r][q] = (gr < n && gq < kEnd) ? from_float<T>(e4m3_value(b[(size_t)gr * k + gq])) : from_float<T>(0.f);
      }
      __syncthreads();
      mma_step<T, K>(sm.in.a, sm.in.b, wm, wn, part);
      __syncthreads();
    }
    add_scaled(acc, part, n0 < n ? srow[kb] : 0.f);
  }
  store_tile(sm.out, acc, wm, wn, c, cCode, m, n, ldc, alpha, beta, m0, n0);
}

template <typename T>
__device__ void gemm_fp8_tile(unsigned char* smem, const T* a, const uint8_t* b, const float* scales, void* c, int cCode, int m, int n, int k,
                              int lda, int ldc, float alpha, float beta) {
  const bool vec = k % 16 == 0 && lda % 8 == 0 && (reinterpret_cast<uintptr_t>(a) & 15) == 0 && (reinterpret_cast<uintptr_t>(b) & 15) == 0;
  if (vec) gemm_fp8_tile_vec<T>(smem, a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta);
  else gemm_fp8_tile_any<T>(smem, a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(128) backend_gemm_fp8_tiled(
    const void* __restrict__ a, int aCode, const uint8_t* __restrict__ b, const float* __restrict__ scales, void* __restrict__ c,
    int cCode, int m, int n, int k, int lda, int ldc, float alpha, float beta) {
  // One buffer for both instantiations (each would otherwise reserve its own static arrays).
  __shared__ __align__(128) unsigned char smem[kTileSmemBytes];
  if (aCode == kF16) gemm_fp8_tile<__half>(smem, static_cast<const __half*>(a), b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta);
  else gemm_fp8_tile<__nv_bfloat16>(smem, static_cast<const __nv_bfloat16*>(a), b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta);
}
