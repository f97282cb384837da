// The per-layer gate path of Gemma 3n decoder layer l (KERNELS.md):
//   g = a · W_gateᵀ                     (gpu.gemm)
//   h = gelu_tanh(g) ⊙ ple              (ple_gate_mul)
//   y = h · W_projᵀ                     (gpu.gemm)
//   v = RMSNorm_D(y) · w                (ple_out_norm, in place)
#include "ple-common.cuh"

using ple::block_sum;
using ple::is_padding;

namespace {

// GELU with the tanh approximation, as torch.nn.functional.gelu(x, approximate="tanh").
__device__ __forceinline__ float gelu_tanh(float x) {
  const float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  const float kKappa = 0.044715f;
  return 0.5f * x * (1.f + tanhf(kBeta * (x + kKappa * x * x * x)));
}

}  // namespace

// One block per row of [firstRow, firstRow + count): h = gelu_tanh(g) * ple (P values).
extern "C" __global__ void ple_gate_mul(float* h, const float* g, const float* pleIn, const int32_t* slots,
                                        const int32_t* rowStarts, int batch, int firstRow, int count, int perLayer) {
  const int local = blockIdx.x;
  if (local >= count) return;
  const bool skip = is_padding(slots, rowStarts, batch, firstRow + local);
  const size_t base = (size_t)local * perLayer;
  for (int i = threadIdx.x; i < perLayer; i += blockDim.x) {
    h[base + i] = skip ? 0.f : gelu_tanh(g[base + i]) * pleIn[base + i];
  }
}

// One block per row: y ← y / sqrt(mean(y²) + eps) · w, in place (each thread rewrites only what it read).
extern "C" __global__ void ple_out_norm(float* y, const float* weight, const int32_t* slots, const int32_t* rowStarts,
                                        int batch, int firstRow, int count, int hidden, float eps) {
  __shared__ float scratch[32];
  const int local = blockIdx.x;
  if (local >= count) return;
  float* row = y + (size_t)local * hidden;
  if (is_padding(slots, rowStarts, batch, firstRow + local)) {  // block-uniform
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) row[i] = 0.f;
    return;
  }
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += row[i] * row[i];
  const float inv = 1.f / sqrtf(block_sum(ss, scratch) / (float)hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) row[i] = row[i] * inv * weight[i];
}
