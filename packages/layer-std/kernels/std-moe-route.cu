// MoE routing kernels of layer-std (src/moe-kernels.ts; reference src/moe.cpu.ts routeCpu;
// KERNELS.md "std-moe-route"):
//   std_moe_route        one CTA per row (rowLaunch: up to 1024 threads): scores (softmax, or
//                        sigmoid + correction bias), the kept groups, the top-k experts by repeated
//                        block-wide argmax, their weights; in f64 as the reference
//   std_moe_route_few    the same ids and weights bit for bit, for a few rows in one CTA of 256
//                        threads: elementwise steps over all threads, each row's reductions and
//                        top-k in one warp (shuffles, no barriers between the picks)
//   std_moe_router_gemv  few rows: logits = x · Wᵀ (f32 sums) over CTAs of 4 experts, and the last
//                        CTA to finish routes them as std_moe_route_few does (no second launch)
//   std_moe_shared_slots the shared expert as one more chosen expert: each row's topK (id, weight)
//                        copied to topK + 1 slots, the shared expert (stacked after the routed
//                        experts) last with weight sigmoid(x · g), or 1 without a gate
//
// Bits: the two route forms agree on every input. Their choices follow `better`, a strict total
// order (ties to the lower index), so the picks do not depend on the order of the reduction; the
// one order-dependent value, the softmax's sum, is summed by std_moe_route_few in the tree that
// std_moe_route's block_sum uses at the block size its launch gives (rowLaunch), and the weight sum
// in slot order in both.
#include "std-common.cuh"

using namespace stdk;

namespace {

constexpr int kMaxExperts = 2048;

__device__ __forceinline__ double finite_or_neg_inf(double v) { return isfinite(v) ? v : -INFINITY; }

/** (v1, i1) ranks before (v2, i2): a real candidate (i ≥ 0) before none, the larger value, then the lower index. */
__device__ __forceinline__ bool better(double v1, int i1, double v2, int i2) {
  if (i2 < 0) return i1 >= 0;
  if (i1 < 0) return false;
  return v1 > v2 || (v1 == v2 && i1 < i2);
}

/** The best (value, index) of the warp, returned to every lane (unique: `better` is a strict total order). */
__device__ __forceinline__ void warp_best(double& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double ov = __shfl_xor_sync(kFull, v, o);
    const int oi = __shfl_xor_sync(kFull, i, o);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
}

/** The best (value, index) of the CTA, returned to every thread (values already finite or −∞). */
__device__ __forceinline__ void block_best(double& v, int& i, double* redV, int* redI) {
  warp_best(v, i);
  __syncthreads();
  if (lane_id() == 0) redV[warp_id()] = v, redI[warp_id()] = i;
  __syncthreads();
  // Every warp reduces the warps' bests with a second butterfly (not a serial loop over them):
  // `better` is a strict total order on real candidates (values never NaN), so the best is unique.
  const bool has = lane_id() < num_warps();
  v = has ? redV[lane_id()] : 0.0;
  i = has ? redI[lane_id()] : -1;
  warp_best(v, i);
}


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
    // The weights, one thread per slot; each computes the same sum in order j (as the reference).
    for (int j = tid; j < topK; j += B) {
      const int32_t* id = ids + (size_t)r * topK;
      double sum = 0.0;
      for (int t = 0; t < topK; t++) sum += score[id[t]];
      if (scoring == 1) sum += 1e-20;
      double w = score[id[j]];
      if (normTopK) w /= sum;
      weights[(size_t)r * topK + j] = (float)(w * (double)scaling);
    }
    __syncthreads();
  }
}

// ---- few rows: std_moe_route_few and std_moe_router_gemv ------------------------------------------

