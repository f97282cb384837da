// Token selection of layer-std (src/sample-kernels.ts; reference src/sample.cpu.ts; KERNELS.md):
//   std_argmax  out[r] = the lowest index of row r's maximum (NaN never wins; an all −∞ row gives 0)
//   std_sample  each row by its own parameters (params[r], f64: temperature, top-k, top-p, min-p,
//               draft): softmax at the temperature, then top-k, top-p, min-p (HF order; ties at a
//               cut-off kept), then the inverse CDF at uniforms[r] · Σp (the host's f64 draw, as
//               core's sampler takes it); with a draft (≥ 0) the draft is left out of the draw
//               (rejection sampling's residual) and draftProbs[r] is its share of the kept mass (the
//               acceptance ratio); a row of temperature ≤ 0 takes
//               its argmax as std_argmax does (so greedy and sampled requests share a launch)
//   std_logprobs each asking row's log-normalizer, its picked token's logit and rank and its n most
//               likely tokens (core's positionLogprobs; the host makes logit − lse of them)
//
// std_argmax: CTAs [slices, rows] (argmaxLaunch), each the best (value, index) pair of one slice of
// its row, the last of the row's CTAs to finish merging the slices' pairs. The best pair is the
// largest value and, among equal values, the lowest index: a total order on the pairs, so the token
// does not depend on the slicing or on the order the CTAs finish.
//
// std_sample: one CTA per row (DeviceSampler: 1024 threads). The probabilities are never stored: a
// pass recomputes p_i exactly as the reference rounds it, p_i = f32(f32(exp((l_i − max) / T)) / Σ e),
// with Σ e the f64 sum of the unrounded exponentials, for the logits that can still be kept (once a
// cut-off is known, a logit whose p is provably below it is skipped: Probs::below). So a cut-off is
// a value of p and the filters compare f32 with f32 as the reference does:
//   top-k  the largest v with #{p ≥ v} ≥ k (the k-th largest p, duplicates counted): p is a
//          non-decreasing function of the logit, so it is the p of the k-th largest logit, found by
//          counts over the logits' order keys,
//   top-p  the largest v with Σ_{p ≥ v} p ≥ topP · Σ p (over the top-k survivors), which is the
//          value the reference's descending scan stops at, found over the bit patterns of p
//          (non-negative floats order as their patterns),
// each by a 4-pass MSB-first radix select with 256-bucket histograms, a warp adding once per
// distinct bucket. Masses are summed as 64-bit fixed point (p · 2^60, exact and independent of the
// order of the atomics), so every pass of the select sees the same sums; the inverse CDF uses the
// same fixed-point prefix sums in index order. Against the reference's f64 sums this moves a
// cut-off or a sampled token only when a draw or a target lands within ~1e-16 of a boundary.
//
// std_logprobs: one CTA per row. The top n by the same radix select over the logits' order keys
// (counts), then the keys above the cut and the lowest indices at it, in index order; ranks, pairs
// and logits are exact, the f64 log-normalizer differs from the reference's in its last bits (its
// sum's order).
#include "std-common.cuh"

using namespace stdk;

