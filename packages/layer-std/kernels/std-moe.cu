// Mixture-of-experts kernels of layer-std (src/moe-kernels.ts; reference src/moe.cpu.ts;
// KERNELS.md):
//   std_moe_route    one CTA per row: scores (softmax, or sigmoid + correction bias), the kept
//                    groups, the top-k experts and their weights, in f64 as the reference
//   std_moe_experts_up  h[r][j] = silu(gate_e x) ⊙ (up_e x), e = ids[r][j] (zeros for an id outside
//                       [0, experts)); grid [rows·topK, ⌈inter / 32⌉], 256 threads, a warp per
//                       intermediate row (gate and up rows read once, 16-byte loads across D)
//   std_moe_experts     out[r] = Σ_j w_rj · down_e h[r][j]; grid [rows, ⌈hidden / 16⌉], 256 threads,
//                       a warp per output value, the row's experts summed in order j (no atomics:
//                       deterministic, and `out` is overwritten, never accumulated)
//   std_moe_combine     out = routed + σ(gate) · shared (or + shared)
//
// Decode reads every weight of a chosen expert once per token and is memory-bound; the two
// passes give rows·topK·⌈I/32⌉ and rows·⌈D/16⌉ CTAs, enough to fill the GPU at batch 1.
#include "std-common.cuh"

using namespace stdk;

namespace {

constexpr int kMaxExperts = 2048;
/** Intermediate rows of one (row, expert) per CTA of std_moe_experts_up (launch: moeUpLaunch). */
constexpr int kUpRows = 32;
/** Output values of one row per CTA of std_moe_experts (launch: moeDownLaunch). */
constexpr int kDownRows = 16;

__device__ __forceinline__ double finite_or_neg_inf(double v) { return isfinite(v) ? v : -INFINITY; }

/** (v1, i1) ranks before (v2, i2): a real candidate (i ≥ 0) before none, the larger value, then the lower index. */
__device__ __forceinline__ bool better(double v1, int i1, double v2, int i2) {
  if (i2 < 0) return i1 >= 0;
  if (i1 < 0) return false;
  return v1 > v2 || (v1 == v2 && i1 < i2);
}

/** The best (value, index) of the CTA, returned to every thread (values already finite or −∞). */
__device__ __forceinline__ void block_best(double& v, int& i, double* redV, int* redI) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double ov = __shfl_xor_sync(kFull, v, o);
    const int oi = __shfl_xor_sync(kFull, i, o);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
  __syncthreads();
  if (lane_id() == 0) redV[warp_id()] = v, redI[warp_id()] = i;
  __syncthreads();
  v = redV[0], i = redI[0];
  for (int w = 1; w < num_warps(); w++)
    if (better(redV[w], redI[w], v, i)) v = redV[w], i = redI[w];
}

__device__ __forceinline__ float dot4(const float4 a, const float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

}  // namespace

