// GEMMs whose B is a block-FP8 weight (GemmArgs.bDtype 'f8e4m3'): C[m][n] = alpha · A[m][k] ·
// Bᵀ + beta · C, A bf16 or f16 (row-major, lda), B E4M3 codes [n][k] packed with f32 scales
// [⌈n/128⌉][⌈k/128⌉], C f32 / bf16 / f16 (ldc). Each slice of k inside one 128-wide block is
// summed on its own and multiplied by its block's scale in f32, so the result is the product with
// the dequantized B.
//   backend_gemm_fp8_rows   decode's rows, B read once: where k and A's rows allow, m ≤ 64 on
//                           tensor cores with C's columns as the MMA's rows, 16 columns a CTA, its
//                           warps splitting k (gemm_fp8_rows_mma); else m ≤ 8, a warp per column,
//                           per code
//   backend_gemm_fp8_tiled  any m: 64 × 64 tiles on tensor cores (wmma), B's codes converted to
//                           A's type in shared memory (E4M3 values are exact in bf16 and f16);
//                           where k and the pointers allow, a 128-wide block of k a step with
//                           16-byte loads, the next block's loads in flight (gemm_fp8_tile_vec)
#include <mma.h>

#include <metrale/elements.cuh>
#include <metrale/mma.cuh>

using namespace metrale;

namespace {

constexpr int kRowsMax = 8;

__device__ __forceinline__ float load_a(const void* a, size_t i, int code) { return load_element(a, i, code); }

/** Element `at` of C = alpha · sum + beta · C (C read only where beta is not 0). */
__device__ __forceinline__ void store_c(void* c, size_t at, float sum, int cCode, float alpha, float beta) {
  float out = alpha * sum;
  if (beta != 0.f) out += beta * load_element(c, at, cCode);
  store_element(c, at, out, cCode);
}

/** Whether A's rows and B's codes take 16-byte loads: k a multiple of 16, lda of 8, both bases 16-byte aligned. */
__device__ __forceinline__ bool vector_loads(const void* a, const void* b, int k, int lda) {
  return k % 16 == 0 && lda % 8 == 0 && (reinterpret_cast<uintptr_t>(a) & 15) == 0 && (reinterpret_cast<uintptr_t>(b) & 15) == 0;
}

/** Column j of C from the lanes' sums acc[r] of rows r < m: added over the warp, lane 0 stores. */
template <int M>
__device__ __forceinline__ void store_column(const float* acc, void* c, int cCode, int m, int j, int ldc, float alpha, float beta, int lane) {
#pragma unroll
  for (int r = 0; r < M; r++) {
    float v = acc[r];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && r < m) store_c(c, (size_t)r * ldc + j, v, cCode, alpha, beta);
  }
}

