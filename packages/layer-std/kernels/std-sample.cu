// Token selection of layer-std (src/sample-kernels.ts; reference src/sample.cpu.ts; KERNELS.md):
//   std_argmax  out[r] = the lowest index of row r's maximum (NaN never wins; an all −∞ row gives 0)
//   std_sample  softmax at a temperature, then top-k, top-p, min-p (HF order; ties at a cut-off
//               kept), then the inverse CDF at uniforms[r] · Σp
//
// One CTA per row (DeviceSampler: 1024 threads). The probabilities are never stored: every pass
// recomputes p_i exactly as the reference rounds it, p_i = f32(f32(exp((l_i − max) / T)) / Σ e),
// with Σ e the f64 sum of the unrounded exponentials. So a cut-off is a value of p and the filters
// compare f32 with f32 as the reference does:
//   top-k  the largest v with #{p ≥ v} ≥ k (the k-th largest p, duplicates counted),
//   top-p  the largest v with Σ_{p ≥ v} p ≥ topP · Σ p (over the top-k survivors), which is the
//          value the reference's descending scan stops at,
// each found by a 4-pass MSB-first radix select over the bit patterns of p (non-negative floats
// order as their patterns), with 256-bucket histograms. Masses are summed as 64-bit fixed point
// (p · 2^60, exact and independent of the order of the atomics), so every pass of the select sees
// the same sums; the inverse CDF uses the same fixed-point prefix sums in index order. Against the
// reference's f64 sums this moves a cut-off or a sampled token only when a draw or a target lands
// within ~1e-16 of a boundary.
#include "std-common.cuh"

using namespace stdk;

namespace {

typedef unsigned long long u64;

constexpr double kFix = 1152921504606846976.0;  // 2^60: Σp ≤ 8 fits in 63 bits

__device__ __forceinline__ u64 fixed(float p) { return (u64)((double)p * kFix); }

/** p_i of one row, rounded as sample.cpu.ts's filteredProbs rounds it. */
struct Probs {
  const float* __restrict__ l;
  float mx;
  double temperature;
  double sum;
  __device__ __forceinline__ float operator()(int i) const {
    const float e = (float)exp(((double)__ldg(l + i) - (double)mx) / temperature);
    return (float)((double)e / sum);
  }
};

struct Select {
  u64 hist[256];
  u64 above;
  unsigned prefix;
  int found;
};

/**
 * The largest bit pattern v such that Σ weight(p_i) over the kept i with p_i ≥ v reaches `target`
 * (0 when even the whole row does not). `weight` returns 1 (counts) or fixed(p) (masses).
 */
template <typename Keep, typename Weight>
__device__ unsigned select_cut(const Probs& P, int V, Keep keep, Weight weight, double target, Select& s) {
  const int tid = threadIdx.x, B = blockDim.x;
  unsigned prefix = 0;
  u64 above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += B) s.hist[b] = 0;
    __syncthreads();
    const unsigned hiMask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    for (int i = tid; i < V; i += B) {
      const float p = P(i);
      if (!keep(p)) continue;
      const unsigned bits = __float_as_uint(p);
      if ((bits & hiMask) != prefix) continue;
      const u64 w = weight(p);
      if (w) atomicAdd(&s.hist[(bits >> shift) & 255u], w);
    }
    __syncthreads();
    if (tid == 0) {
      u64 cum = above;
      int found = -1;
      for (int b = 255; b >= 0; b--) {
        const u64 next = cum + s.hist[b];
        if ((double)next >= target) {
          found = b;
          break;
        }
        cum = next;
      }
      s.found = found >= 0;
      if (found >= 0) s.prefix = prefix | ((unsigned)found << shift), s.above = cum;
    }
    __syncthreads();
    const bool found = s.found;
    prefix = s.prefix;
    above = s.above;
    __syncthreads();  // s is rewritten by the next pass or the next select
    if (!found) return 0u;  // only in the first pass: the row's total is below the target
  }
  return prefix;
}