namespace {

typedef unsigned long long u64;

#ifdef METRALE_CUDA_EMU
// The emulator's atomics are 32-bit; one thread runs at a time there.
__device__ __forceinline__ u64 atomicAdd(u64* p, u64 v) {
  const u64 old = *p;
  *p = old + v;
  return old;
}
#endif

constexpr double kFix = 1152921504606846976.0;  // 2^60: Σp ≤ 8 fits in 63 bits

__device__ __forceinline__ u64 fixed(float p) { return (u64)((double)p * kFix); }

/** p_i of one row, rounded as sample.cpu.ts's filteredProbs rounds it. */
struct Probs {
  const float* __restrict__ l;
  float mx;
  double temperature;
  double sum;
  /** p of a logit x. */
  __device__ __forceinline__ float of(float x) const {
    const float e = (float)exp(((double)x - (double)mx) / temperature);
    return (float)((double)e / sum);
  }
  __device__ __forceinline__ float operator()(int i) const { return of(__ldg(l + i)); }
  /**
   * A logit below which p < v for v > 0 (−∞ for v ≤ 0), so a pass skips such logits without
   * computing their p: p = f32(f32(e^a) / Σ) with a = (x − max) / T, each rounding within 2^-24,
   * and x below max + T·(ln(v·Σ) − 2^-18) gives e^a < v·Σ·e^(−2^-18), so p < v·(1 − 2^-18)·(1 + 2^-23) < v.
   */
  __device__ __forceinline__ double below(float v) const {
    return v > 0.f ? (double)mx + temperature * (log((double)v * sum) - 3.814697265625e-06) : -INFINITY;
  }
};

/** A logit's place in the order of values as an unsigned key (a larger logit, a larger key; −0 as +0; NaN below −∞). */
__device__ __forceinline__ unsigned order_key(float x) {
  if (x != x) return 0u;
  const unsigned b = x == 0.f ? 0u : __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/** The logit of an order key (a NaN for key 0). */
__device__ __forceinline__ float from_order_key(unsigned k) { return __uint_as_float((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k); }

struct Select {
  u64 hist[256];
  u64 above;
  unsigned prefix;
  int found;
};

/**
 * Adds each taking lane's weight to `hist[bin]`, one shared-memory atomic per distinct bin of the
 * warp (the warp's lanes summed first): most of a row's values fall in a few bins, where one
 * atomic a lane would serialise. Every lane of the warp calls it.
 */
template <bool kCounts>
__device__ __forceinline__ void hist_add(u64* hist, bool on, unsigned bin, u64 w) {
  unsigned todo = __ballot_sync(kFull, on);
  while (todo) {
    const int src = __ffs(todo) - 1;
    const unsigned b = __shfl_sync(kFull, bin, src);
    const bool mine = on && bin == b;
    const unsigned group = __ballot_sync(kFull, mine);
    u64 sum;
    if (kCounts) {
      sum = __popc(group);
    } else {
      sum = mine ? w : 0;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
    }
    if (lane_id() == src) atomicAdd(hist + b, sum);
    todo &= ~group;
  }
}

/**
 * The largest 32-bit key v such that Σ weight over the items of [0, V) with key ≥ v reaches
 * `target` (0 when even all of them do not). `item(i, key, weight)` says whether item i takes part
 * and sets its key and weight: 1 (counts, `kCounts`) or fixed(p) (masses).
 */
template <bool kCounts, typename Item>
__device__ unsigned select_cut(int V, Item item, double target, Select& s) {
  const int tid = threadIdx.x, B = blockDim.x;
  unsigned prefix = 0;
  u64 above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += B) s.hist[b] = 0;
    __syncthreads();
    const unsigned hiMask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
    // Every lane runs every round (B is a whole number of warps) for the warp-wide adds.
    for (int base = 0; base < V; base += B) {
      const int i = base + tid;
      unsigned bits = 0;
      u64 w = 0;
      const bool on = i < V && item(i, bits, w) && (bits & hiMask) == prefix && w != 0;
      hist_add<kCounts>(s.hist, on, (bits >> shift) & 255u, w);
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

/** Index of no logit: the pair of a slice or row without a value above −∞. */
constexpr int kNoIndex = 0x7fffffff;

/** A best (value, index) pair: the largest value, the lowest index among equal ones. */
struct Best {
  float v;
  int i;
  /** Takes the logit at index j, above every index taken so far: strict, so a tie keeps the earlier index and NaN never wins. */
  __device__ __forceinline__ void next(float x, int j) {
    if (x > v) v = x, i = j;
  }
  /** Takes another pair, in any order. */
  __device__ __forceinline__ void merge(float ov, int oi) {
    if (ov > v || (ov == v && oi < i)) v = ov, i = oi;
  }
};

/** The CTA's best pair in thread 0 (warp shuffles, then the warps); `redV`, `redI` hold 32 words. */
__device__ __forceinline__ Best block_best(Best b, float* redV, int* redI) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) b.merge(__shfl_xor_sync(kFull, b.v, o), __shfl_xor_sync(kFull, b.i, o));
  __syncthreads();
  if (lane_id() == 0) redV[warp_id()] = b.v, redI[warp_id()] = b.i;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < num_warps(); w++) b.merge(redV[w], redI[w]);
  return b;
}

__device__ __forceinline__ void next4(Best& b, float4 q, int j) {
  b.next(q.x, j);
  b.next(q.y, j + 1);
  b.next(q.z, j + 2);
  b.next(q.w, j + 3);
}

/**
 * The best pair of each thread's logits of l[lo, hi), taken in ascending index order: 16-byte
 * loads where l + lo is aligned (lo is a multiple of 4), four issued at a time per thread (a small
 * slice is one round trip), then the slice's tail (or the whole slice where unaligned) one logit at
 * a time.
 */
__device__ __forceinline__ Best slice_best(const float* __restrict__ l, int lo, int hi) {
  Best b{-INFINITY, kNoIndex};
  const int tid = threadIdx.x, B = blockDim.x;
  int tail = lo;
  if (aligned16(l + lo)) {
    const float4* __restrict__ p = reinterpret_cast<const float4*>(l + lo);
    const int n4 = (hi - lo) >> 2;
    for (int j = tid; j < n4; j += 4 * B) {
      float4 q[4];
#pragma unroll
      for (int u = 0; u < 4; u++) q[u] = j + u * B < n4 ? __ldg(p + j + u * B) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
#pragma unroll
      for (int u = 0; u < 4; u++) next4(b, q[u], lo + 4 * (j + u * B));  // −∞ past the end takes nothing
    }
    tail = lo + 4 * n4;
  }
  for (int i = tail + tid; i < hi; i += B) b.next(__ldg(l + i), i);
  return b;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024) std_argmax(const float* __restrict__ logits, int32_t* __restrict__ out, unsigned* __restrict__ counters,
                                                              uint2* __restrict__ partials, int rows, int vocab) {
  STD_SHARED(float, redV, 32);
  STD_SHARED(int, redI, 32);
  STD_SHARED(int, last, 1);
  const int S = gridDim.x, s = blockIdx.x;
  if (S > 1 && (!counters || !partials)) __trap();
  // Slices of a multiple of 4 logits, so each slice of a 16-byte aligned row starts aligned.
  const int chunk = ((vocab + S - 1) / S + 3) & ~3;
  const int lo = min(vocab, s * chunk), hi = min(vocab, lo + chunk);
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* l = logits + (size_t)r * vocab;
    const Best b = block_best(slice_best(l, lo, hi), redV, redI);
    if (S == 1) {
      if (threadIdx.x == 0) out[r] = b.i == kNoIndex ? 0 : b.i;
      continue;
    }
    // Each CTA's pair reaches L2 before the CTA counts itself done; the last resets the row's
    // counter, so the next launch (or a graph replay) starts from zero.
    if (threadIdx.x == 0) {
      partials[(size_t)r * S + s] = make_uint2(__float_as_uint(b.v), (unsigned)b.i);
      __threadfence();
      const unsigned done = atomicAdd(counters + r, 1u);
      last[0] = done == (unsigned)S - 1;
      if (last[0]) counters[r] = 0;
    }
    __syncthreads();
    if (!last[0]) continue;
    __threadfence();
    Best m{-INFINITY, kNoIndex};
    for (int k = threadIdx.x; k < S; k += blockDim.x) {
      const uint2 q = __ldcg(partials + (size_t)r * S + k);  // written by other CTAs: through L2
      m.merge(__uint_as_float(q.x), (int)q.y);
    }
    m = block_best(m, redV, redI);
    if (threadIdx.x == 0) out[r] = m.i == kNoIndex ? 0 : m.i;
  }
}

