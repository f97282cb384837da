// The per-layer gate path of Gemma 3n decoder layer l (KERNELS.md):
//   g = a · W_gateᵀ                     (gpu.gemm)
//   h = gelu_tanh(g) ⊙ ple              (ple_gate_mul)
//   y = h · W_projᵀ                     (gpu.gemm)
//   v = RMSNorm_D(y) · w                (ple_out_norm, in place)
// Rows (g, ple, h, y) are of the row type T (dtype code: 0 f32, 1 bf16, 2 f16); arithmetic in f32,
// gelu_tanh(g) rounded to T as Hugging Face holds it, each output rounded once where it is stored.
#include "ple-common.cuh"

using ple::block_sum;
using ple::is_padding;
using ple::load_value;
using ple::round_to;
using ple::store_value;

namespace {

// GELU with the tanh approximation, as torch.nn.functional.gelu(x, approximate="tanh").
__device__ __forceinline__ float gelu_tanh(float x) {
  const float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  const float kKappa = 0.044715f;
  return 0.5f * x * (1.f + tanhf(kBeta * (x + kKappa * x * x * x)));
}

template <typename T>
__device__ __forceinline__ void gate_mul_row(T* h, const T* g, const T* pleIn, const int32_t* slots, const int32_t* rowStarts, int batch,
                                             int firstRow, int count, int perLayer) {
  const int local = blockIdx.x;
  if (local >= count) return;
  const bool skip = is_padding(slots, rowStarts, batch, firstRow + local);
  const size_t base = (size_t)local * perLayer;
  for (int i = threadIdx.x; i < perLayer; i += blockDim.x) {
    store_value(h, base + i, skip ? 0.f : round_to<T>(gelu_tanh(load_value(g, base + i))) * load_value(pleIn, base + i));
  }
}

template <typename T>
__device__ __forceinline__ void out_norm_row(T* y, const float* weight, const int32_t* slots, const int32_t* rowStarts, int batch,
                                             int firstRow, int count, int hidden, float eps, float* scratch) {
  const int local = blockIdx.x;
  if (local >= count) return;
  const size_t base = (size_t)local * hidden;
  if (is_padding(slots, rowStarts, batch, firstRow + local)) {  // block-uniform
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) store_value(y, base + i, 0.f);
    return;
  }
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = load_value(y, base + i);
    ss += v * v;
  }
  const float inv = 1.f / sqrtf(block_sum(ss, scratch) / (float)hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) store_value(y, base + i, load_value(y, base + i) * inv * weight[i]);
}

}  // namespace

// One block per row of [firstRow, firstRow + count): h = gelu_tanh(g) * ple (P values).
extern "C" __global__ void ple_gate_mul(void* h, const void* g, const void* pleIn, const int32_t* slots, const int32_t* rowStarts, int batch,
                                        int firstRow, int count, int perLayer, int dtype) {
  METRALE_BY_ROW_TYPE(dtype, gate_mul_row, static_cast<T*>(h), static_cast<const T*>(g), static_cast<const T*>(pleIn), slots, rowStarts, batch,
                      firstRow, count, perLayer);
}

// One block per row: y ← y / sqrt(mean(y²) + eps) · w, in place (each thread rewrites only what it read).
extern "C" __global__ void ple_out_norm(void* y, const float* weight, const int32_t* slots, const int32_t* rowStarts, int batch, int firstRow,
                                        int count, int hidden, float eps, int dtype) {
  __shared__ float scratch[32];
  METRALE_BY_ROW_TYPE(dtype, out_norm_row, static_cast<T*>(y), weight, slots, rowStarts, batch, firstRow, count, hidden, eps, scratch);
}