extern "C" __global__ void __launch_bounds__(1024) std_moe_route(const float* __restrict__ logits, const float* __restrict__ bias, int32_t* __restrict__ ids,
                                                                 float* __restrict__ weights, int rows, int experts, int topK, int scoring, int normTopK,
                                                                 int nGroup, int topkGroup, float scaling) {
  STD_SHARED(double, score, kMaxExperts);
  STD_SHARED(double, gscore, kMaxExperts);
  STD_SHARED(unsigned char, taken, kMaxExperts);
  STD_SHARED(unsigned char, gkept, kMaxExperts);
  STD_SHARED(double, redD, 32);
  STD_SHARED(int, redI, 32);
  STD_SHARED(float, redF, 32);
  const int E = experts;
  if (E > kMaxExperts || E < 1) __trap();
  const int tid = threadIdx.x, B = blockDim.x;
  const int size = nGroup > 1 ? E / nGroup : E;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* l = logits + (size_t)r * E;
    // Scores, f64 as the reference: softmax over the finite logits, or sigmoid.
    if (scoring == 0) {
      float mx = -INFINITY;
      for (int e = tid; e < E; e += B) {
        const float v = l[e];
        if (isfinite(v)) mx = fmaxf(mx, v);
      }
      mx = block_max(mx, redF);
      double s = 0.0;
      for (int e = tid; e < E; e += B) {
        const float v = l[e];
        const double sc = isfinite(v) ? exp((double)v - (double)mx) : 0.0;
        score[e] = sc;
        s += sc;
      }
      s = block_sum(s, redD);
      const double sum = s != 0.0 ? s : 1.0;
      for (int e = tid; e < E; e += B) score[e] /= sum;
    } else {
      for (int e = tid; e < E; e += B) score[e] = 1.0 / (1.0 + exp(-(double)l[e]));
    }
    // Only thread e mod B touches expert e's entries in score and taken until the barrier below.
    for (int e = tid; e < E; e += B) taken[e] = 0;
    // Groups: each scored by the sum of its two best choices; the topkGroup best are kept.
    if (nGroup > 1) {
      __syncthreads();  // every score written
      for (int g = tid; g < nGroup; g += B) {
        double v1 = 0.0, v2 = 0.0;
        int i1 = -1, i2 = -1;
        for (int e = g * size; e < (g + 1) * size; e++) {
          const double c = finite_or_neg_inf(score[e] + (bias ? (double)bias[e] : 0.0));
          if (better(c, e, v1, i1)) v2 = v1, i2 = i1, v1 = c, i1 = e;
          else if (better(c, e, v2, i2)) v2 = c, i2 = e;
        }
        double gs = 0.0 + v1;
        if (i2 >= 0) gs += v2;
        gscore[g] = finite_or_neg_inf(gs);
        gkept[g] = 0;
      }
      __syncthreads();
      if (tid == 0) {
        for (int k = 0; k < topkGroup; k++) {
          double bv = 0.0;
          int bi = -1;
          for (int g = 0; g < nGroup; g++)
            if (!gkept[g] && better(gscore[g], g, bv, bi)) bv = gscore[g], bi = g;
          if (bi < 0) break;
          gkept[bi] = 1;
        }
      }
      __syncthreads();
      for (int e = tid; e < E; e += B) taken[e] = gkept[e / size] ? 0 : 2;
    }
    // Top-k of the choices among the kept experts, one block-wide pick at a time.
    for (int j = 0; j < topK; j++) {
      double bv = 0.0;
      int bi = -1;
      for (int e = tid; e < E; e += B) {
        if (taken[e]) continue;
        const double c = finite_or_neg_inf(score[e] + (bias ? (double)bias[e] : 0.0));
        if (better(c, e, bv, bi)) bv = c, bi = e;
      }
      block_best(bv, bi, redD, redI);
      if (bi < 0) break;  // fewer kept experts than topK (checkMoe rules that out)
      if (bi % B == tid) taken[bi] = 1;
      if (tid == 0) ids[(size_t)r * topK + j] = bi;
    }
    __syncthreads();
    if (tid == 0) {
      int32_t* id = ids + (size_t)r * topK;
      double sum = 0.0;
      for (int j = 0; j < topK; j++) sum += score[id[j]];
      if (scoring == 1) sum += 1e-20;
      for (int j = 0; j < topK; j++) {
        double w = score[id[j]];
        if (normTopK) w /= sum;
        weights[(size_t)r * topK + j] = (float)(w * (double)scaling);
      }
    }
    __syncthreads();
  }
}

