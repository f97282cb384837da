// Token selection of layer-std (src/sample-kernels.ts; reference src/sample.cpu.ts; KERNELS.md):
//   std_argmax  out[r] = the lowest index of row r's maximum (NaN never wins; an all −∞ row gives 0)
//   std_sample  each row by its own parameters (params[r], f64: temperature, top-k, top-p, min-p,
//               uniform): softmax at the temperature, then top-k, top-p, min-p (HF order; ties at a
//               cut-off kept), then the inverse CDF at uniform · Σp (the host's f64 draw, as core's
//               sampler takes it); a row of temperature ≤ 0 takes its argmax as std_argmax does
//               (so greedy and sampled requests share a call)
//   std_logprobs each asking row's log-normalizer, its picked token's logit and rank and its n most
//               likely tokens (core's positionLogprobs; the host makes logit − lse of them)
//
// std_argmax: CTAs [slices, rows] (argmaxLaunch), each the best (value, index) pair of one slice of
// its row, the last of the row's CTAs to finish merging the slices' pairs. The best pair is the
// largest value and, among equal values, the lowest index: a total order on the pairs, so the token
// does not depend on the slicing or on the order the CTAs finish.
//
// std_sample: CTAs [slices, rows] (sampleLaunch, 256 threads), a row cut into slices of 4 096
// logits whatever the batch, so its sums and its token do not depend on the rows beside it. Launched
// once per phase (samplePhases); the last CTA of a row to finish a phase (a ticket counter) does the
// row's serial part, and what the next phases need goes through the row's record:
//   0 (slices)  each slice's max and f64 Σ exp((x − max_s) / T), and for a top-k row its
//               min(k + 16, 512) largest logits (its pool); the last CTA makes the row's max and sum
//               (the slices' in slice order), its top-k cut-off from the pools (each slice gave at
//               least the k largest of its own, so the row's k-th largest is among them) and, when
//               the pools hold every logit the cut keeps, top-p over those; a greedy row's argmax by
//               std_argmax's pairs instead,
//   1–3 (top-k digits) a row whose top-k is past the pools' reach (k > 496): each slice's counts
//               of its logits by an 11-, 11- and 10-bit digit of the order keys under the digits
//               chosen so far, added to the row's histogram; the last CTA takes the largest digit
//               whose count with the ones above reaches k, and after the third writes cutK,
//   4–6 (top-p digits) a top-p row without top-k, or whose pools may miss a logit top-k keeps (ties
//               at the cut, or top-k past them): the same passes over the masses of the logits top-k
//               keeps, to the target mass,
//   7 (draw)    each slice's kept mass; the last CTA finds the slice that holds
//               the draw and walks it in index order (thread-contiguous shares).
// The probabilities are never stored: a pass recomputes p_i exactly as the reference rounds it,
// p_i = f32(f32(exp((l_i − max) / T)) / Σ e), with Σ e the f64 sum of the unrounded exponentials,
// for the logits that can still be kept (once a cut-off is known, a logit whose p is provably below
// it is skipped: Probs::below). So a cut-off is a value of p and the filters compare f32 with f32 as
// the reference does:
//   top-k  the largest v with #{p ≥ v} ≥ k (the k-th largest p, duplicates counted): p is a
//          non-decreasing function of the logit, so it is the p of the k-th largest logit,
//   top-p  the largest v with Σ_{p ≥ v} p ≥ topP · Σ p (over the top-k survivors), the value the
//          reference's descending scan stops at: the p of the largest logit whose mass at and above
//          reaches the target (p non-decreasing again),
// each by an MSB-first radix select over the logits' order keys, a warp adding once per distinct
// bin. Masses are summed as 64-bit fixed point (p · 2^60, exact and independent of the order of
// the atomics), so every pass and CTA sees the same sums; the draw uses the same fixed-point
// prefix sums in index order. Against the reference's f64 sums this moves a cut-off or a sampled
// token only when a draw or a target lands within ~1e-16 of a boundary.
//
// std_logprobs: the same CTAs, one launch. Each slice's max, Σ exp(x − max_s), count of logits at or
// above the token's, and n largest (the lowest indices on ties); the last CTA of the row makes the
// lse and the rank and takes the n largest of the slices' (a total order on (key, index), so the
// row's n largest are among them). Ranks, pairs and logits are exact; the f64 log-normalizer
// differs from the reference's in its last bits (its sum's order).
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

