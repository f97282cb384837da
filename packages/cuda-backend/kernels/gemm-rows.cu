// GEMMs of a few rows with 16-bit A and B (decode): C[m][n] = alpha · A[m][k] · Bᵀ + beta · C for
// m ≤ 8, A and B both bf16 or both f16 (abCode), A row-major with lda, B packed [n][k] (ldb = k),
// C f32 / bf16 / f16 with ldc; C is read only where beta ≠ 0. Bound by reading B once: a warp owns
// kCols consecutive output columns (rows of B) and its lanes stride k in 16-byte chunks of 8
// elements, each lane issuing all of a step's B loads (kCols × U of them, streamed past L1) before
// the first FMA needs one; A (a few rows, L1/L2-resident) comes through __ldg. Sums are f32, one
// fmaf per element in k order within a lane, then a fixed xor butterfly across the warp, so the
// result does not depend on the launch shape.
//   vector path  k % 8 = 0, lda % 8 = 0, A and B 16-byte aligned: 16-byte loads, m a template
//                parameter, steps of 32·U chunks (U = 8 for m ≤ 4, else 4), the last one partial
//   scalar path  anything else: a lane per element, lane = k mod 32 (correct for any shape)
#ifndef METRALE_CUDA_EMU  // the CPU emulator (tools/cuda-emu) brings its own
#include <metrale/elements.cuh>
#endif

using namespace metrale;

namespace {

constexpr int kRowsMax = 8;
constexpr int kCols = 2;       // output columns (rows of B) per warp; gemmRowsLaunch assumes 2
constexpr int kChunk = 8;      // 16-bit elements per 16-byte load
constexpr int kMaxThreads = 128;

/** 16-byte chunks each lane loads from each row of B per step: more in flight where m is small. */
template <int M>
struct Unroll {
  static constexpr int value = M <= 4 ? 8 : 4;
};

/** A 16-byte load of B: read-only for the kernel, read once, so not allocated in L1 (A stays there). */
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
#ifdef METRALE_CUDA_EMU
  return *p;
#else
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
#endif
}

/** Two 16-bit values packed in a word (the lower one first in memory), as f32 (exact). */
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t w);
template <>
__device__ __forceinline__ float2 unpack2<bf16>(uint32_t w) { return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u)); }
template <>
__device__ __forceinline__ float2 unpack2<f16>(uint32_t w) {
  return make_float2(__half2float(__ushort_as_half((unsigned short)(w & 0xffffu))), __half2float(__ushort_as_half((unsigned short)(w >> 16))));
}

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[kChunk]) {
  const float2 p0 = unpack2<T>(v.x), p1 = unpack2<T>(v.y), p2 = unpack2<T>(v.z), p3 = unpack2<T>(v.w);
  f[0] = p0.x, f[1] = p0.y, f[2] = p1.x, f[3] = p1.y, f[4] = p2.x, f[5] = p2.y, f[6] = p3.x, f[7] = p3.y;
}

/**
 * Sums each (row, column) over the warp (xor butterfly: every lane ends with the same value), then
 * lane i·kCols + r writes row i, column j0 + r.
 */
template <int M>
__device__ __forceinline__ void reduce_store(float (&acc)[M][kCols], int m, int n, int j0, void* __restrict__ c, int cCode, int ldc,
                                             float alpha, float beta) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < M; i++) {
    if (i >= m) break;
#pragma unroll
    for (int r = 0; r < kCols; r++) {
      float v = acc[i][r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      acc[i][r] = v;
    }
  }
#pragma unroll
  for (int i = 0; i < M; i++) {
#pragma unroll
    for (int r = 0; r < kCols; r++) {
      if (i < m && lane == i * kCols + r && j0 + r < n) {
        const size_t at = (size_t)i * ldc + j0 + r;
        float out = alpha * acc[i][r];
        if (beta != 0.f) out = fmaf(beta, load_element(c, at, cCode), out);
        store_element(c, at, out, cCode);
      }
    }
  }
}

/**
 * One step of the vector path: chunks c, c + 32, …, c + 32·(U−1) of every row (c = the step's first
 * chunk + lane), those before `chunks`. Every B load is issued before the first FMA. (One guarded
 * step for the last, partial step too: a separate unguarded copy for the full steps spills.)
 */
