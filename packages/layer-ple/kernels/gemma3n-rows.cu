// The row arithmetic of a Gemma 3n decoder layer around its std parts (declared in
// src/gemma3n-kernels.ts, reference src/gemma3n-rows.cpu.ts; layouts: ../KERNELS.md, "Gemma 3n"):
//   gemma3n_copy      dst[r] = src[r] (· scale), rows at their strides, between row types
//   gemma3n_sum3      out = (a + b + c) · scale elementwise (c may be null; out may alias a, b or c)
//   gemma3n_ple_add   streams_j += y for j = 1 … n − 1 (HF: corrected_predictions[1:] += per-layer input)
//   gemma3n_norm_add  out = x + RMSNorm(t) · w (plain w: Laurel's end, an + post_laurel_norm(t))
// Rows of the row type T (dtype code: 0 f32, 1 bf16, 2 f16), y included; scale and norm weights are f32.
// Arithmetic in f32, each output rounded once where it is stored (norm_add also rounds the normed
// value to T first, as Hugging Face holds it). One CTA per row (rowLaunch: up to 1024 threads, the
// row loop strides by gridDim.x), gemma3n_sum3 one element per thread (flatLaunch, grid-stride).
// Each thread rewrites only elements it read, so in-place use is safe.
#include "ple-common.cuh"

using ple::block_sum;
using ple::load_value;
using ple::round_to;
using ple::store_value;

namespace {

template <typename T>
__device__ __forceinline__ void sum3_values(const T* a, const T* b, const T* c, T* out, int count, float scale) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)count; i += stride) {
    store_value(out, i, (load_value(a, i) + load_value(b, i) + (c ? load_value(c, i) : 0.f)) * scale);
  }
}

template <typename T>
__device__ __forceinline__ void ple_add_rows(T* streams, const T* __restrict__ y, int rows, int hidden, int n) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
      const float v = load_value(y, (size_t)r * hidden + h);
      for (int j = 1; j < n; ++j) {
        const size_t at = ((size_t)r * n + j) * hidden + h;
        store_value(streams, at, load_value(streams, at) + v);
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void norm_add_rows(const T* x, const T* t, const float* __restrict__ weight, T* out, int rows, int hidden, float eps,
                                              float* red) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const size_t base = (size_t)r * hidden;
    float ss = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
      const float v = load_value(t, base + i);
      ss += v * v;
    }
    const float inv = 1.f / sqrtf(block_sum(ss, red) / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) store_value(out, base + i, load_value(x, base + i) + round_to<T>(load_value(t, base + i) * inv * weight[i]));
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024) gemma3n_copy(const void* src, int srcStride, void* dst, int dstStride, const float* __restrict__ scale,
                                                                int rows, int hidden, int srcDtype, int dstDtype) {
  if (srcDtype < metrale::kF32 || srcDtype > metrale::kF16 || dstDtype < metrale::kF32 || dstDtype > metrale::kF16) __trap();
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
      const float v = metrale::load_element(src, (size_t)r * srcStride + i, srcDtype);
      metrale::store_element(dst, (size_t)r * dstStride + i, scale ? v * scale[i] : v, dstDtype);
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) gemma3n_sum3(const void* a, const void* b, const void* c, void* out, int count, float scale, int dtype) {
  METRALE_BY_ROW_TYPE(dtype, sum3_values, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(c), static_cast<T*>(out), count, scale);
}

extern "C" __global__ void __launch_bounds__(1024) gemma3n_ple_add(void* streams, const void* __restrict__ y, int rows, int hidden, int n, int dtype) {
  METRALE_BY_ROW_TYPE(dtype, ple_add_rows, static_cast<T*>(streams), static_cast<const T*>(y), rows, hidden, n);
}

extern "C" __global__ void __launch_bounds__(1024) gemma3n_norm_add(const void* x, const void* t, const float* __restrict__ weight, void* out, int rows,
                                                                    int hidden, float eps, int dtype) {
  __shared__ float red[32];
  METRALE_BY_ROW_TYPE(dtype, norm_add_rows, static_cast<const T*>(x), static_cast<const T*>(t), weight, static_cast<T*>(out), rows, hidden, eps, red);
}