namespace {

/** Threads of the few-row kernels (routeFewLaunch, routerGemvLaunch): 8 warps, a row each while routing. */
constexpr int kFewThreads = 256;
constexpr int kFewWarps = kFewThreads / 32;
/** Most slots a few-row route takes: slot j's id and weight live in lane j (routeForm checks it). */
constexpr int kFewMaxTopK = 32;
/**
 * Doubles of shared memory for the rows routed at once: per row its E scores and, with groups, its
 * nGroup group scores; room for a warp's row each at the common expert counts.
 */
constexpr int kFewScores = 4608;
/** Experts per CTA and most rows of std_moe_router_gemv: one warp sum per (expert, row) at the end. */
constexpr int kGemvExperts = 4;
constexpr int kGemvRows = 8;
static_assert(kGemvExperts * kGemvRows == 32, "warp_sum_32 leaves one (expert, row) sum per lane");

/** The shared memory of a few-row route. */
struct FewShared {
  double buf[kFewScores];
  double rowSum[kFewWarps];
  float rowMax[kFewWarps];
};

/**
 * std_moe_route's softmax sum for one row, by one warp: thread t of that kernel's CTA (B threads,
 * B = rowLaunch's block for E) sums its experts e ≡ t (mod B) in order from 0.0, each warp
 * butterflies, and the warps' sums are added in warp order; here lane l plays thread 32w + l of
 * every warp w, so the sum is the same double.
 */
__device__ __forceinline__ double route_block_sum(const double* __restrict__ sc, int E) {
  const int lane = lane_id();
  const int B = min(1024, 32 * ((E + 31) / 32));
  const int warps = B / 32;
  double v[32];
#pragma unroll
  for (int w = 0; w < 32; w++) {
    double s = 0.0;
    if (w < warps)
      for (int e = 32 * w + lane; e < E; e += B) s += sc[e];
    v[w] = s;
  }
  const double mine = warp_sum_32(v);  // lane w: warp w's sum
  // Unrolled so the broadcasts issue together; the adds stay in warp order.
  double total = __shfl_sync(kFull, mine, 0);
#pragma unroll
  for (int w = 1; w < 32; w++) {
    const double o = __shfl_sync(kFull, mine, w);
    if (w < warps) total += o;
  }
  return total;
}

/**
 * One row's groups, top-k and weights by one warp, from its final scores `sc` (and `gsc`, room for
 * nGroup group scores). Lane l holds experts l, l + 32, … (bit q of `avail`: expert l + 32q may
 * still be picked) and caches its two best; each pick is one warp argmax, and only the lane that
 * supplied it looks at its experts again (a full rescan when its cache runs dry).
 */
__device__ __forceinline__ void route_warp_row(const double* __restrict__ sc, double* __restrict__ gsc, const float* __restrict__ bias, int32_t* __restrict__ ids,
                                               float* __restrict__ weights, int E, int topK, int scoring, int normTopK, int nGroup, int topkGroup,
                                               float scaling) {
  const int lane = lane_id();
  const int n = (E + 31) >> 5;
  const auto choice = [&](int e) { return finite_or_neg_inf(sc[e] + (bias ? (double)__ldg(bias + e) : 0.0)); };
  uint64_t avail = 0;
  if (nGroup > 1) {
    // Groups: each scored by the sum of its two best choices (lanes over groups); the topkGroup
    // best are kept, one warp argmax a time, and their experts become available.
    const int size = E / nGroup;
    for (int g = lane; g < nGroup; g += 32) {
      double v1 = 0.0, v2 = 0.0;
      int i1 = -1, i2 = -1;
      for (int e = g * size; e < (g + 1) * size; e++) {
        const double c = choice(e);
        if (better(c, e, v1, i1)) v2 = v1, i2 = i1, v1 = c, i1 = e;
        else if (better(c, e, v2, i2)) v2 = c, i2 = e;
      }
      double gs = 0.0 + v1;
      if (i2 >= 0) gs += v2;
      gsc[g] = finite_or_neg_inf(gs);
    }
    uint64_t gkept = 0;  // bit j: group lane + 32j kept (lane-local)
    double gv;
    int gi;
    const auto gscan = [&]() {
      gv = 0.0, gi = -1;
      for (int g = lane, j = 0; g < nGroup; g += 32, j++)
        if (!((gkept >> j) & 1) && better(gsc[g], g, gv, gi)) gv = gsc[g], gi = g;
    };
    gscan();
    for (int k = 0; k < topkGroup; k++) {
      double v = gv;
      int i = gi;
      warp_best(v, i);
      if (i < 0) break;
      if (i == gi) {
        gkept |= 1ull << (i >> 5);
        gscan();
      }
      const int lo = i * size, hi = lo + size;
      for (int e = lo + ((lane - lo) & 31); e < hi; e += 32) avail |= 1ull << (e >> 5);
    }
  } else {
    for (int q = 0; q < n; q++)
      if (lane + 32 * q < E) avail |= 1ull << q;
  }
  double v1, v2;
  int i1, i2;
  const auto scan = [&]() {
    v1 = 0.0, v2 = 0.0, i1 = -1, i2 = -1;
    for (int q = 0; q < n; q++) {
      if (!((avail >> q) & 1)) continue;
      const int e = lane + 32 * q;
      const double c = choice(e);
      if (better(c, e, v1, i1)) v2 = v1, i2 = i1, v1 = c, i1 = e;
      else if (better(c, e, v2, i2)) v2 = c, i2 = e;
    }
  };
  scan();
  // The weights' sum in slot order, as std_moe_route (every lane adds the same values).
  double sum = 0.0, mine = 0.0;
  int myId = -1, picked = 0;
  for (int j = 0; j < topK; j++) {
    double v = v1;
    int i = i1;
    warp_best(v, i);
    if (i < 0) break;  // fewer kept experts than topK (checkMoe rules that out)
    const double s = sc[i];
    sum += s;
    if (lane == j) myId = i, mine = s;
    if (i == i1) {
      avail &= ~(1ull << (i >> 5));
      v1 = v2, i1 = i2, v2 = 0.0, i2 = -1;
      if (i1 < 0) scan();
    }
    picked = j + 1;
  }
  if (scoring == 1) sum += 1e-20;
  if (lane < picked) {
    double w = mine;
    if (normTopK) w /= sum;
    ids[lane] = myId;
    weights[lane] = (float)(w * (double)scaling);
  }
}

/**
 * The few-row route over `rows` rows by one CTA of kFewThreads: as many rows at a time as fit in
 * shared memory (and warps); per batch of rows the max (a warp per row), the scores over every
 * thread, the sum (a warp per row), the division over every thread, then a warp per row picks.
 * Logits are read through L2 (`__ldcg`): in std_moe_router_gemv other CTAs wrote them.
 */
__device__ __forceinline__ void route_few(const float* __restrict__ logits, const float* __restrict__ bias, int32_t* __restrict__ ids,
                                          float* __restrict__ weights, int rows, int E, int topK, int scoring, int normTopK, int nGroup, int topkGroup,
                                          float scaling, FewShared& s) {
  if (E > kMaxExperts || E < 1 || topK > kFewMaxTopK || blockDim.x != kFewThreads) __trap();
  const int tid = threadIdx.x, warp = warp_id(), lane = lane_id();
  const int G = nGroup > 1 ? nGroup : 0;
  const int stride = E + G;
  const int per = min(kFewWarps, kFewScores / stride);
  for (int r0 = 0; r0 < rows; r0 += per) {
    const int nr = min(per, rows - r0);
    const float* l = logits + (size_t)r0 * E;
    if (scoring == 0) {
      if (warp < nr) {
        float mx = -INFINITY;
        for (int e = lane; e < E; e += 32) {
          const float v = __ldcg(l + (size_t)warp * E + e);
          if (isfinite(v)) mx = fmaxf(mx, v);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
        if (lane == 0) s.rowMax[warp] = mx;
      }
      __syncthreads();
    }
    for (int q = tid; q < nr * E; q += kFewThreads) {
      const int i = q / E, e = q - i * E;
      const float v = __ldcg(l + q);
      s.buf[i * stride + e] = scoring == 0 ? (isfinite(v) ? exp((double)v - (double)s.rowMax[i]) : 0.0) : 1.0 / (1.0 + exp(-(double)v));
    }
    __syncthreads();
    if (scoring == 0) {
      if (warp < nr) {
        const double sum = route_block_sum(s.buf + warp * stride, E);
        if (lane == 0) s.rowSum[warp] = sum != 0.0 ? sum : 1.0;
      }
      __syncthreads();
      for (int q = tid; q < nr * E; q += kFewThreads) {
        const int i = q / E;
        s.buf[i * stride + (q - i * E)] /= s.rowSum[i];
      }
      __syncthreads();
    }
    if (warp < nr) {
      const size_t r = (size_t)(r0 + warp);
      double* sc = s.buf + warp * stride;
      route_warp_row(sc, sc + E, bias, ids + r * topK, weights + r * topK, E, topK, scoring, normTopK, nGroup, topkGroup, scaling);
    }
    __syncthreads();  // the next rows reuse the buffer
  }
}

/** Elements 8q … 8q + 7 of a T array as two float4 (one 16-byte load of bf16 / f16, two of f32). */
template <typename T>
__device__ __forceinline__ void ldg8(const T* p, size_t q, float4& a, float4& b) {
  if constexpr (std::is_same_v<T, float>) {
    a = __ldg(reinterpret_cast<const float4*>(p) + 2 * q);
    b = __ldg(reinterpret_cast<const float4*>(p) + 2 * q + 1);
  } else {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p) + q);
    a = unpack4<T>(make_uint2(u.x, u.y));
    b = unpack4<T>(make_uint2(u.z, u.w));
  }
}

