// Row-wise kernels of layer-std (src/rows-kernels.ts; reference src/rows.cpu.ts; KERNELS.md):
//   std_embed       out[r] = scale · table[tokens[r]] (zeros for a token outside [0, vocab))
//   std_rms_norm    y = x · 1/sqrt(mean(x²) + eps) · (offset + w), in place allowed
//   std_layer_norm  y = (x − mean) · 1/sqrt(var + eps) · w (+ b), biased variance, in place allowed
//   std_add         out = a + b, out may alias a or b
//   std_add_rms_norm  sum = a + b as std_add, then output = std_rms_norm(sum): the residual add and
//                   the norm after it in one pass; any of sum / output may alias a or b
//   std_silu_mul    out[r][i] = silu(gateUp[r][i]) · gateUp[r][inter + i]
//   std_gelu_mul    out[r][i] = gelu_tanh(g'[r][i]) · up[r][i], g' the gate after activation sparsity
//
// Every kernel takes the row type as a dtype code (0 f32, 1 bf16, 2 f16; the table, rows and
// outputs are of that type; norm weights and biases f32) and dispatches once per launch to its
// template; sums and products are f32, each output rounded once where it is stored. RMSNorm rounds
// as Hugging Face does in the row type (rms_out in std-common.cuh: x̂ rounded before the weight
// when roundNormalized), and gelu_mul's activation sparsity rounds its statistics as HF does.
//
// Launch: one CTA per row (rowLaunch: min(1024, width rounded up to 32) threads; the row loop
// strides by gridDim.x), std_add one element per thread (flatLaunch, 256 per CTA, grid-stride).
// Memory-bound: 4-element vector loads and stores whenever the row length is a multiple of 4 and the
// pointers are 16-byte aligned (the usual case: allocations are 256-byte aligned), coalesced
// across the warp; each thread reads and writes the same elements in every pass, which is what
// makes the norms safe in place. Sums are f32 with a deterministic CTA reduction.
#include "std-common.cuh"

using namespace stdk;

namespace {

template <typename T>
__device__ __forceinline__ void embed_rows(const int32_t* __restrict__ tokens, const T* __restrict__ table, T* __restrict__ out, int rows, int hidden,
                                           int vocab, float scale) {
  const bool vec = (hidden & 3) == 0 && aligned16(table) && aligned16(out);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int t = tokens[r];
    T* o = out + (size_t)r * hidden;
    const bool valid = t >= 0 && t < vocab;
    const T* src = table + (size_t)(valid ? t : 0) * hidden;
    if (vec) {
      for (int i = threadIdx.x; i < (hidden >> 2); i += blockDim.x) {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (valid) {
          v = ldg4(src, i);
          v.x *= scale, v.y *= scale, v.z *= scale, v.w *= scale;
        }
        store4(o, i, v);
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) store_value(o, i, valid ? scale * ldg_value(src, i) : 0.f);
    }
  }
}

// One row's second pass: y = x̂ · (offset + w), x̂ = x · inv.
template <typename T>
__device__ __forceinline__ void rms_scale_row(const T* x, T* y, const float* __restrict__ weight, int hidden, float inv, float offset, int roundNormalized,
                                              bool vec) {
  if (vec) {
    for (int i = threadIdx.x; i < (hidden >> 2); i += blockDim.x) {
      float4 v = load4(x, i);
      const float4 w = __ldg(reinterpret_cast<const float4*>(weight) + i);
      v.x = rms_out<T>(v.x * inv, w.x, offset, roundNormalized), v.y = rms_out<T>(v.y * inv, w.y, offset, roundNormalized);
      v.z = rms_out<T>(v.z * inv, w.z, offset, roundNormalized), v.w = rms_out<T>(v.w * inv, w.w, offset, roundNormalized);
      store4(y, i, v);
    }
  } else {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) store_value(y, i, rms_out<T>(load_value(x, i) * inv, __ldg(weight + i), offset, roundNormalized));
  }
}

template <typename T>
__device__ __forceinline__ void rms_norm_rows(const T* input, T* output, const float* __restrict__ weight, int rows, int hidden, float eps,
                                              float offset, int roundNormalized, float* red) {
  const bool vec = (hidden & 3) == 0 && aligned16(input) && aligned16(output) && aligned16(weight);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = input + (size_t)r * hidden;
    float ss = 0.f;
    if (vec) {
      for (int i = threadIdx.x; i < (hidden >> 2); i += blockDim.x) {
        const float4 v = load4(x, i);
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float v = load_value(x, i);
        ss += v * v;
      }
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)hidden + eps);
    rms_scale_row(x, output + (size_t)r * hidden, weight, hidden, inv, offset, roundNormalized, vec);
  }
}