struct Select {
  u64 hist[256];
  u64 red[32];
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
    // The largest bin whose count with the bins above reaches the target: thread t holds bin 255 − t,
    // so a scan in thread order gives each the mass of the bins above its own (one thread crosses).
    if (tid == 0) s.found = 0;
    const u64 v = tid < 256 ? s.hist[255 - tid] : 0;
    u64 all;
    const u64 from = above + block_exclusive_scan(v, s.red, all);
    if (tid < 256 && (double)from < target && (double)(from + v) >= target) {
      s.found = 1;
      s.prefix = prefix | ((unsigned)(255 - tid) << shift), s.above = from;
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


/** A row's parameters and draw in std_sample's `params` (f64 [rows][kSampleParams], the host's values unrounded; src/sample-layout.ts). */
constexpr int kSampleParams = 5;
/** Logits of a slice (src/sample-kernels.ts SAMPLE_SLICE): fixed, so a row's sums and token do not depend on the batch. */
constexpr int kSampleSlice = 4096;
/** Threads of a std_sample / std_logprobs CTA (SAMPLE_THREADS). */
constexpr int kSampleThreads = 256;
/** Entries a slice keeps at most in a row's pool (SAMPLE_POOL), and the pool's margin over top-k (ties at the cut). */
constexpr int kPoolMax = 512;
constexpr int kPoolMargin = 16;
/** Bins of a digit pass: digits of 11, 11 and 10 bits of the order keys (SAMPLE_DIGIT_BINS). */
constexpr int kDigitBins = 2048;
/** std_sample's phases (samplePhases): the slices; from kPhaseTopP the top-p digit passes (1 to 3 those of top-k); the draw. */
constexpr int kPhaseSlices = 0, kPhaseTopP = 4, kPhaseDraw = 7;

/** What a row's phases pass on (written by the last CTA of a phase, read by the next launches). */
struct SampleRow {
  double sum;       // Σ exp((x − max) / T) over the row (the slices' sums, in slice order)
  double target;    // the digit passes' target (top-k's count, top-p's mass in fixed point), set by their first pass
  u64 above;        // count or mass of the keys above the digits chosen so far
  float mx;         // the row's max
  float cutK, cutP; // the cut-offs (values of p; 0: none)
  unsigned prefix;  // the cut's key's digits chosen so far
  int digits;       // 1 while the top-p digit passes are to find cutP
  int kdigits;      // 1 while the top-k digit passes are to find cutK
};

/** What a CTA writes of its slice of a row. */
struct SampleSlice {
  double sum;        // Σ exp((x − max_s) / T) (std_logprobs: T = 1)
  u64 mass;          // the draw: the slice's kept mass; std_logprobs: #{x ≥ the token's logit}
  float mx;          // the slice's max
  float bestV;       // a greedy row: the slice's best pair
  int bestI;
  unsigned outside;  // a pool: each logit of the slice left out has a key ≤ this (0: none left out)
  int count;         // a pool: its entries
  int unused;
};

/**
 * std_sample's and std_logprobs' scratch (src/sample-kernels.ts sampleScratchBytes): per row of
 * `capacity`, the digit histogram (zero between launches) and the ticket counter (zero between
 * launches), then the rows, the slices and the pools (entries (index, order key)).
 */
struct SampleScratch {
  u64* hist;
  unsigned* counters;
  SampleRow* rows;
  SampleSlice* slices;
  uint2* pool;
  __device__ SampleScratch(unsigned char* p, int capacity, int S) {
    hist = reinterpret_cast<u64*>(p);
    p += (size_t)capacity * kDigitBins * sizeof(u64);
    counters = reinterpret_cast<unsigned*>(p);
    p += ((size_t)capacity * sizeof(unsigned) + 7) & ~(size_t)7;
    rows = reinterpret_cast<SampleRow*>(p);
    p += (size_t)capacity * sizeof(SampleRow);
    slices = reinterpret_cast<SampleSlice*>(p);
    p += (size_t)capacity * S * sizeof(SampleSlice);
    pool = reinterpret_cast<uint2*>(p);
  }
};

/** A CTA's shared words: reductions, a radix select's, a digit pass's histogram, what the last CTA of a row passes its threads. */
struct SampleShared {
  float redF[32];
  int redI[32];
  double redD[32];
  u64 redU[32];
  Select sel;
  u64 hist[kDigitBins];
  double sum;
  u64 before, u, above;
  float mx;
  unsigned key;
  int last, at, found, picked;
};

/** Whether a row's top-k is on. */
__device__ __forceinline__ bool has_top_k(int topK, int V) { return topK > 0 && topK < V; }
/** Whether a row's top-k cut comes from its pool (else from the top-k digit passes, phases 1–3). */
__device__ __forceinline__ bool pooled_top_k(int topK, int V) { return has_top_k(topK, V) && topK <= kPoolMax - kPoolMargin; }

/**
 * The m items of [0, n) with the largest keys, K being the m-th largest (select_cut's): those above
 * K, then the first of those equal to it, as (index, key) pairs in `out`, each group in item order
 * (thread-contiguous shares, their counts packed above << 32 | equal and scanned). `item(i, index,
 * key)` says whether item i takes part and gives its index and key. Returns the count above K.
 */
template <typename Item>
__device__ int gather_top(int n, Item item, unsigned K, int m, uint2* out, u64* red) {
  const int tid = threadIdx.x, B = blockDim.x;
  const int C = (n + B - 1) / B;
  const int lo = min(n, tid * C), hi = min(n, lo + C);
  u64 mine = 0;
  for (int i = lo; i < hi; i++) {
    unsigned idx, k;
    if (item(i, idx, k)) mine += k > K ? (1ull << 32) : k == K ? 1ull : 0ull;
  }
  u64 total = 0;
  const u64 before = block_exclusive_scan(mine, red, total);
  const int above = (int)(total >> 32), need = m - above;
  int a = (int)(before >> 32), e = (int)(before & 0xffffffffu);
  if (mine != 0 && (a < above || e < need)) {
    for (int i = lo; i < hi; i++) {
      unsigned idx, k;
      if (!item(i, idx, k)) continue;
      if (k > K) {
        out[a++] = make_uint2(idx, k);
      } else if (k == K && e < need) {
        out[above + e] = make_uint2(idx, k);
        e++;
      }
    }
  }
  __syncthreads();
  return above;
}

/**
 * A slice's m largest logits (by order key, the lowest indices on ties) into `out` as (index, key)
 * pairs; returns their count and sets `outside` to a key no logit left out exceeds (0: none).
 */
__device__ int slice_top(const float* __restrict__ l, int lo, int hi, int m, uint2* out, unsigned& outside, SampleShared& sh) {
  const int n = hi - lo;
  outside = 0u;
  if (n <= m) {
    for (int j = threadIdx.x; j < n; j += blockDim.x) out[j] = make_uint2((unsigned)(lo + j), order_key(__ldg(l + lo + j)));
    return n;
  }
  const auto count = [&](int j, unsigned& key, u64& w) {
    key = order_key(__ldg(l + lo + j));
    w = 1;
    return true;
  };
  const unsigned K = select_cut<true>(n, count, (double)m, sh.sel);
  const auto item = [&](int j, unsigned& idx, unsigned& key) {
    idx = (unsigned)(lo + j);
    key = order_key(__ldg(l + lo + j));
    return true;
  };
  gather_top(n, item, K, m, out, sh.redU);
  outside = K;
  return m;
}

/**
 * The top-k cut-off of a row over n items, each the order key of a logit (`key(i, k)`: whether item
 * i takes part, and its key): the p of the topK-th largest key (the largest v with #{p ≥ v} ≥ topK;
 * p is non-decreasing in the logit), or 0 where fewer take part.
 */
template <typename Key>
__device__ float top_k_cut(const Probs& P, int n, Key key, int topK, SampleShared& sh) {
  const auto counted = [&](int i, unsigned& k, u64& w) {
    w = 1;
    return key(i, k);
  };
  const unsigned K = select_cut<true>(n, counted, (double)topK, sh.sel);
  return K ? P.of(from_order_key(K)) : 0.f;
}

/**
 * The top-p cut-off of a row over the same items, among those top-k keeps (p ≥ cutK): the p of the
 * largest key whose mass at and above reaches topP · Σ p (p is non-decreasing in the logit, so
 * it is the reference's cut-off), or 0 for a row of no mass.
 */
template <typename Key>
__device__ float top_p_cut(const Probs& P, int n, Key key, float cutK, double topP, SampleShared& sh) {
  const int tid = threadIdx.x, B = blockDim.x;
  const double lo = P.below(cutK);
  const auto mass = [&](int i, unsigned& k, u64& w) {
    if (!key(i, k)) return false;
    const float x = from_order_key(k);
    if ((double)x < lo) return false;
    const float p = P.of(x);
    if (!(p >= cutK)) return false;
    w = fixed(p);
    return true;
  };
  u64 t = 0;
  for (int i = tid; i < n; i += B) {
    unsigned k;
    u64 w;
    if (mass(i, k, w)) t += w;
  }
  const double total = (double)block_sum(t, sh.redU);
  // The reference's scan stops at its first value even for a target of 0.
  const unsigned Kp = select_cut<false>(n, mass, fmax(topP * total, 1e-300), sh.sel);
  return Kp ? P.of(from_order_key(Kp)) : 0.f;
}

/** Phase 0 of a row: each slice's max and sum (a top-k row's pool too, a greedy row's best pair), the last CTA its cut-offs. */
__device__ void sample_slices(const float* __restrict__ l, int V, int r, int s, int S, double T, int topK, double topP, int32_t* __restrict__ out, SampleScratch& sc,
                              SampleShared& sh) {
  const int tid = threadIdx.x, B = blockDim.x;
  const int lo = s * kSampleSlice, hi = min(V, lo + kSampleSlice);
  SampleSlice* parts = sc.slices + (size_t)r * S;
  if (!(T > 0.0)) {
    // Greedy: the row's argmax by std_argmax's pairs.
    const Best b = block_best(slice_best(l, lo, hi), sh.redF, sh.redI);
    if (tid == 0) parts[s].bestV = b.v, parts[s].bestI = b.i;
    if (!last_to_arrive(sc.counters + r, S, sh.last)) return;
    if (tid == 0) {
      Best m{-INFINITY, kNoIndex};
      for (int k = 0; k < S; k++) m.merge(__ldcg(&parts[k].bestV), __ldcg(&parts[k].bestI));
      out[r] = m.i == kNoIndex ? 0 : m.i;
    }
    return;
  }
  float m = -INFINITY;
  for (int i = lo + tid; i < hi; i += B) m = fmaxf(m, __ldg(l + i));
  m = block_max(m, sh.redF);
  double sum = 0.0;
  if (m > -INFINITY)
    for (int i = lo + tid; i < hi; i += B) sum += exp(((double)__ldg(l + i) - (double)m) / T);
  sum = block_sum(sum, sh.redD);
  const bool pooled = pooled_top_k(topK, V);
  const int C = min(topK + kPoolMargin, kPoolMax);
  uint2* pool = sc.pool + (size_t)r * S * kPoolMax;
  unsigned outside = 0u;
  const int count = pooled ? slice_top(l, lo, hi, C, pool + (size_t)s * kPoolMax, outside, sh) : 0;
  if (tid == 0) parts[s].mx = m, parts[s].sum = sum, parts[s].count = count, parts[s].outside = outside;
  if (!last_to_arrive(sc.counters + r, S, sh.last)) return;

  // The last CTA: the row's max and sum from the slices' (in slice order), then its cut-offs.
  if (tid == 0) {
    float M = -INFINITY;
    unsigned left = 0u;
    for (int k = 0; k < S; k++) M = fmaxf(M, __ldcg(&parts[k].mx)), left = max(left, __ldcg(&parts[k].outside));
    double total = 0.0;
    for (int k = 0; k < S; k++) {
      const float mk = __ldcg(&parts[k].mx);
      if (mk > -INFINITY) total += __ldcg(&parts[k].sum) * exp(((double)mk - (double)M) / T);
    }
    sh.mx = M, sh.sum = total, sh.key = left;
  }
  __syncthreads();
  const Probs P{l, sh.mx, T, sh.sum};
  float cutK = 0.f, cutP = 0.f;
  // Top-p by the digit passes: without top-k, or where the pools may miss a logit top-k keeps;
  // top-k past the pools' reach by its own digit passes first.
  bool digits = topP < 1.0 && (!has_top_k(topK, V) || !pooled);
  const bool kdigits = has_top_k(topK, V) && !pooled;
  if (pooled) {
    // The k-th largest key of the pool is the row's: each slice gave its C ≥ k largest.
    const auto entry = [&](int i, unsigned& key) {
      const int k = i / C, j = i - k * C;
      if (j >= __ldcg(&parts[k].count)) return false;
      key = __ldcg(pool + (size_t)k * kPoolMax + j).y;
      return true;
    };
    cutK = top_k_cut(P, S * C, entry, topK, sh);
    // Every logit top-k keeps with any mass is in the pools when the largest left out has a smaller
    // p, or none (p 0: the k-th largest too far below the max); else (ties at the cut) the digit
    // passes find top-p over the whole row.
    const unsigned left = sh.key;
    const float pLeft = left == 0u ? 0.f : P.of(from_order_key(left));
    const bool complete = pLeft < cutK || pLeft == 0.f;
    digits = topP < 1.0 && !complete;
    if (complete && topP < 1.0) cutP = top_p_cut(P, S * C, entry, cutK, topP, sh);
  }
  if (tid == 0) {
    SampleRow* w = sc.rows + r;
    w->sum = P.sum, w->mx = P.mx, w->cutK = cutK, w->cutP = cutP;
    w->digits = digits, w->kdigits = kdigits;
    w->prefix = 0u, w->above = 0, w->target = 0.0;
  }
}

/**
 * Digit pass d (1 to 3) of a row. Top-p (`counts` false): each slice's masses of the logits top-k
 * keeps (all without top-k) by the d-th digit of the keys under the digits chosen so far, added to
 * the row's histogram; the last CTA chooses the digit (the largest bin whose mass with the bins
 * above reaches the target), and after the third writes cutP. Top-k (`counts`): the same over the
 * counts of all the row's logits, to topK, and after the third writes cutK and leaves the record
 * for the top-p passes.
 */
__device__ void sample_digit(const float* __restrict__ l, int V, int r, int s, int S, int d, bool counts, double T, double topP, int topK, SampleScratch& sc,
                             SampleShared& sh) {
  const int tid = threadIdx.x, B = blockDim.x;
  const SampleRow* st = sc.rows + r;
  if (counts ? !st->kdigits : !st->digits) return;
  const Probs P{l, st->mx, T, st->sum};
  const unsigned prefix = st->prefix;
  const float cutK = st->cutK;
  const double below = P.below(cutK);
  const int shift = d == 1 ? 21 : d == 2 ? 10 : 0;
  const unsigned digitMask = d == 3 ? 1023u : 2047u;
  const unsigned hiMask = d == 1 ? 0u : d == 2 ? 0xffe00000u : 0xfffffc00u;
  const int lo = s * kSampleSlice, hi = min(V, lo + kSampleSlice);
  for (int b = tid; b < kDigitBins; b += B) sh.hist[b] = 0;
  __syncthreads();
  for (int base = lo; base < hi; base += B) {
    const int i = base + tid;
    unsigned key = 0u;
    u64 w = 0;
    if (i < hi) {
      const float x = __ldg(l + i);
      key = order_key(x);
      if ((key & hiMask) == prefix) {
        if (counts) {
          w = 1;
        } else if ((double)x >= below) {
          const float p = P.of(x);
          if (p >= cutK) w = fixed(p);
        }
      }
    }
    if (counts) hist_add<true>(sh.hist, w != 0, (key >> shift) & digitMask, w);
    else hist_add<false>(sh.hist, w != 0, (key >> shift) & digitMask, w);
  }
  __syncthreads();
  u64* gh = sc.hist + (size_t)r * kDigitBins;
  for (int b = tid; b < kDigitBins; b += B)
    if (sh.hist[b]) atomicAdd(gh + b, sh.hist[b]);
  if (!last_to_arrive(sc.counters + r, S, sh.last)) return;

  for (int b = tid; b < kDigitBins; b += B) sh.hist[b] = __ldcg(gh + b), gh[b] = 0;
  __syncthreads();
  // Thread t holds the bins [2048 − 8(t + 1), 2048 − 8t): thread 0 the highest, so a scan in thread
  // order gives each thread the mass of the bins above its own.
  const int per = kDigitBins / kSampleThreads, top = kDigitBins - per * (tid + 1);
  u64 mine = 0;
  for (int j = 0; j < per; j++) mine += sh.hist[top + j];
  u64 total = 0;
  const u64 before = block_exclusive_scan(mine, sh.redU, total);
  const double target = d != 1 ? st->target : counts ? (double)topK : fmax(topP * (double)total, 1e-300);
  const u64 above = d == 1 ? 0 : st->above;
  if (tid == 0) sh.found = -1;
  __syncthreads();
  const u64 from = above + before;
  if ((double)from < target && (double)(from + mine) >= target) {
    u64 cum = from;
    for (int j = per - 1; j >= 0; j--) {
      const u64 next = cum + sh.hist[top + j];
      if ((double)next >= target) {
        sh.found = top + j, sh.above = cum;
        break;
      }
      cum = next;
    }
  }
  __syncthreads();
  if (tid == 0) {
    SampleRow* w = sc.rows + r;
    if (sh.found < 0) {
      // A row of no mass (top-p), or of fewer logits than top-k: no cut.
      if (counts) w->kdigits = 0, w->cutK = 0.f, w->prefix = 0u, w->above = 0;
      else w->digits = 0, w->cutP = 0.f;
    } else {
      const unsigned key = prefix | ((unsigned)sh.found << shift);
      if (d == 3 && counts) {
        w->cutK = P.of(from_order_key(key)), w->kdigits = 0, w->prefix = 0u, w->above = 0;
      } else if (d == 3) {
        w->cutP = P.of(from_order_key(key)), w->digits = 0;
      } else {
        w->prefix = key, w->above = sh.above;
        if (d == 1) w->target = target;
      }
    }
  }
}

/**
 * The draw of a sampled row: each slice's kept mass, then the last CTA finds the slice that holds
 * its uniform · Σ and walks it in index order.
 */
__device__ void sample_draw(const float* __restrict__ l, int V, int r, int s, int S, double T, double minP, double uniform, int32_t* __restrict__ out, SampleScratch& sc,
                            SampleShared& sh) {
  const int tid = threadIdx.x;
  const SampleRow* st = sc.rows + r;
  const Probs P{l, st->mx, T, st->sum};
  const float cutK = st->cutK, cutP = st->cutP;
  // min-p against the largest p: that of the maximum logit, exp(0) = 1 over the sum.
  const double minAbs = minP * (double)(float)(1.0 / P.sum);
  const double lo = fmax(fmax(P.below(cutK), P.below(cutP)), P.below((float)minAbs * (1.f - 1e-6f)));
  const auto kept = [&](int i) -> u64 {
    const float x = __ldg(l + i);
    if ((double)x < lo) return 0;
    const float p = P.of(x);
    return p >= cutK && p >= cutP && !((double)p < minAbs) ? fixed(p) : 0;
  };
  // Each thread a contiguous share of the slice, so a walk in thread order is one in index order.
  const int per = kSampleSlice / kSampleThreads;
  const auto share = [&](int slice, int& first, int& last) {
    const int end = min(V, (slice + 1) * kSampleSlice);
    first = min(end, slice * kSampleSlice + tid * per), last = min(end, first + per);
  };
  int first, last;
  share(s, first, last);
  u64 mine = 0;
  for (int i = first; i < last; i++) mine += kept(i);
  const u64 mass = block_sum(mine, sh.redU);
  SampleSlice* parts = sc.slices + (size_t)r * S;
  if (tid == 0) parts[s].mass = mass;
  if (!last_to_arrive(sc.counters + r, S, sh.last)) return;

  if (tid == 0) {
    u64 total = 0;
    for (int k = 0; k < S; k++) total += __ldcg(&parts[k].mass);
    sh.at = -1, sh.picked = -1;
    if (total > 0) {
      u64 u = (u64)(uniform * (double)total);
      if (u >= total) u = total - 1;
      u64 before = 0;
      for (int k = 0; k < S; k++) {
        const u64 m = __ldcg(&parts[k].mass);
        if (u < before + m) {
          sh.at = k;
          break;
        }
        before += m;
      }
      sh.u = u, sh.before = before;
    }
  }
  __syncthreads();
  const int at = sh.at;
  if (at >= 0) {
    share(at, first, last);
    mine = 0;
    for (int i = first; i < last; i++) mine += kept(i);
    u64 total = 0;
    const u64 c0 = sh.before + block_exclusive_scan(mine, sh.redU, total);
    const u64 u = sh.u;
    if (u >= c0 && u < c0 + mine) {
      u64 c = c0;
      for (int i = first; i < last; i++) {
        c += kept(i);
        if (u < c) {
          sh.picked = i;
          break;
        }
      }
    }
  }
  __syncthreads();
  if (tid == 0) out[r] = sh.picked >= 0 ? sh.picked : 0;
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


extern "C" __global__ void __launch_bounds__(kSampleThreads) std_sample(const float* __restrict__ logits, const double* __restrict__ params,
                                                                        int32_t* __restrict__ out, unsigned char* __restrict__ scratch, int capacity,
                                                                        int rows, int vocab, int phase) {
  __shared__ SampleShared sh;
  const int V = vocab, S = gridDim.x, s = blockIdx.x;
  if (S != (V + kSampleSlice - 1) / kSampleSlice || blockDim.x != kSampleThreads || rows > capacity) __trap();
  SampleScratch sc(scratch, capacity, S);
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const double* pr = params + (size_t)r * kSampleParams;
    const double T = __ldg(pr), topP = __ldg(pr + 2), minP = __ldg(pr + 3);
    const int topK = (int)__ldg(pr + 1);
    const float* l = logits + (size_t)r * V;
    if (phase == kPhaseSlices) {
      sample_slices(l, V, r, s, S, T, topK, topP, out, sc, sh);
    } else if (phase == kPhaseDraw) {
      if (T > 0.0) sample_draw(l, V, r, s, S, T, minP, __ldg(pr + 4), out, sc, sh);
    } else if (T > 0.0 && phase < kPhaseTopP) {
      if (has_top_k(topK, V)) sample_digit(l, V, r, s, S, phase, true, T, topP, topK, sc, sh);
    } else if (T > 0.0 && topP < 1.0) {
      sample_digit(l, V, r, s, S, phase - kPhaseTopP + 1, false, T, topP, topK, sc, sh);
    }
    __syncthreads();  // the shared words are rewritten by the next row
  }
}

/** Top logprobs a row of std_logprobs reports at most (core's MAX_LOGPROBS). */
constexpr int kLogprobsTop = 20;
/** Words before a row's pairs in std_logprobs' `out`: lse (f64, two words), the token's logit, its rank, the pairs' count, one unused. */
constexpr int kLogprobsHead = 6;
/** u32 words of a row of std_logprobs' `out` (src/sample-kernels.ts LOGPROBS_ROW_WORDS): 8-byte aligned rows. */
constexpr int kLogprobsRowWords = kLogprobsHead + 2 * kLogprobsTop;

extern "C" __global__ void __launch_bounds__(kSampleThreads) std_logprobs(const float* __restrict__ logits, const int32_t* __restrict__ tokens, const int32_t* __restrict__ counts,
                                                                          unsigned* __restrict__ out, unsigned char* __restrict__ scratch, int capacity, int rows, int vocab) {
  __shared__ SampleShared sh;
  __shared__ uint2 pairs[kLogprobsTop];
  const int V = vocab, S = gridDim.x, s = blockIdx.x, tid = threadIdx.x, B = blockDim.x;
  if (S != (V + kSampleSlice - 1) / kSampleSlice || blockDim.x != kSampleThreads || rows > capacity) __trap();
  SampleScratch sc(scratch, capacity, S);
  const int lo = s * kSampleSlice, hi = min(V, lo + kSampleSlice);
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const int n = __ldg(counts + r);
    if (n < 0) continue;  // a row that asked for none: the same for every thread of the CTA
    const float* __restrict__ l = logits + (size_t)r * V;
    const int token = __ldg(tokens + r);
    const float v = __ldg(l + token);
    const int m = min(min(n, kLogprobsTop), V);
    // The slice's max, its f64 Σ exp(x − max), its count of logits ≥ the token's (core's rank) and
    // its m largest logits.
    float mx = -INFINITY;
    u64 rank = 0;
    for (int i = lo + tid; i < hi; i += B) {
      const float x = __ldg(l + i);
      mx = fmaxf(mx, x);
      rank += x >= v;
    }
    mx = block_max(mx, sh.redF);
    rank = block_sum(rank, sh.redU);
    double sum = 0.0;
    if (mx > -INFINITY)
      for (int i = lo + tid; i < hi; i += B) sum += exp((double)__ldg(l + i) - (double)mx);
    sum = block_sum(sum, sh.redD);
    SampleSlice* parts = sc.slices + (size_t)r * S;
    uint2* pool = sc.pool + (size_t)r * S * kPoolMax;
    unsigned outside;
    const int count = m > 0 ? slice_top(l, lo, hi, m, pool + (size_t)s * kPoolMax, outside, sh) : 0;
    if (tid == 0) parts[s].mx = mx, parts[s].sum = sum, parts[s].mass = rank, parts[s].count = count;
    if (!last_to_arrive(sc.counters + r, S, sh.last)) continue;

    // The last CTA: lse = max + log Σ (core's logSumExp; the sum's order differs), the rank, and the
    // m largest of the slices' m largest (each slice's entries of a key in index order, so the
    // lowest ids win ties as in the whole row).
    if (tid == 0) {
      float M = -INFINITY;
      u64 rk = 0;
      for (int k = 0; k < S; k++) M = fmaxf(M, __ldcg(&parts[k].mx)), rk += __ldcg(&parts[k].mass);
      double total = 0.0;
      for (int k = 0; k < S; k++) {
        const float mk = __ldcg(&parts[k].mx);
        if (mk > -INFINITY) total += __ldcg(&parts[k].sum) * exp((double)mk - (double)M);
      }
      unsigned* __restrict__ o = out + (size_t)r * kLogprobsRowWords;
      *reinterpret_cast<double*>(o) = (double)M + log(total);
      o[2] = __float_as_uint(v);
      o[3] = (unsigned)rk;
      o[4] = (unsigned)m;
      o[5] = 0u;
    }
    if (m > 0) {
      const auto item = [&](int i, unsigned& idx, unsigned& key) {
        const int k = i / m, j = i - k * m;
        if (j >= __ldcg(&parts[k].count)) return false;
        const uint2 e = __ldcg(pool + (size_t)k * kPoolMax + j);
        idx = e.x, key = e.y;
        return true;
      };
      const auto count = [&](int i, unsigned& key, u64& w) {
        unsigned idx;
        w = 1;
        return item(i, idx, key);
      };
      const unsigned K = select_cut<true>(S * m, count, (double)m, sh.sel);
      const int above = gather_top(S * m, item, K, m, pairs, sh.redU);
      if (tid == 0) {
        // The pairs above K by key, descending, a stable insertion sort (index order on ties).
        for (int j = 1; j < above; j++) {
          const uint2 p = pairs[j];
          int at = j;
          while (at > 0 && pairs[at - 1].y < p.y) pairs[at] = pairs[at - 1], at--;
          pairs[at] = p;
        }
      }
      __syncthreads();
      unsigned* __restrict__ o = out + (size_t)r * kLogprobsRowWords + kLogprobsHead;
      for (int j = tid; j < m; j += B) o[2 * j] = pairs[j].x, o[2 * j + 1] = __float_as_uint(__ldg(l + pairs[j].x));
    }
    __syncthreads();  // the pairs and the shared words are rewritten by the next row
  }
}