extern "C" __global__ void __launch_bounds__(256) std_moe_experts_up(const float* __restrict__ input, const int32_t* __restrict__ ids,
                                                                      const float* __restrict__ gateUp, float* __restrict__ h, int rows, int hidden,
                                                                      int inter, int experts, int topK) {
  const int D = hidden, I = inter;
  const int lane = lane_id(), nw = num_warps();
  const bool vec = (D & 3) == 0 && aligned16(input) && aligned16(gateUp);
  for (int rj = blockIdx.x; rj < rows * topK; rj += gridDim.x) {
    const int r = rj / topK;
    const int e = ids[rj];
    const bool valid = e >= 0 && e < experts;
    const float* x = input + (size_t)r * D;
    float* hr = h + (size_t)rj * I;
    const float* G = gateUp + (size_t)(valid ? e : 0) * 2 * I * D;
    const float* U = G + (size_t)I * D;
    for (int i0 = blockIdx.y * kUpRows; i0 < I; i0 += gridDim.y * kUpRows) {
      for (int i = i0 + warp_id(); i < min(I, i0 + kUpRows); i += nw) {
        if (!valid) {
          if (lane == 0) hr[i] = 0.f;
          continue;
        }
        const float* g = G + (size_t)i * D;
        const float* u = U + (size_t)i * D;
        float sg = 0.f, su = 0.f;
        if (vec) {
          const float4* g4 = reinterpret_cast<const float4*>(g);
          const float4* u4 = reinterpret_cast<const float4*>(u);
          const float4* x4 = reinterpret_cast<const float4*>(x);
#pragma unroll 4
          for (int k = lane; k < (D >> 2); k += 32) {
            const float4 xv = __ldg(x4 + k);
            sg += dot4(__ldg(g4 + k), xv);
            su += dot4(__ldg(u4 + k), xv);
          }
        } else {
          for (int k = lane; k < D; k += 32) {
            const float xv = __ldg(x + k);
            sg += __ldg(g + k) * xv;
            su += __ldg(u + k) * xv;
          }
        }
        sg = warp_sum(sg);
        su = warp_sum(su);
        if (lane == 0) hr[i] = silu(sg) * su;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) std_moe_experts(const float* __restrict__ h, const int32_t* __restrict__ ids,
                                                                   const float* __restrict__ weights, const float* __restrict__ down,
                                                                   float* __restrict__ output, int rows, int hidden, int inter, int experts, int topK) {
  const int D = hidden, I = inter;
  const int lane = lane_id(), nw = num_warps();
  const bool vec = (I & 3) == 0 && aligned16(h) && aligned16(down);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    for (int d0 = blockIdx.y * kDownRows; d0 < D; d0 += gridDim.y * kDownRows) {
      for (int d = d0 + warp_id(); d < min(D, d0 + kDownRows); d += nw) {
        float acc = 0.f;
        for (int j = 0; j < topK; j++) {
          const int e = ids[(size_t)r * topK + j];
          if (e < 0 || e >= experts) continue;
          const float* dn = down + ((size_t)e * D + d) * I;
          const float* hj = h + ((size_t)r * topK + j) * I;
          float s = 0.f;
          if (vec) {
            const float4* dn4 = reinterpret_cast<const float4*>(dn);
            const float4* h4 = reinterpret_cast<const float4*>(hj);
#pragma unroll 4
            for (int k = lane; k < (I >> 2); k += 32) s += dot4(__ldg(dn4 + k), __ldg(h4 + k));
          } else {
            for (int k = lane; k < I; k += 32) s += __ldg(dn + k) * __ldg(hj + k);
          }
          acc += weights[(size_t)r * topK + j] * warp_sum(s);
        }
        if (lane == 0) output[(size_t)r * D + d] = acc;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) std_moe_combine(const float* __restrict__ routed, const float* __restrict__ shared,
                                                                   const float* __restrict__ gate, float* __restrict__ output, int rows, int hidden) {
  const bool vec = (hidden & 3) == 0 && aligned16(routed) && aligned16(shared) && aligned16(output);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float g = gate ? sigmoid(gate[r]) : 1.0f;
    const size_t o = (size_t)r * hidden;
    if (vec) {
      for (int i = threadIdx.x; i < (hidden >> 2); i += blockDim.x) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(routed + o) + i);
        const float4 b = __ldg(reinterpret_cast<const float4*>(shared + o) + i);
        reinterpret_cast<float4*>(output + o)[i] = make_float4(a.x + g * b.x, a.y + g * b.y, a.z + g * b.z, a.w + g * b.w);
      }
    } else {
      for (int i = threadIdx.x; i < hidden; i += blockDim.x) output[o + i] = routed[o + i] + g * shared[o + i];
    }
  }
}