template <typename T, int M, int U>
__device__ __forceinline__ void vector_step(const uint4* __restrict__ a4, int lda4, const uint4* const (&brow)[kCols], int c, int chunks,
                                            float (&acc)[M][kCols]) {
  uint4 bv[kCols][U];
#pragma unroll
  for (int u = 0; u < U; u++) {
#pragma unroll
    for (int r = 0; r < kCols; r++) {
      if (c + 32 * u < chunks) bv[r][u] = load_stream(brow[r] + c + 32 * u);
      else bv[r][u] = make_uint4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int u = 0; u < U; u++) {
    if (c + 32 * u >= chunks) break;
    float bf[kCols][kChunk];
#pragma unroll
    for (int r = 0; r < kCols; r++) unpack8<T>(bv[r][u], bf[r]);
#pragma unroll
    for (int i = 0; i < M; i++) {
      float af[kChunk];
      unpack8<T>(__ldg(a4 + (size_t)i * lda4 + c + 32 * u), af);
#pragma unroll
      for (int r = 0; r < kCols; r++) {
#pragma unroll
        for (int e = 0; e < kChunk; e++) acc[i][r] = fmaf(af[e], bf[r][e], acc[i][r]);
      }
    }
  }
}

template <typename T, int M>
__device__ void rows_vector(const T* __restrict__ a, const T* __restrict__ b, void* __restrict__ c, int cCode, int n, int k, int lda,
                            int ldc, float alpha, float beta) {
  constexpr int U = Unroll<M>::value;
  constexpr int kStep = 32 * U;  // chunks of a row one step covers
  const int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
  const int chunks = k / kChunk;
  const uint4* a4 = reinterpret_cast<const uint4*>(a);
  const int lda4 = lda / kChunk;
  for (int j0 = (blockIdx.x * warps + (threadIdx.x >> 5)) * kCols; j0 < n; j0 += gridDim.x * warps * kCols) {
    // A column past n (odd n) reads row n − 1 again and is not stored.
    const uint4* brow[kCols];
#pragma unroll
    for (int r = 0; r < kCols; r++) brow[r] = reinterpret_cast<const uint4*>(b + (size_t)min(j0 + r, n - 1) * k);
    float acc[M][kCols];
#pragma unroll
    for (int i = 0; i < M; i++)
#pragma unroll
      for (int r = 0; r < kCols; r++) acc[i][r] = 0.f;
    for (int c0 = 0; c0 < chunks; c0 += kStep) vector_step<T, M, U>(a4, lda4, brow, c0 + lane, chunks, acc);
    reduce_store<M>(acc, M, n, j0, c, cCode, ldc, alpha, beta);
  }
}

template <typename T>
__device__ void rows_scalar(const T* __restrict__ a, const T* __restrict__ b, void* __restrict__ c, int cCode, int m, int n, int k, int lda,
                            int ldc, float alpha, float beta) {
  const int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
  for (int j0 = (blockIdx.x * warps + (threadIdx.x >> 5)) * kCols; j0 < n; j0 += gridDim.x * warps * kCols) {
    const T* brow[kCols];
#pragma unroll
    for (int r = 0; r < kCols; r++) brow[r] = b + (size_t)min(j0 + r, n - 1) * k;
    float acc[kRowsMax][kCols];
#pragma unroll
    for (int i = 0; i < kRowsMax; i++)
#pragma unroll
      for (int r = 0; r < kCols; r++) acc[i][r] = 0.f;
    for (int q = lane; q < k; q += 32) {
      float w[kCols];
#pragma unroll
      for (int r = 0; r < kCols; r++) w[r] = Element<T>::load(brow[r], q);
#pragma unroll
      for (int i = 0; i < kRowsMax; i++) {
        if (i >= m) break;
        const float x = Element<T>::load(a, (size_t)i * lda + q);
#pragma unroll
        for (int r = 0; r < kCols; r++) acc[i][r] = fmaf(x, w[r], acc[i][r]);
      }
    }
    reduce_store<kRowsMax>(acc, m, n, j0, c, cCode, ldc, alpha, beta);
  }
}

template <typename T>
__device__ void gemm_rows(const void* a, const void* b, void* c, int cCode, int m, int n, int k, int lda, int ldc, float alpha, float beta) {
  const T* at = static_cast<const T*>(a);
  const T* bt = static_cast<const T*>(b);
  const bool vector = k % kChunk == 0 && lda % kChunk == 0 && ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15) == 0;
  if (!vector) return rows_scalar<T>(at, bt, c, cCode, m, n, k, lda, ldc, alpha, beta);
  switch (m) {
    case 1: return rows_vector<T, 1>(at, bt, c, cCode, n, k, lda, ldc, alpha, beta);
    case 2: return rows_vector<T, 2>(at, bt, c, cCode, n, k, lda, ldc, alpha, beta);
    case 3: return rows_vector<T, 3>(at, bt, c, cCode, n, k, lda, ldc, alpha, beta);
    case 4: return rows_vector<T, 4>(at, bt, c, cCode, n, k, lda, ldc, alpha, beta);
    case 5: return rows_vector<T, 5>(at, bt, c, cCode, n, k, lda, ldc, alpha, beta);
    case 6: return rows_vector<T, 6>(at, bt, c, cCode, n, k, lda, ldc, alpha, beta);
    case 7: return rows_vector<T, 7>(at, bt, c, cCode, n, k, lda, ldc, alpha, beta);
    case 8: return rows_vector<T, 8>(at, bt, c, cCode, n, k, lda, ldc, alpha, beta);
    default: __trap();
  }
}

}  // namespace

// At most 128 threads (gemmRowsLaunch picks 32, 64 or 128); 4 such CTAs per multiprocessor caps
// the registers at 128 a thread, so at least 16 warps (each with its loads in flight) fit.
extern "C" __global__ void __launch_bounds__(kMaxThreads, 4) backend_gemm_rows(
    const void* __restrict__ a, int abCode, const void* __restrict__ b, void* __restrict__ c, int cCode, int m, int n, int k, int lda,
    int ldc, float alpha, float beta) {
  if (abCode == kBF16) gemm_rows<bf16>(a, b, c, cCode, m, n, k, lda, ldc, alpha, beta);
  else if (abCode == kF16) gemm_rows<f16>(a, b, c, cCode, m, n, k, lda, ldc, alpha, beta);
  else __trap();
}