/** Two E4M3 codes (the low byte first) as a pair of T (exact in bf16 and f16), in one 32-bit register. */
template <typename T>
__device__ __forceinline__ uint32_t codes_to_pair(uint32_t two) {
  const float lo = e4m3_value(two & 0xffu), hi = e4m3_value((two >> 8) & 0xffu);
  if constexpr (std::is_same_v<T, __half>) return (uint32_t)__half_as_ushort(__float2half_rn(lo)) | ((uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16);
  else return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) | ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

/** The most warps of a CTA of the tensor-core rows path (8, or 16 where the columns are few); they split k. */
constexpr int kRowsWarpsMax = 16;
/** Output columns of a CTA of the tensor-core rows path: the 16 rows of the MMA's A operand. */
constexpr int kRowsCols = 16;
/** k of one group: 4 MMA steps of 16, a lane's 16 codes of each of its two weight rows. */
constexpr int kRowsGroupK = 64;
/**
 * Groups a warp of the tensor-core rows path loads before it converts and multiplies them (2: 4
 * measured the same; loading one at a time was 5–11 % slower, docs/benchmarks.md).
 */
constexpr int kRowsAhead = 2;

/** The MMA's A operand: four words of T pairs. */
struct Fragment {
  uint32_t w[4];
};

/** Row groups whose sums the warps add through shared memory at a time (rounds of the reduction). */
constexpr int kRowsRoundGroups = 2;
/** Shared floats of the warps' reduction of `groups` row groups a round: a warp's lane's 4 sums of each. */
constexpr int rows_red_floats(int groups) { return kRowsWarpsMax * 32 * 4 * groups; }

/**
 * The tensor-core path (k a multiple of 16; A's rows and B 16-byte aligned): C's columns as the
 * MMA's rows. A CTA owns 16 columns n0 … n0 + 15 for all m ≤ 8 · RG rows: the m16n8k16 product of
 * B's 16 weight rows (codes converted to T in registers once a group) with each group of 8 of A's
 * rows as the 8 columns of the MMA's second operand. k goes in groups of 64, warp w of W taking
 * groups w, w + W, …; within a group the k order of the MMA's slots is permuted so that lane (g, q)
 * = (lane / 4, lane % 4) reads 16 consecutive codes of weight rows g and g + 8 and 16 consecutive
 * values of A's row 8r + g with three 16-byte loads (a sum does not depend on the order of its k,
 * and A and B take the same one): MMA step s's slots 2q, 2q + 1, 2q + 8, 2q + 9 hold k = k0 + 16q +
 * 4s + 0, 1, 2, 3. Each group's sums are multiplied by its 128-wide block's scale in f32; the
 * warps' sums are added in warp order through shared memory (`red`, `rows_red_floats`). A row's
 * products, their order and the warps' split of k do not depend on m or on the other rows, so a row
 * of C gets the same bits at any m ≤ 64.
 */
template <typename T, int RG, int Ahead>
__device__ void gemm_fp8_rows_mma(const T* __restrict__ a, const uint8_t* __restrict__ b, const float* __restrict__ scales, void* __restrict__ c,
                                  int cCode, int m, int n, int k, int lda, int ldc, float alpha, float beta, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int n0 = blockIdx.x * kRowsCols;
  const int kBlocks = (k + kFp8Block - 1) / kFp8Block;
  const int groups = (k + kRowsGroupK - 1) / kRowsGroupK;
  // n0 is a multiple of 16: the CTA's columns share one 128-row block of scales.
  const float* srow = scales + (size_t)(n0 / kFp8Block) * kBlocks;
  const uint8_t* b0 = n0 + g < n ? b + (size_t)(n0 + g) * k : nullptr;
  const uint8_t* b8 = n0 + g + 8 < n ? b + (size_t)(n0 + g + 8) * k : nullptr;
  // Row 8r + g of A (lane's row in group r), where it is one of the m.
  const T* ar = a + (size_t)g * lda;

  float acc[RG][4];
#pragma unroll
  for (int r = 0; r < RG; r++)
#pragma unroll
    for (int i = 0; i < 4; i++) acc[r][i] = 0.f;
  // Ahead of the warp's groups at a time: their codes and scales are loaded before any is
  // converted, so the warp has that many groups' loads in flight instead of one (each group's
  // conversion and products stood between its load and the next). Sums in group order as before.
  for (int grp0 = warp; grp0 < groups; grp0 += Ahead * warps) {
    uint4 w0[Ahead], w8[Ahead];
    float s[Ahead];
#pragma unroll
    for (int u = 0; u < Ahead; u++) {
      const int grp = grp0 + u * warps;
      const int kq = grp * kRowsGroupK + 16 * q;  // this lane's 16 values of k (≥ k past the last group)
      const bool in = kq < k;
      w0[u] = b0 && in ? __ldg(reinterpret_cast<const uint4*>(b0 + kq)) : make_uint4(0, 0, 0, 0);
      w8[u] = b8 && in ? __ldg(reinterpret_cast<const uint4*>(b8 + kq)) : make_uint4(0, 0, 0, 0);
      s[u] = grp < groups ? __ldg(srow + (grp * kRowsGroupK) / kFp8Block) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < Ahead; u++) {
      const int grp = grp0 + u * warps;
      if (grp >= groups) break;
      const int kq = grp * kRowsGroupK + 16 * q;
      const bool in = kq < k;
      const uint32_t wr0[4] = {w0[u].x, w0[u].y, w0[u].z, w0[u].w}, wr8[4] = {w8[u].x, w8[u].y, w8[u].z, w8[u].w};
      // Codes 4st … 4st + 3 of each weight row: word st; slots 2q, 2q + 1 take the low two.
      const auto codes = [&](int st) -> Fragment {
        return {{codes_to_pair<T>(wr0[st]), codes_to_pair<T>(wr8[st]), codes_to_pair<T>(wr0[st] >> 16), codes_to_pair<T>(wr8[st] >> 16)}};
      };
      // Row group r's 16 values of A at kq, as the MMA's second operand's words.
      const auto rows = [&](int r, uint32_t (&xs)[8]) {
        const bool row = 8 * r + g < m && in;
        const T* ap = ar + (size_t)(8 * r) * lda + kq;
        const uint4 x0 = row ? __ldg(reinterpret_cast<const uint4*>(ap)) : make_uint4(0, 0, 0, 0);
        const uint4 x1 = row ? __ldg(reinterpret_cast<const uint4*>(ap + 8)) : make_uint4(0, 0, 0, 0);
        xs[0] = x0.x, xs[1] = x0.y, xs[2] = x0.z, xs[3] = x0.w, xs[4] = x1.x, xs[5] = x1.y, xs[6] = x1.z, xs[7] = x1.w;
      };
      // The codes converted once for all row groups.
      Fragment af[4];
#pragma unroll
      for (int st = 0; st < 4; st++) af[st] = codes(st);
#pragma unroll
      for (int r = 0; r < RG; r++) {
        uint32_t xs[8];
        rows(r, xs);
        float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int st = 0; st < 4; st++) mma16816<T>(part, af[st].w, xs[2 * st], xs[2 * st + 1]);
#pragma unroll
        for (int i = 0; i < 4; i++) acc[r][i] = fmaf(s[u], part[i], acc[r][i]);
      }
    }
  }
  // The warps' sums, Round row groups a round: warp j adds group r0 + j's over the warps in warp
  // order and stores it.
  constexpr int Round = RG < kRowsRoundGroups ? RG : kRowsRoundGroups;
#pragma unroll
  for (int r0 = 0; r0 < RG; r0 += Round) {
    if (r0 > 0) __syncthreads();  // the round before has read red
#pragma unroll
    for (int j = 0; j < Round; j++)
      if (r0 + j < RG)
#pragma unroll
        for (int i = 0; i < 4; i++) red[((warp * 32 + lane) * Round + j) * 4 + i] = acc[r0 + j][i];
    __syncthreads();
    const int j = warp;
    if (j < Round && r0 + j < RG) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        float v = 0.f;
        for (int w = 0; w < warps; w++) v += red[((w * 32 + lane) * Round + j) * 4 + i];
        // Accumulator i: column n0 + g (+ 8 for i ≥ 2), row 8(r0 + j) + 2q (+ 1 for odd i).
        const int col = n0 + g + (i >= 2 ? 8 : 0), r = 8 * (r0 + j) + 2 * q + (i & 1);
        if (col < n && r < m) store_c(c, (size_t)r * ldc + col, v, cCode, alpha, beta);
      }
    }
  }
}

