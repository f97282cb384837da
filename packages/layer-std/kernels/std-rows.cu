// Row-wise kernels of layer-std (src/rows-kernels.ts; reference src/rows.cpu.ts; KERNELS.md):
//   std_embed       out[r] = scale · table[tokens[r]] (zeros for a token outside [0, vocab))
//   std_rms_norm    y = x · 1/sqrt(mean(x²) + eps) · (offset + w), in place allowed
//   std_layer_norm  y = (x − mean) · 1/sqrt(var + eps) · w (+ b), biased variance, in place allowed
//   std_add         out = a + b, out may alias a or b
//   std_silu_mul    out[r][i] = silu(gateUp[r][i]) · gateUp[r][inter + i]
//
// Launch: one CTA per row (rowLaunch: min(1024, width rounded up to 32) threads; the row loop
// strides by gridDim.x), std_add one element per thread (flatLaunch, 256 per CTA, grid-stride).
// Memory-bound: 16-byte loads and stores whenever the row length is a multiple of 4 and the
// pointers are 16-byte aligned (the usual case: allocations are 256-byte aligned), coalesced
// across the warp; each thread reads and writes the same elements in every pass, which is what
// makes the norms safe in place. Sums are f32 with a deterministic CTA reduction.
#include "std-common.cuh"

using namespace stdk;

extern "C" __global__ void __launch_bounds__(1024) std_embed(const int32_t* __restrict__ tokens, const float* __restrict__ table, float* __restrict__ out,
                                                             int rows, int hidden, int vocab, float scale) {
  const bool vec = (hidden & 3) == 0 && aligned16(table) && aligned16(out);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int t = tokens[r];
    float* o = out + (size_t)r * hidden;
    const bool valid = t >= 0 && t < vocab;
    const float* src = table + (size_t)(valid ? t : 0) * hidden;
    if (vec) {
      float4* o4 = reinterpret_cast<float4*>(o);
      const float4* s4 = reinterpret_cast<const float4*>(src);
      for (int i = threadIdx.x; i < (hidden >> 2); i += blockDim.x) {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (valid) {
          v = __ldg(s4 + i);
          v.x *= scale, v.y *= scale, v.z *= scale, v.w *= scale;
        }
        o4[i] = v;
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = valid ? scale * __ldg(src + i) : 0.f;
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) std_rms_norm(const float* input, float* output, const float* __restrict__ weight, int rows, int hidden,
                                                                float eps, float offset) {
  STD_SHARED(float, red, 32);
  const bool vec = (hidden & 3) == 0 && aligned16(input) && aligned16(output) && aligned16(weight);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = input + (size_t)r * hidden;
    float* y = output + (size_t)r * hidden;
    float ss = 0.f;
    if (vec) {
      for (int i = threadIdx.x; i < (hidden >> 2); i += blockDim.x) {
        const float4 v = reinterpret_cast<const float4*>(x)[i];
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += x[i] * x[i];
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)hidden + eps);
    if (vec) {
      for (int i = threadIdx.x; i < (hidden >> 2); i += blockDim.x) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        const float4 w = __ldg(reinterpret_cast<const float4*>(weight) + i);
        v.x = v.x * inv * (offset + w.x), v.y = v.y * inv * (offset + w.y);
        v.z = v.z * inv * (offset + w.z), v.w = v.w * inv * (offset + w.w);
        reinterpret_cast<float4*>(y)[i] = v;
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) y[i] = x[i] * inv * (offset + __ldg(weight + i));
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) std_layer_norm(const float* input, float* output, const float* __restrict__ weight,
                                                                  const float* __restrict__ bias, int rows, int hidden, float eps) {
  STD_SHARED(float, red, 32);
  const bool vec = (hidden & 3) == 0 && aligned16(input) && aligned16(output) && aligned16(weight) && (bias == nullptr || aligned16(bias));
  const int n4 = hidden >> 2;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = input + (size_t)r * hidden;
    float* y = output + (size_t)r * hidden;
    // Two passes (mean, then the centred sum of squares): no cancellation for rows far from 0.
    float s = 0.f;
    if (vec) {
      for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = reinterpret_cast<const float4*>(x)[i];
        s += (v.x + v.y) + (v.z + v.w);
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) s += x[i];
    }
    const float mean = block_sum(s, red) / (float)hidden;
    float ss = 0.f;
    if (vec) {
      for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 v = reinterpret_cast<const float4*>(x)[i];
        const float a = v.x - mean, b = v.y - mean, c = v.z - mean, d = v.w - mean;
        ss += a * a + b * b + c * c + d * d;
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += (x[i] - mean) * (x[i] - mean);
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)hidden + eps);
    if (vec) {
      for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        const float4 w = __ldg(reinterpret_cast<const float4*>(weight) + i);
        const float4 b = bias ? __ldg(reinterpret_cast<const float4*>(bias) + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        v.x = (v.x - mean) * inv * w.x + b.x, v.y = (v.y - mean) * inv * w.y + b.y;
        v.z = (v.z - mean) * inv * w.z + b.z, v.w = (v.w - mean) * inv * w.w + b.w;
        reinterpret_cast<float4*>(y)[i] = v;
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) y[i] = (x[i] - mean) * inv * __ldg(weight + i) + (bias ? __ldg(bias + i) : 0.f);
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) std_add(const float* a, const float* b, float* out, int count) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)count; i += stride) out[i] = a[i] + b[i];
}

extern "C" __global__ void __launch_bounds__(1024) std_silu_mul(const float* __restrict__ gateUp, float* __restrict__ out, int rows, int inter) {
  const bool vec = (inter & 3) == 0 && aligned16(gateUp) && aligned16(out);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* g = gateUp + (size_t)r * 2 * inter;
    float* o = out + (size_t)r * inter;
    if (vec) {
      for (int i = threadIdx.x; i < (inter >> 2); i += blockDim.x) {
        const float4 gv = __ldg(reinterpret_cast<const float4*>(g) + i);
        const float4 uv = __ldg(reinterpret_cast<const float4*>(g + inter) + i);
        reinterpret_cast<float4*>(o)[i] = make_float4(silu(gv.x) * uv.x, silu(gv.y) * uv.y, silu(gv.z) * uv.z, silu(gv.w) * uv.w);
      }
    } else {
      for (int i = threadIdx.x; i < inter; i += blockDim.x) o[i] = silu(__ldg(g + i)) * __ldg(g + inter + i);
    }
  }
}