/** A row's parameters in std_sample's `params` (f64 [rows][kSampleParams], the host's values unrounded; src/sample-kernels.ts). */
constexpr int kSampleParams = 5;

extern "C" __global__ void __launch_bounds__(1024) std_sample(const float* __restrict__ logits, const double* __restrict__ params, const double* __restrict__ uniforms,
                                                              int32_t* __restrict__ out, double* __restrict__ draftProbs, int rows, int vocab) {
  STD_SHARED(float, redF, 32);
  STD_SHARED(int, redI, 32);
  STD_SHARED(double, redD, 32);
  STD_SHARED(u64, redU, 32);
  __shared__ Select sel;
  __shared__ int picked;
  const int V = vocab, tid = threadIdx.x, B = blockDim.x;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const double* pr = params + (size_t)r * kSampleParams;
    const double temperature = __ldg(pr), topP = __ldg(pr + 2), minP = __ldg(pr + 3);
    const int topK = (int)__ldg(pr + 1), draft = (int)__ldg(pr + 4);
    if (!(temperature > 0.0)) {
      // Greedy: the row's argmax as one CTA of std_argmax takes it (the same pairs, the same order).
      const Best b = block_best(slice_best(logits + (size_t)r * V, 0, V), redF, redI);
      if (tid == 0) out[r] = b.i == kNoIndex ? 0 : b.i;
      __syncthreads();
      continue;
    }
    Probs P{logits + (size_t)r * V, -INFINITY, temperature, 0.0};
    float mx = -INFINITY;
    for (int i = tid; i < V; i += B) mx = fmaxf(mx, __ldg(P.l + i));
    P.mx = block_max(mx, redF);
    double s = 0.0;
    for (int i = tid; i < V; i += B) s += exp(((double)__ldg(P.l + i) - (double)P.mx) / P.temperature);
    P.sum = block_sum(s, redD);

    // top-k: p is a non-decreasing function of the logit, so the k-th largest p is the p of the
    // k-th largest logit, found by counts over the logits' order keys (no p computed).
    float cutK = 0.f;
    if (topK > 0 && topK < V) {
      const auto count = [&](int i, unsigned& key, u64& w) {
        key = order_key(__ldg(P.l + i));
        w = 1;
        return true;
      };
      const unsigned K = select_cut<true>(V, count, (double)topK, sel);
      cutK = K ? P.of(from_order_key(K)) : 0.f;
    }
    // Logits below `lo` cannot be kept: no pass computes their p.
    double lo = P.below(cutK);
    float cutP = 0.f;
    if (topP < 1.0) {
      u64 t = 0;
      for (int i = tid; i < V; i += B) {
        const float x = __ldg(P.l + i);
        if ((double)x < lo) continue;
        const float p = P.of(x);
        if (p >= cutK) t += fixed(p);
      }
      const double total = (double)block_sum(t, redU);
      // The reference's scan stops at its first (largest) value even for a target of 0.
      const double target = fmax(topP * total, 1e-300);
      // Non-negative floats order as their bit patterns: a p's pattern is its key.
      const auto mass = [&](int i, unsigned& key, u64& w) {
        const float x = __ldg(P.l + i);
        if ((double)x < lo) return false;
        const float p = P.of(x);
        if (!(p >= cutK)) return false;
        key = __float_as_uint(p);
        w = fixed(p);
        return true;
      };
      cutP = __uint_as_float(select_cut<false>(V, mass, target, sel));
      lo = fmax(lo, P.below(cutP));
    }
    // min-p against the largest p: that of the maximum logit, exp(0) = 1 over the sum.
    const double minAbs = minP * (double)(float)(1.0 / P.sum);
    lo = fmax(lo, P.below((float)minAbs * (1.f - 1e-6f)));
    const auto keep = [=](float p) { return p >= cutK && p >= cutP && !((double)p < minAbs); };

    // Inverse CDF in index order over the kept p but the draft's (a draft under verification: the
    // residual): each thread a contiguous chunk, fixed-point prefix sums.
    const int C = (V + B - 1) / B;
    const int first = min(V, tid * C), last = min(V, first + C);
    u64 mine = 0;
    for (int i = first; i < last; i++) {
      const float x = __ldg(P.l + i);
      if (i == draft || (double)x < lo) continue;
      const float p = P.of(x);
      if (keep(p)) mine += fixed(p);
    }
    u64 total = 0;
    const u64 before = block_exclusive_scan(mine, redU, total);
    if (tid == 0) {
      picked = -1;
      if (draft >= 0) {
        // The draft's share of the kept mass: its probability in the target renormalised.
        const float px = P(draft);
        const double fx = keep(px) ? (double)fixed(px) : 0.0;
        draftProbs[r] = fx > 0.0 ? fx / ((double)total + fx) : 0.0;
      }
    }
    __syncthreads();
    if (total > 0) {
      u64 u = (u64)(__ldg(uniforms + r) * (double)total);
      if (u >= total) u = total - 1;
      if (u >= before && u < before + mine) {
        u64 c = before;
        for (int i = first; i < last; i++) {
          const float x = __ldg(P.l + i);
          if (i == draft || (double)x < lo) continue;
          const float p = P.of(x);
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


/** Top logprobs a row of std_logprobs reports at most (core's MAX_LOGPROBS). */
constexpr int kLogprobsTop = 20;
/** Words before a row's pairs in std_logprobs' `out`: lse (f64, two words), the token's logit, its rank, the pairs' count, one unused. */
constexpr int kLogprobsHead = 6;
/** u32 words of a row of std_logprobs' `out` (src/sample-kernels.ts LOGPROBS_ROW_WORDS): 8-byte aligned rows. */
constexpr int kLogprobsRowWords = kLogprobsHead + 2 * kLogprobsTop;


extern "C" __global__ void __launch_bounds__(1024) std_logprobs(const float* __restrict__ logits, const int32_t* __restrict__ tokens, const int32_t* __restrict__ counts,
                                                                unsigned* __restrict__ out, int rows, int vocab) {
  STD_SHARED(float, redF, 32);
  STD_SHARED(double, redD, 32);
  STD_SHARED(u64, redU, 32);
  __shared__ Select sel;
  __shared__ unsigned pairs[2 * kLogprobsTop];
  const int V = vocab, tid = threadIdx.x, B = blockDim.x;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int n = __ldg(counts + r);
    if (n < 0) continue;  // a row that asked for none: the same for every thread of the CTA
    const float* __restrict__ l = logits + (size_t)r * V;
    unsigned* __restrict__ o = out + (size_t)r * kLogprobsRowWords;
    const int token = __ldg(tokens + r);
    const float v = __ldg(l + token);
    // The token's rank (#{x ≥ v}, as core's positionLogprobs counts) and the row's max, then
    // lse = max + log Σ exp(x − max) in f64 (core's logSumExp; the sum's order differs).
    float mx = -INFINITY;
    u64 rank = 0;
    for (int i = tid; i < V; i += B) {
      const float x = __ldg(l + i);
      mx = fmaxf(mx, x);
      rank += x >= v;
    }
    mx = block_max(mx, redF);
    rank = block_sum(rank, redU);
    double s = 0.0;
    for (int i = tid; i < V; i += B) s += exp((double)__ldg(l + i) - (double)mx);
    s = block_sum(s, redD);
    const int m = min(min(n, kLogprobsTop), V);
    if (m > 0) {
      // The m-th largest key K; the keys above it (fewer than m) and the lowest indices of those
      // equal to it fill the m pairs, each group in index order: thread-contiguous chunks, their
      // counts packed (above << 32 | equal) and scanned.
      const auto count = [&](int i, unsigned& key, u64& w) {
        key = order_key(__ldg(l + i));
        w = 1;
        return true;
      };
      const unsigned K = select_cut<true>(V, count, (double)m, sel);
      const int C = (V + B - 1) / B;
      const int lo = min(V, tid * C), hi = min(V, lo + C);
      u64 mine = 0;
      for (int i = lo; i < hi; i++) {
        const unsigned k = order_key(__ldg(l + i));
        mine += k > K ? (1ull << 32) : k == K ? 1ull : 0ull;
      }
      u64 total = 0;
      const u64 before = block_exclusive_scan(mine, redU, total);
      const int above = (int)(total >> 32), need = m - above;
      int a = (int)(before >> 32), e = (int)(before & 0xffffffffu);
      if (mine != 0 && (a < above || e < need)) {
        for (int i = lo; i < hi; i++) {
          const float x = __ldg(l + i);
          const unsigned k = order_key(x);
          if (k > K) {
            pairs[2 * a] = (unsigned)i, pairs[2 * a + 1] = __float_as_uint(x);
            a++;
          } else if (k == K && e < need) {
            pairs[2 * (above + e)] = (unsigned)i, pairs[2 * (above + e) + 1] = __float_as_uint(x);
            e++;
          }
        }
      }
      __syncthreads();
      if (tid == 0) {
        // The pairs above K by value, descending, a stable insertion sort (index order on ties).
        for (int j = 1; j < above; j++) {
          const unsigned pi = pairs[2 * j], pv = pairs[2 * j + 1];
          int at = j;
          while (at > 0 && order_key(__uint_as_float(pairs[2 * (at - 1) + 1])) < order_key(__uint_as_float(pv))) {
            pairs[2 * at] = pairs[2 * (at - 1)], pairs[2 * at + 1] = pairs[2 * (at - 1) + 1];
            at--;
          }
          pairs[2 * at] = pi, pairs[2 * at + 1] = pv;
        }
      }
      __syncthreads();
      for (int j = tid; j < 2 * m; j += B) o[kLogprobsHead + j] = pairs[j];
    }
    if (tid == 0) {
      *reinterpret_cast<double*>(o) = (double)mx + log(s);
      o[2] = __float_as_uint(v);
      o[3] = (unsigned)rank;
      o[4] = (unsigned)m;
      o[5] = 0u;
    }
    __syncthreads();  // the pairs and the reductions' words are rewritten by the next row
  }
}