// sum = a + b (std_add's rounding), then RMSNorm of the stored sum into output: the squares are of
// the values read back from sum, so the norm sees the bits std_rms_norm would read after std_add.
template <typename T>
__device__ __forceinline__ void add_rms_norm_rows(const T* a, const T* b, T* sum, T* output, const float* __restrict__ weight, int rows, int hidden,
                                                  float eps, float offset, int roundNormalized, float* red) {
  const bool vec = (hidden & 3) == 0 && aligned16(a) && aligned16(b) && aligned16(sum) && aligned16(output) && aligned16(weight);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const size_t row = (size_t)r * hidden;
    T* s = sum + row;
    float ss = 0.f;
    if (vec) {
      for (int i = threadIdx.x; i < (hidden >> 2); i += blockDim.x) {
        const float4 u = load4(a + row, i), v = load4(b + row, i);
        store4(s, i, make_float4(u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w));
        const float4 t = load4(s, i);
        ss += t.x * t.x + t.y * t.y + t.z * t.z + t.w * t.w;
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        store_value(s, i, load_value(a + row, i) + load_value(b + row, i));
        const float t = load_value(s, i);
        ss += t * t;
      }
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)hidden + eps);
    rms_scale_row(static_cast<const T*>(s), output + row, weight, hidden, inv, offset, roundNormalized, vec);
  }
}

template <typename T>
__device__ __forceinline__ void layer_norm_rows(const T* input, T* output, const float* __restrict__ weight, const float* __restrict__ bias, int rows,
                                                int hidden, float eps, float* red) {
  const bool vec = (hidden & 3) == 0 && aligned16(input) && aligned16(output) && aligned16(weight) && (bias == nullptr || aligned16(bias));
  const int n4 = hidden >> 2;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = input + (size_t)r * hidden;
    T* y = output + (size_t)r * hidden;
    // Two passes (mean, then the centred sum of squares): no cancellation for rows far from 0.
    float s = 0.f;
    if (vec) {
      for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = load4(x, i);
        s += (v.x + v.y) + (v.z + v.w);
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) s += load_value(x, i);
    }
    const float mean = block_sum(s, red) / (float)hidden;
    float ss = 0.f;
    if (vec) {
      for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = load4(x, i);
        const float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
        ss += a * a + b * b + c * c + d * d;
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float v = load_value(x, i);
        ss += (v - mean) * (v - mean);
      }
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)hidden + eps);
    if (vec) {
      for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = load4(x, i);
        const float4 w = __ldg(reinterpret_cast<const float4*>(weight) + i);
        const float4 b = bias ? __ldg(reinterpret_cast<const float4*>(bias) + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        v.x = (v.x - mean) * inv * w.x + b.x, v.y = (v.y - mean) * inv * w.y + b.y;
        v.z = (v.z - mean) * inv * w.z + b.z, v.w = (v.w - mean) * inv * w.w + b.w;
        store4(y, i, v);
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        store_value(y, i, (load_value(x, i) - mean) * inv * __ldg(weight + i) + (bias ? __ldg(bias + i) : 0.f));
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void add_values(const T* a, const T* b, T* out, int count) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)count; i += stride) store_value(out, i, load_value(a, i) + load_value(b, i));
}

template <typename T>
__device__ __forceinline__ void silu_mul_rows(const T* __restrict__ gateUp, T* __restrict__ out, int rows, int inter) {
  const bool vec = (inter & 3) == 0 && aligned16(gateUp) && aligned16(out);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* g = gateUp + (size_t)r * 2 * inter;
    T* o = out + (size_t)r * inter;
    if (vec) {
      for (int i = threadIdx.x; i < (inter >> 2); i += blockDim.x) {
        const float4 gv = ldg4(g, i);
        const float4 uv = ldg4(g + inter, i);
        store4(o, i, make_float4(silu(gv.x) * uv.x, silu(gv.y) * uv.y, silu(gv.z) * uv.z, silu(gv.w) * uv.w));
      }
    } else {
      for (int i = threadIdx.x; i < inter; i += blockDim.x) store_value(o, i, silu(ldg_value(g, i)) * ldg_value(g, inter + i));
    }
  }
}

/** GELU with the tanh approximation (PyTorch's `gelu(x, approximate="tanh")`), in f32. */
__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/**
 * out = gelu_tanh(g') · up with g' = relu(g − (mean(g) + std(g) · cutoff)) when `sparse` (Gemma 3n's
 * activation sparsity: population std over the row's gate), else g' = g. One CTA per row; the row's
 * sums in f32; g' rounded to the row type, as Hugging Face holds it, before the activation. In bf16 /
 * f16, `Gemma3nTextMLP._gaussian_topk` holds each step in the row type: the multiplier
 * (`std_multiplier.type(inputs.dtype)`: 1.6484375 for 0.95 in bf16), the mean and the std (each
 * rounded from f32; the std's own mean unrounded), their product, the cut-off and g − cut-off; so
 * does the kernel. In f32 those roundings are nothing and the f32 expression is kept as it was.
 */