/** acc + w·x over 8 elements, one fma each in element order. */
__device__ __forceinline__ float dot8(float acc, const float4 wa, const float4 wb, const float4 xa, const float4 xb) {
  acc = __fmaf_rn(wa.x, xa.x, acc);
  acc = __fmaf_rn(wa.y, xa.y, acc);
  acc = __fmaf_rn(wa.z, xa.z, acc);
  acc = __fmaf_rn(wa.w, xa.w, acc);
  acc = __fmaf_rn(wb.x, xb.x, acc);
  acc = __fmaf_rn(wb.y, xb.y, acc);
  acc = __fmaf_rn(wb.z, xb.z, acc);
  return __fmaf_rn(wb.w, xb.w, acc);
}

/**
 * logits[r][e] = x_r · W_e for this CTA's kGemvExperts experts: the 8 warps split D (lane l of warp
 * w takes the 8-element steps k ≡ 32w + l mod 256; elements likewise where D is not a multiple of 8
 * or a base is unaligned), each lane sums its steps in order with one fma per element, then the
 * lanes' sums by warp_sum_32's tree and the warps' in warp order. A row's logits do not depend on
 * the other rows of the step.
 */
template <typename T>
__device__ __forceinline__ void router_gemv(const T* __restrict__ x, const T* __restrict__ w, float* __restrict__ logits, int rows, int D, int E, float* red) {
  const int lane = lane_id(), warp = warp_id();
  const int e0 = blockIdx.x * kGemvExperts;
  float acc[kGemvExperts][kGemvRows];
#pragma unroll
  for (int ex = 0; ex < kGemvExperts; ex++)
#pragma unroll
    for (int r = 0; r < kGemvRows; r++) acc[ex][r] = 0.f;
  if ((D & 7) == 0 && aligned16(x) && aligned16(w)) {
    const int nv = D >> 3;
    for (int k = warp * 32 + lane; k < nv; k += kFewThreads) {
      float4 wa[kGemvExperts], wb[kGemvExperts];
#pragma unroll
      for (int ex = 0; ex < kGemvExperts; ex++) {
        if (e0 + ex < E) ldg8(w + (size_t)(e0 + ex) * D, k, wa[ex], wb[ex]);
        else wa[ex] = wb[ex] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int r = 0; r < kGemvRows; r++) {
        if (r >= rows) break;
        float4 xa, xb;
        ldg8(x + (size_t)r * D, k, xa, xb);
#pragma unroll
        for (int ex = 0; ex < kGemvExperts; ex++) acc[ex][r] = dot8(acc[ex][r], wa[ex], wb[ex], xa, xb);
      }
    }
  } else {
    for (int d = warp * 32 + lane; d < D; d += kFewThreads) {
      float wv[kGemvExperts];
#pragma unroll
      for (int ex = 0; ex < kGemvExperts; ex++) wv[ex] = e0 + ex < E ? ldg_value(w, (size_t)(e0 + ex) * D + d) : 0.f;
#pragma unroll
      for (int r = 0; r < kGemvRows; r++) {
        if (r >= rows) break;
        const float xv = ldg_value(x, (size_t)r * D + d);
#pragma unroll
        for (int ex = 0; ex < kGemvExperts; ex++) acc[ex][r] = __fmaf_rn(wv[ex], xv, acc[ex][r]);
      }
    }
  }
  float v[32];
#pragma unroll
  for (int ex = 0; ex < kGemvExperts; ex++)
#pragma unroll
    for (int r = 0; r < kGemvRows; r++) v[ex * kGemvRows + r] = acc[ex][r];
  red[warp * 32 + lane] = warp_sum_32(v);  // lane L: expert e0 + L / 8, row L % 8
  __syncthreads();
  if (warp == 0) {
    float t = red[lane];
    for (int o = 1; o < kFewWarps; o++) t += red[o * 32 + lane];
    const int e = e0 + lane / kGemvRows, r = lane % kGemvRows;
    if (r < rows && e < E) logits[(size_t)r * E + e] = t;
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kFewThreads) std_moe_route_few(const float* __restrict__ logits, const float* __restrict__ bias,
                                                                           int32_t* __restrict__ ids, float* __restrict__ weights, int rows, int experts,
                                                                           int topK, int scoring, int normTopK, int nGroup, int topkGroup, float scaling) {
  STD_SHARED(FewShared, s, 1);
  if (blockIdx.x != 0) return;  // one CTA routes every row
  route_few(logits, bias, ids, weights, rows, experts, topK, scoring, normTopK, nGroup, topkGroup, scaling, s[0]);
}

extern "C" __global__ void __launch_bounds__(kFewThreads) std_moe_router_gemv(const void* __restrict__ x, const void* __restrict__ w, float* __restrict__ logits,
                                                                             unsigned* __restrict__ counter, const float* __restrict__ bias,
                                                                             int32_t* __restrict__ ids, float* __restrict__ weights, int rows, int hidden,
                                                                             int experts, int topK, int scoring, int normTopK, int nGroup, int topkGroup,
                                                                             float scaling, int dtype) {
  STD_SHARED(float, red, kFewWarps * 32);
  STD_SHARED(FewShared, s, 1);
  STD_SHARED(int, last, 1);
  if (rows > kGemvRows || blockDim.x != kFewThreads || experts < 1 || experts > kMaxExperts) __trap();
  METRALE_BY_ROW_TYPE(dtype, router_gemv, static_cast<const T*>(x), static_cast<const T*>(w), logits, rows, hidden, experts, red);
  // The last CTA to finish routes: each writer's logits reach L2 before its CTA counts itself done,
  // and the last resets the counter, so the next launch (or a graph replay) starts from zero.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned done = atomicAdd(counter, 1u);
    last[0] = done == gridDim.x * gridDim.y * gridDim.z - 1;
    if (last[0]) *counter = 0;
  }
  __syncthreads();
  if (!last[0]) return;
  __threadfence();
  route_few(logits, bias, ids, weights, rows, experts, topK, scoring, normTopK, nGroup, topkGroup, scaling, s[0]);
}

