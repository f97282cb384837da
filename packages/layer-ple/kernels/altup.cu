// AltUp's row kernels (Gemma3nTextAltUp and the model's stream init / unembedding; declared in
// src/altup-kernels.ts, reference src/altup.cpu.ts; layouts: ../KERNELS.md, "Gemma 3n"):
//   gemma3n_altup_predict  pred_j = s_j + Σ_i R_ji · s_i, R = prediction_coefs · m, m the modalities of s_k
//   gemma3n_altup_correct  corr_j = pred_j + (c_j + 1) · (o − pred_k), c = correction_coefs · m', m' those of o
//   gemma3n_magnitude      out = y · rms(target) / sqrt(max(mean(y²), 1e−5))   (rms without ε)
//   gemma3n_streams_mean   out = the mean of a row's n streams
// The modalities of a vector x: m = tanh(modality_router(router_norm(x) · router_input_scale)),
// router_input_scale = 1 / H (in bf16 / f16 the row type's value, as HF holds the buffer).
//
// Rows hold n streams of H values ([rows][n][H]) of the row type T (dtype code: 0 f32, 1 bf16,
// 2 f16); router, norm and coefficient weights are f32 holding row-type values. Arithmetic in f32;
// values Hugging Face holds in T (the router's normed input and its scale, the router's output, the
// modalities, the coefficients, the innovation, the RMS ratios) are rounded to T where the twin rounds them, every output once where
// it is stored. One CTA per row (rowLaunch: up to 1024 threads, the row loop strides by gridDim.x);
// n ≤ kMaxStreams (the layers check it; the kernels trap past it).
#include "ple-common.cuh"

using ple::block_sum;
using ple::load_value;
using ple::round_to;
using ple::store_value;

namespace {

constexpr int kMaxStreams = 16;

/**
 * The n modalities of the H-vector x into m (shared): m_j = round(tanh(round(Σ_i r_i · router[j][i]))),
 * inv = 1 / sqrt(mean(x²) + eps), r_i the router's input as Hugging Face holds it in the row type:
 * `router_norm(x) * router_input_scale`, the norm's output x_i · inv · w_i rounded once
 * (Gemma3nRMSNorm), times the row type's 1 / H (a bf16 buffer there), rounded; the router's output
 * (a bf16 Linear) rounded before the tanh. In f32 (the reference path): r_i = x_i · inv · w_i / H.
 * Ends with a barrier: m is visible to every thread.
 */
template <typename T>
__device__ __forceinline__ void modalities(const T* x, const float* __restrict__ routerNorm, const float* __restrict__ router, int hidden, int n,
                                           float eps, float* m, float* red) {
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = load_value(x, i);
    ss += v * v;
  }
  const float inv = 1.f / sqrtf(block_sum(ss, red) / (float)hidden + eps);
  [[maybe_unused]] const float scale = round_to<T>(1.f / (float)hidden);  // router_input_scale in T
  for (int j = 0; j < n; ++j) {
    float s = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
      float r;
      if constexpr (std::is_same_v<T, float>) r = load_value(x, i) * inv * routerNorm[i] / (float)hidden;
      else r = round_to<T>(round_to<T>(load_value(x, i) * inv * routerNorm[i]) * scale);
      s += r * router[(size_t)j * hidden + i];
    }
    const float total = block_sum(s, red);
    if (threadIdx.x == 0) m[j] = round_to<T>(tanhf(round_to<T>(total)));
  }
  __syncthreads();
}

template <typename T>
__device__ __forceinline__ void predict_rows(const T* streams, T* pred, const float* __restrict__ coefs, const float* __restrict__ routerNorm,
                                             const float* __restrict__ router, int rows, int hidden, int n, int active, float eps, float* m,
                                             float* R, float* red) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* s = streams + (size_t)r * n * hidden;
    T* p = pred + (size_t)r * n * hidden;
    modalities<T>(s + (size_t)active * hidden, routerNorm, router, hidden, n, eps, m, red);
    for (int o = threadIdx.x; o < n * n; o += blockDim.x) {
      float v = 0.f;
      for (int l = 0; l < n; ++l) v += coefs[o * n + l] * m[l];
      R[o] = round_to<T>(v);
    }
    __syncthreads();
    // Each thread reads the n streams at its h before writing any prediction there (in place is safe).
    for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
      float x[kMaxStreams];
      for (int i = 0; i < n; ++i) x[i] = load_value(s, (size_t)i * hidden + h);
      for (int j = 0; j < n; ++j) {
        float v = x[j];
        for (int i = 0; i < n; ++i) v += R[j * n + i] * x[i];
        store_value(p, (size_t)j * hidden + h, v);
      }
    }
    __syncthreads();  // m and R are rewritten for the next row
  }
}