template <typename T>
__device__ __forceinline__ void gelu_mul_rows(const T* __restrict__ gateUp, T* __restrict__ out, int rows, int inter, float cutoff, int sparse, float* red) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* g = gateUp + (size_t)r * 2 * inter;
    T* o = out + (size_t)r * inter;
    float shift = 0.f;
    if (sparse) {
      float s = 0.f;
      for (int i = threadIdx.x; i < inter; i += blockDim.x) s += ldg_value(g, i);
      const float mean = block_sum(s, red) / (float)inter;
      float ss = 0.f;
      for (int i = threadIdx.x; i < inter; i += blockDim.x) {
        const float d = ldg_value(g, i) - mean;
        ss += d * d;
      }
      const float sd = sqrtf(block_sum(ss, red) / (float)inter);
      if constexpr (std::is_same_v<T, float>) shift = mean + sd * cutoff;
      else shift = round_to<T>(round_to<T>(mean) + round_to<T>(round_to<T>(sd) * round_to<T>(cutoff)));
    }
    for (int i = threadIdx.x; i < inter; i += blockDim.x) {
      const float x = sparse ? round_to<T>(fmaxf(ldg_value(g, i) - shift, 0.f)) : ldg_value(g, i);
      store_value(o, i, gelu_tanh(x) * ldg_value(g, inter + i));
    }
  }
}

/** x = cap · tanh(x / cap) over f32 values (final logit soft-capping), in place. */
__device__ __forceinline__ void softcap_values(float* x, int count, float cap) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)count; i += stride) x[i] = cap * tanhf(x[i] / cap);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024) std_embed(const int32_t* __restrict__ tokens, const void* __restrict__ table, void* __restrict__ out,
                                                             int rows, int hidden, int vocab, float scale, int dtype) {
  METRALE_BY_ROW_TYPE(dtype, embed_rows, tokens, static_cast<const T*>(table), static_cast<T*>(out), rows, hidden, vocab, scale);
}

extern "C" __global__ void __launch_bounds__(1024) std_rms_norm(const void* input, void* output, const float* __restrict__ weight, int rows, int hidden,
                                                                float eps, float offset, int roundNormalized, int dtype) {
  STD_SHARED(float, red, 32);
  early_start();
  METRALE_BY_ROW_TYPE(dtype, rms_norm_rows, static_cast<const T*>(input), static_cast<T*>(output), weight, rows, hidden, eps, offset, roundNormalized, red);
}

extern "C" __global__ void __launch_bounds__(1024) std_add_rms_norm(const void* a, const void* b, void* sum, void* output, const float* __restrict__ weight,
                                                                    int rows, int hidden, float eps, float offset, int roundNormalized, int dtype) {
  STD_SHARED(float, red, 32);
  early_start();
  METRALE_BY_ROW_TYPE(dtype, add_rms_norm_rows, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(sum), static_cast<T*>(output), weight,
                      rows, hidden, eps, offset, roundNormalized, red);
}

extern "C" __global__ void __launch_bounds__(1024) std_layer_norm(const void* input, void* output, const float* __restrict__ weight,
                                                                  const float* __restrict__ bias, int rows, int hidden, float eps, int dtype) {
  STD_SHARED(float, red, 32);
  METRALE_BY_ROW_TYPE(dtype, layer_norm_rows, static_cast<const T*>(input), static_cast<T*>(output), weight, bias, rows, hidden, eps, red);
}

extern "C" __global__ void __launch_bounds__(1024) std_add(const void* a, const void* b, void* out, int count, int dtype) {
  early_start();
  METRALE_BY_ROW_TYPE(dtype, add_values, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), count);
}

extern "C" __global__ void __launch_bounds__(1024) std_silu_mul(const void* __restrict__ gateUp, void* __restrict__ out, int rows, int inter, int dtype) {
  METRALE_BY_ROW_TYPE(dtype, silu_mul_rows, static_cast<const T*>(gateUp), static_cast<T*>(out), rows, inter);
}

extern "C" __global__ void __launch_bounds__(1024) std_gelu_mul(const void* __restrict__ gateUp, void* __restrict__ out, int rows, int inter, float cutoff,
                                                                int sparse, int dtype) {
  STD_SHARED(float, red, 32);
  METRALE_BY_ROW_TYPE(dtype, gelu_mul_rows, static_cast<const T*>(gateUp), static_cast<T*>(out), rows, inter, cutoff, sparse, red);
}

extern "C" __global__ void __launch_bounds__(1024) std_softcap(float* __restrict__ x, int count, float cap) { softcap_values(x, count, cap); }