/** Ahead of the wide rows path (9 ≤ m ≤ 64), whose row groups' sums take the registers of more groups ahead. */
constexpr int kRowsWideAhead = 1;

/** The wide rows path: RG = ⌈m / 8⌉ groups of 8 rows, 2 ≤ RG ≤ 8. */
template <typename T>
__device__ void gemm_fp8_rows_wide(const T* a, const uint8_t* b, const float* scales, void* c, int cCode, int m, int n, int k, int lda, int ldc,
                                   float alpha, float beta, float* red) {
  constexpr int A = kRowsWideAhead;
  switch ((m + 7) / 8) {
    case 2: gemm_fp8_rows_mma<T, 2, A>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red); break;
    case 3: gemm_fp8_rows_mma<T, 3, A>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red); break;
    case 4: gemm_fp8_rows_mma<T, 4, A>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red); break;
    case 5: gemm_fp8_rows_mma<T, 5, A>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red); break;
    case 6: gemm_fp8_rows_mma<T, 6, A>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red); break;
    case 7: gemm_fp8_rows_mma<T, 7, A>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red); break;
    case 8: gemm_fp8_rows_mma<T, 8, A>(a, b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red); break;
    default: __trap();  // the backend launches it for 9 ≤ m ≤ 64 with 16-byte loads only
  }
}

}  // namespace

// At least one CTA of 512 threads a multiprocessor: without it ptxas holds the kernel to 64
// registers, where the loads ahead gained nothing (docs/benchmarks.md).
extern "C" __global__ void __launch_bounds__(32 * kRowsWarpsMax, 1) backend_gemm_fp8_rows(
    const void* __restrict__ a, int aCode, const uint8_t* __restrict__ b, const float* __restrict__ scales, void* __restrict__ c,
    int cCode, int m, int n, int k, int lda, int ldc, float alpha, float beta) {
  __shared__ float red[rows_red_floats(1)];
  const bool vec = aCode != kF32 && vector_loads(a, b, k, lda);
  if (vec) {
    if (aCode == kBF16) gemm_fp8_rows_mma<__nv_bfloat16, 1, kRowsAhead>(static_cast<const __nv_bfloat16*>(a), b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red);
    else gemm_fp8_rows_mma<__half, 1, kRowsAhead>(static_cast<const __half*>(a), b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red);
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

// 9 ≤ m ≤ 64 rows with 16-byte loads (`GEMM_FP8_ROWS_WIDE_MAX`): the rows kernel's tensor-core
// path with A's rows in groups of 8, the same CTAs and split of k, so a row of C gets the bits the
// rows kernel gives it at m ≤ 8. Its own entry so that the one-row path keeps its registers.
extern "C" __global__ void __launch_bounds__(32 * kRowsWarpsMax, 1) backend_gemm_fp8_rows_wide(
    const void* __restrict__ a, int aCode, const uint8_t* __restrict__ b, const float* __restrict__ scales, void* __restrict__ c,
    int cCode, int m, int n, int k, int lda, int ldc, float alpha, float beta) {
  __shared__ float red[rows_red_floats(kRowsRoundGroups)];
  if (aCode == kF32 || !vector_loads(a, b, k, lda)) __trap();
  if (aCode == kBF16) gemm_fp8_rows_wide(static_cast<const __nv_bfloat16*>(a), b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red);
  else gemm_fp8_rows_wide(static_cast<const __half*>(a), b, scales, c, cCode, m, n, k, lda, ldc, alpha, beta, red);
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
    if (gr < m && gq < n) store_c(c, (size_t)gr * ldc + gq, out[r][q], cCode, alpha, beta);
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
  const bool vec = vector_loads(a, b, k, lda);
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