template <typename T>
__device__ __forceinline__ void correct_rows(const T* input, T* corr, const float* __restrict__ coefs, const float* __restrict__ routerNorm,
                                             const float* __restrict__ router, int rows, int hidden, int n, int active, float eps, float* m,
                                             float* c, float* red) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = input + (size_t)r * (n + 1) * hidden;
    const T* o = x + (size_t)n * hidden;
    T* out = corr + (size_t)r * n * hidden;
    modalities<T>(o, routerNorm, router, hidden, n, eps, m, red);
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      float v = 0.f;
      for (int l = 0; l < n; ++l) v += coefs[j * n + l] * m[l];
      c[j] = round_to<T>(round_to<T>(v) + 1.f);
    }
    __syncthreads();
    for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
      const float innovation = round_to<T>(load_value(o, h) - load_value(x, (size_t)active * hidden + h));
      for (int j = 0; j < n; ++j) store_value(out, (size_t)j * hidden + h, load_value(x, (size_t)j * hidden + h) + c[j] * innovation);
    }
    __syncthreads();  // m and c are rewritten for the next row
  }
}

template <typename T>
__device__ __forceinline__ void magnitude_rows(const T* target, int targetStride, const T* y, T* out, int outStride, int rows, int hidden, float* red) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* t = target + (size_t)r * targetStride;
    const T* yr = y + (size_t)r * hidden;
    T* o = out + (size_t)r * outStride;
    float tt = 0.f, yy = 0.f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
      const float a = load_value(t, i), b = load_value(yr, i);
      tt += a * a;
      yy += b * b;
    }
    tt = block_sum(tt, red);
    yy = block_sum(yy, red);
    const float ratio = round_to<T>(sqrtf(tt / (float)hidden)) / round_to<T>(sqrtf(fmaxf(round_to<T>(yy / (float)hidden), 1e-5f)));
    const float scale = round_to<T>(ratio);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) store_value(o, i, load_value(yr, i) * scale);
  }
}

template <typename T>
__device__ __forceinline__ void streams_mean_rows(const T* streams, T* out, int rows, int hidden, int n) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* s = streams + (size_t)r * n * hidden;
    for (int h = threadIdx.x; h < hidden; h += blockDim.x) {
      float v = 0.f;
      for (int j = 0; j < n; ++j) v += load_value(s, (size_t)j * hidden + h);
      store_value(out, (size_t)r * hidden + h, v / (float)n);
    }
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024) gemma3n_altup_predict(const void* streams, void* pred, const float* __restrict__ coefs,
                                                                         const float* __restrict__ routerNorm, const float* __restrict__ router,
                                                                         int rows, int hidden, int n, int active, float eps, int dtype) {
  __shared__ float red[32];
  __shared__ float m[kMaxStreams];
  __shared__ float R[kMaxStreams * kMaxStreams];
  if (n > kMaxStreams || active < 0 || active >= n) __trap();
  METRALE_BY_ROW_TYPE(dtype, predict_rows, static_cast<const T*>(streams), static_cast<T*>(pred), coefs, routerNorm, router, rows, hidden, n, active, eps, m, R, red);
}

extern "C" __global__ void __launch_bounds__(1024) gemma3n_altup_correct(const void* input, void* corr, const float* __restrict__ coefs,
                                                                         const float* __restrict__ routerNorm, const float* __restrict__ router,
                                                                         int rows, int hidden, int n, int active, float eps, int dtype) {
  __shared__ float red[32];
  __shared__ float m[kMaxStreams];
  __shared__ float c[kMaxStreams];
  if (n > kMaxStreams || active < 0 || active >= n) __trap();
  METRALE_BY_ROW_TYPE(dtype, correct_rows, static_cast<const T*>(input), static_cast<T*>(corr), coefs, routerNorm, router, rows, hidden, n, active, eps, m, c, red);
}

extern "C" __global__ void __launch_bounds__(1024) gemma3n_magnitude(const void* target, int targetStride, const void* y, void* out, int outStride,
                                                                     int rows, int hidden, int dtype) {
  __shared__ float red[32];
  METRALE_BY_ROW_TYPE(dtype, magnitude_rows, static_cast<const T*>(target), targetStride, static_cast<const T*>(y), static_cast<T*>(out), outStride, rows, hidden, red);
}

extern "C" __global__ void __launch_bounds__(1024) gemma3n_streams_mean(const void* streams, void* out, int rows, int hidden, int n, int dtype) {
  METRALE_BY_ROW_TYPE(dtype, streams_mean_rows, static_cast<const T*>(streams), static_cast<T*>(out), rows, hidden, n);
}