/** Exclusive prefix sum over the CTA in thread order; `red` holds 32 words; also returns the total. */
__device__ __forceinline__ u64 block_exclusive_scan(u64 v, u64* red, u64& total) {
  const int lane = lane_id(), warp = warp_id();
  u64 inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 n = __shfl_up_sync(kFull, inc, o);
    if (lane >= o) inc += n;
  }
  __syncthreads();
  if (lane == 31) red[warp] = inc;
  __syncthreads();
  u64 before = 0;
  total = 0;
  for (int w = 0; w < num_warps(); w++) {
    if (w < warp) before += red[w];
    total += red[w];
  }
  return before + inc - v;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024) std_argmax(const float* __restrict__ logits, int32_t* __restrict__ out, int rows, int vocab) {
  STD_SHARED(float, redV, 32);
  STD_SHARED(int, redI, 32);
  constexpr int kNone = 0x7fffffff;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* l = logits + (size_t)r * vocab;
    float bv = -INFINITY;
    int bi = kNone;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = __ldg(l + i);
      if (v > bv) bv = v, bi = i;  // strict: the lowest index of this thread's maximum; NaN never
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFull, bv, o);
      const int oi = __shfl_xor_sync(kFull, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    __syncthreads();
    if (lane_id() == 0) redV[warp_id()] = bv, redI[warp_id()] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < num_warps(); w++)
        if (redV[w] > bv || (redV[w] == bv && redI[w] < bi)) bv = redV[w], bi = redI[w];
      out[r] = bi == kNone ? 0 : bi;
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) std_sample(const float* __restrict__ logits, const float* __restrict__ uniforms, int32_t* __restrict__ out,
                                                              int rows, int vocab, float temperature, int topK, float topP, float minP) {
  STD_SHARED(float, redF, 32);
  STD_SHARED(double, redD, 32);
  STD_SHARED(u64, redU, 32);
  __shared__ Select sel;
  __shared__ int picked;
  const int V = vocab, tid = threadIdx.x, B = blockDim.x;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    Probs P{logits + (size_t)r * V, -INFINITY, (double)temperature, 0.0};
    float mx = -INFINITY;
    for (int i = tid; i < V; i += B) mx = fmaxf(mx, __ldg(P.l + i));
    P.mx = block_max(mx, redF);
    double s = 0.0;
    for (int i = tid; i < V; i += B) s += exp(((double)__ldg(P.l + i) - (double)P.mx) / P.temperature);
    P.sum = block_sum(s, redD);

    float cutK = 0.f;
    if (topK > 0 && topK < V) {
      cutK = __uint_as_float(select_cut(P, V, [](float) { return true; }, [](float) -> u64 { return 1; }, (double)topK, sel));
    }
    float cutP = 0.f;
    if (topP < 1.f) {
      u64 t = 0;
      for (int i = tid; i < V; i += B) {
        const float p = P(i);
        if (p >= cutK) t += fixed(p);
      }
      const double total = (double)block_sum(t, redU);
      // The reference's scan stops at its first (largest) value even for a target of 0.
      const double target = fmax((double)topP * total, 1e-300);
      cutP = __uint_as_float(select_cut(P, V, [=](float p) { return p >= cutK; }, [](float p) { return fixed(p); }, target, sel));
    }
    // min-p against the largest p: that of the maximum logit, exp(0) = 1 over the sum.
    const double minAbs = (double)minP * (double)(float)(1.0 / P.sum);
    const auto keep = [=](float p) { return p >= cutK && p >= cutP && !((double)p < minAbs); };

    // Inverse CDF in index order: each thread a contiguous chunk, fixed-point prefix sums.
    const int C = (V + B - 1) / B;
    const int lo = min(V, tid * C), hi = min(V, lo + C);
    u64 mine = 0;
    for (int i = lo; i < hi; i++) {
      const float p = P(i);
      if (keep(p)) mine += fixed(p);
    }
    u64 total = 0;
    const u64 before = block_exclusive_scan(mine, redU, total);
    if (tid == 0) picked = -1;
    __syncthreads();
    if (total > 0) {
      u64 u = (u64)((double)__ldg(uniforms + r) * (double)total);
      if (u >= total) u = total - 1;
      if (u >= before && u < before + mine) {
        u64 c = before;
        for (int i = lo; i < hi; i++) {
          const float p = P(i);
          if (!keep(p)) continue;
          c += fixed(p);
          if (u < c) {
            picked = i;
            break;
          }
        }
      }
    }
    __syncthreads();
    if (tid == 0) out[r] = picked >= 0 ? picked : 0;
    __syncthreads();
  }
}