// ---- the shared expert as one more slot ----------------------------------------------------------

namespace {

/**
 * Row r of std_moe_shared_slots (a CTA of any multiple of 32 threads): slots [r][0, topK) are the
 * route's, slot topK the shared expert's, weight sigmoid(Σ_d x[r][d] · g[d]) (each thread sums its
 * d ≡ t (mod B) in order by fma, then block_sum's tree), or 1 where g is null. A row's slots do not
 * depend on the other rows.
 */
template <typename T>
__device__ __forceinline__ void shared_slots(const T* __restrict__ x, const float* __restrict__ gate, const int32_t* __restrict__ ids,
                                             const float* __restrict__ weights, int32_t* __restrict__ slotIds, float* __restrict__ slotWeights,
                                             int rows, int D, int topK, int sharedId, float* red) {
  const int tid = threadIdx.x, B = blockDim.x, S = topK + 1;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    for (int j = tid; j < topK; j += B) {
      slotIds[(size_t)r * S + j] = ids[(size_t)r * topK + j];
      slotWeights[(size_t)r * S + j] = weights[(size_t)r * topK + j];
    }
    float g = 1.f;
    if (gate) {
      float acc = 0.f;
      for (int d = tid; d < D; d += B) acc = __fmaf_rn(ldg_value(x, (size_t)r * D + d), gate[d], acc);
      g = sigmoid(block_sum(acc, red));
    }
    if (tid == 0) slotIds[(size_t)r * S + topK] = sharedId, slotWeights[(size_t)r * S + topK] = g;
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256) std_moe_shared_slots(const void* __restrict__ x, const float* __restrict__ gate, const int32_t* __restrict__ ids,
                                                                      const float* __restrict__ weights, int32_t* __restrict__ slotIds,
                                                                      float* __restrict__ slotWeights, int rows, int hidden, int topK, int sharedId, int dtype) {
  STD_SHARED(float, red, 32);
  if ((blockDim.x & 31) != 0) __trap();
  METRALE_BY_ROW_TYPE(dtype, shared_slots, static_cast<const T*>(x), gate, ids, weights, slotIds, slotWeights, rows, hidden, topK, sharedId, red);
}
