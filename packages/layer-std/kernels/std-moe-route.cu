// MoE routing kernels of layer-std (src/moe-kernels.ts; reference src/moe.cpu.ts routeCpu;
// KERNELS.md "std-moe-route"):
//   std_moe_route        a CTA per row (rowLaunch): route_pass over that row
//   std_moe_route_few    one CTA of 256 threads for a few rows: route_pass over up to 8 rows at once
//   std_moe_router_gemv  few rows: logits = x · Wᵀ (f32 sums) over CTAs of 1, 2 or 4 experts, and the
//                        last CTA to finish routes them as std_moe_route_few does (no second launch),
//                        then, where asked, makes the shared expert's slots and the groups buffer as
//                        std_moe_shared_slots and std_moe_group would (no third and fourth); with one
//                        CTA more than the experts take, that CTA makes the gated shared slot's
//                        weights beside the logits instead of the last CTA after the route
//   std_moe_shared_slots the shared expert as one more chosen expert: each row's topK (id, weight)
//                        copied to topK + 1 slots, the shared expert (stacked after the routed
//                        experts) last with weight sigmoid(x · g), or 1 without a gate
//
// route_pass is the one route of the three, so they agree bit for bit on every input and a row's
// ids and weights depend on nothing else in the step. Lane l of a row's warps owns its experts
// e ≡ l (mod 32); the row's warps share the exponentials (which part of a row a warp takes changes
// no bit). Scores in f64 as the reference: softmax over the finite logits, its sum in a fixed order
// (each lane's experts in four interleaved sums, then the xor butterfly), or sigmoid. Choices
// (score + bias) become 64-bit keys whose unsigned order is the doubles', so one compare orders
// two; ties go to the lower index. The top-k takes no pick at a time, as serial chains of argmaxes
// and barriers (not the bytes) were the route's cost: the k-th best of the 32 lanes' bests bounds
// the candidates (at least k experts rank at or above it), and each candidate's exact rank among
// them is its slot. A row with too many candidates (many of its best experts in a few lanes), or
// more slots than lanes, picks one at a time instead. The weights' sum in slot order either way.
// A padded row of a decode or verify bucket (its batch position's slot −1 in the step's slot table,
// padSlots) is then routed to no expert: ids −1, weights 0, and no shared slot (unroute_padded).
#include <cstring>

#include "std-common.cuh"
#include "std-moe-groups.cuh"

using namespace stdk;

namespace {

constexpr int kMaxExperts = 2048;
/** Threads of std_moe_route_few and std_moe_router_gemv (routeFewLaunch, routerGemvLaunch). */
constexpr int kFewThreads = 256;
constexpr int kFewWarps = kFewThreads / 32;
/** Rows a route pass takes at most: a leader warp each. */
constexpr int kPassRows = 8;
/** Most slots of the ranked top-k (a lane each); more are picked one at a time. */
constexpr int kRankedTopK = 32;
/** Candidates the ranked top-k holds; a row with more is picked one at a time. */
constexpr int kCands = 64;
/** 8-byte words of shared memory for a pass's rows: per row E raw scores, E choice keys, nGroup group scores. */
constexpr int kRowWords = 4096;
/** The index of "no expert": after every real one. */
constexpr int kNone = 0x7fffffff;

struct alignas(16) Cand {
  uint64_t key;
  int e;
  int pad;
};

/** The shared memory of a route pass. */
struct RouteShared {
  double rows[kRowWords];
  Cand cand[kPassRows][kCands];
};

__device__ __forceinline__ uint64_t bits_of(double v) {
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  return b;
}

__device__ __forceinline__ double double_of(uint64_t b) {
  double v;
  memcpy(&v, &b, sizeof v);
  return v;
}

/**
 * A choice as a key: the doubles' order as unsigned integers, a non-finite choice as −∞ (never NaN;
 * never −0: scores are ≥ +0), every key above 0, which marks an expert not available.
 */
__device__ __forceinline__ uint64_t choice_key(double c) {
  const uint64_t b = bits_of(isfinite(c) ? c : -INFINITY);
  return b >> 63 ? ~b : b | (1ull << 63);
}

__device__ __forceinline__ double key_choice(uint64_t k) { return double_of(k >> 63 ? k & ~(1ull << 63) : ~k); }

/** (k1, e1) ranks before (k2, e2): the larger choice, then the lower index (a strict total order). */
__device__ __forceinline__ bool beats(uint64_t k1, int e1, uint64_t k2, int e2) { return k1 > k2 || (k1 == k2 && e1 < e2); }

/**
 * The best (key, index) of the lane's available experts lane + 32j (j < n, index < E), scanned in
 * index order so a tie keeps the lower index; (0, kNone) where it has none. Unroll: the scan's.
 */
template <int Unroll>
__device__ __forceinline__ void lane_best(const uint64_t* key, int lane, int n, int E, uint64_t& bk, int& be) {
  bk = 0;
  be = kNone;
#pragma unroll Unroll
  for (int j = 0; j < n; j++) {
    const int e = lane + 32 * j;
    if (e < E && key[e] > bk) bk = key[e], be = e;
  }
}

/** The best (key, index) of the warp, returned to every lane. */
__device__ __forceinline__ void warp_best(uint64_t& k, int& e) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t ok = __shfl_xor_sync(kFull, k, o);
    const int oe = __shfl_xor_sync(kFull, e, o);
    if (beats(ok, oe, k, e)) k = ok, e = oe;
  }
}

/** An expert's raw score in f64, as the reference: softmax's e^(l − max) (0 for a non-finite logit), or sigmoid(l); one exp either way. */
__device__ __forceinline__ double raw_score(float v, float mx, int scoring) {
  const double t = exp(scoring == 0 ? (double)v - (double)mx : -(double)v);
  return scoring == 0 ? (isfinite(v) ? t : 0.0) : 1.0 / (1.0 + t);
}

/** A softmax score (sum: the row's) or sigmoid from the logit again, as route_pass computed it first. */
__device__ __noinline__ double score_again(const float* __restrict__ l, int e, float mx, double sum, int scoring) {
  const double rs = raw_score(__ldcg(l + e), mx, scoring);
  return scoring == 0 ? rs / sum : rs;
}

/** The 8-byte words of a row in RouteShared::rows: 2E + nGroup, or 2E where that does not fit (the group scores then overlay the raw scores). */
__device__ __forceinline__ int row_stride(int E, int nGroup) {
  const int full = 2 * E + (nGroup > 1 ? nGroup : 0);
  return full <= kRowWords ? full : 2 * E;
}

/**
 * Routes rows r0 … r0 + nr − 1 with the CTA's warps (every thread calls it: its barriers are the
 * CTA's). wpr warps a row: part p of them takes the exponentials, divisions and keys of the
 * experts lane + 32j, j ≡ p (mod wpr); each reads all the row's logits for the max and all its
 * exponentials for the sum (the same values in the same order in every part). The row's first warp
 * then keeps its groups, ranks its top-k and writes the ids and weights. Logits are read through L2
 * (`__ldcg`): in std_moe_router_gemv other CTAs wrote them.
 */
__device__ __forceinline__ void route_pass(const float* __restrict__ logits, const float* __restrict__ bias, int32_t* __restrict__ ids,
                                           float* __restrict__ weights, int r0, int nr, int E, int topK, int scoring, int normTopK, int nGroup,
                                           int topkGroup, float scaling, int stride, RouteShared& s) {
  const int lane = lane_id(), warp = warp_id();
  const int n = (E + 31) >> 5;  // experts a lane owns
  // About two exponentials a lane where the CTA has the warps (a lone warp takes a few rows' worth).
  const int wpr = max(1, min(num_warps() / nr, (n + 1) >> 1));
  const bool active = warp / wpr < nr;
  const int i = active ? warp / wpr : 0, part = warp - (warp / wpr) * wpr;
  const int G = nGroup > 1 ? nGroup : 0;
  double* x = s.rows + (size_t)i * stride;  // raw scores: e^(l − max) or sigmoid(l)
  uint64_t* key = reinterpret_cast<uint64_t*>(x + E);
  const bool xKept = stride >= 2 * E + G;
  double* gsc = xKept ? x + 2 * E : x;
  const size_t r = (size_t)r0 + i;
  const float* l = logits + r * E;
  float mx = -INFINITY;
  double sum = 1.0;
  if (active) {
    // Every part reads all the row's logits (the max; addresses clamped, so the loads issue
    // together) and keeps its own experts' in x, where its threads alone read them back.
    int p = 0;
    for (int j0 = 0; j0 < n; j0 += 16) {
      float v[16];
#pragma unroll
      for (int u = 0; u < 16; u++) v[u] = __ldcg(l + min(lane + 32 * (j0 + u), E - 1));
#pragma unroll
      for (int u = 0; u < 16; u++) {
        const int e = lane + 32 * (j0 + u);
        const bool in = j0 + u < n && e < E;
        if (in && isfinite(v[u])) mx = fmaxf(mx, v[u]);
        if (in && p == part) x[e] = v[u];
        p = p + 1 == wpr ? 0 : p + 1;
      }
    }
    if (scoring == 0) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
    }
    // Its experts' raw scores, two at a time (two exponentials in flight), and their choices where
    // they are final (sigmoid: score + bias, or + 0.0 as the reference adds without one); softmax
    // keeps the bias in key until its sum is known.
    for (int j = part; j < n; j += 2 * wpr) {
      const int e1 = lane + 32 * j, e2 = e1 + 32 * wpr;
      if (e1 >= E) break;
      const bool has2 = e2 < E;
      const float b1 = bias ? __ldg(bias + e1) : 0.f, b2 = bias && has2 ? __ldg(bias + e2) : 0.f;
      const double s1 = raw_score((float)x[e1], mx, scoring);
      const double s2 = raw_score(has2 ? (float)x[e2] : 0.f, mx, scoring);
      x[e1] = s1;
      if (has2) x[e2] = s2;
      key[e1] = scoring == 0 ? __float_as_uint(b1) : choice_key(s1 + (double)b1);
      if (has2) key[e2] = scoring == 0 ? __float_as_uint(b2) : choice_key(s2 + (double)b2);
    }
  }
  __syncthreads();
  if (scoring == 0) {
    if (active) {
      // The lane's experts in four sums (j mod 4, each in order from 0.0; a missing expert adds
      // 0.0, which changes nothing), (t0 + t1) + (t2 + t3), then the xor butterfly.
      double t0 = 0.0, t1 = 0.0, t2 = 0.0, t3 = 0.0;
      for (int j = 0; j < n; j += 4) {
        const int e = lane + 32 * j;
        t0 += e < E ? x[e] : 0.0;
        t1 += e + 32 < E ? x[e + 32] : 0.0;
        t2 += e + 64 < E ? x[e + 64] : 0.0;
        t3 += e + 96 < E ? x[e + 96] : 0.0;
      }
      const double t = warp_sum((t0 + t1) + (t2 + t3));
      sum = t != 0.0 ? t : 1.0;
      for (int j = part; j < n; j += 2 * wpr) {
        const int e1 = lane + 32 * j, e2 = e1 + 32 * wpr;
        const bool has2 = e2 < E;
        if (e1 >= E) break;
        const double q1 = x[e1] / sum, q2 = (has2 ? x[e2] : 0.0) / sum;
        key[e1] = choice_key(q1 + (double)__uint_as_float((uint32_t)key[e1]));
        if (has2) key[e2] = choice_key(q2 + (double)__uint_as_float((uint32_t)key[e2]));
      }
    }
    __syncthreads();
  }
  if (active && part == 0 && topK > 0) {
    int32_t* idsRow = ids + r * topK;
    float* wRow = weights + r * topK;
    // A picked expert's score: softmax without a bias, its choice; else from x (or the logit again
    // where the group scores overlaid x).
    const bool fromKey = scoring == 0 && !bias;
    const auto score_of = [&](uint64_t k, int e) -> double {
      if (fromKey) return key_choice(k);
      if (!xKept) return score_again(l, e, mx, sum, scoring);
      return scoring == 0 ? x[e] / sum : x[e];
    };
    if (G) {
      // Groups: each scored by the sum of its two best choices (a lane a group, starting at its
      // own offset into the group so the lanes' loads fall in different banks); those ranking
      // below topkGroup lose their experts.
      const int size = E / G;
      for (int g = lane; g < G; g += 32) {
        uint64_t k1 = 0, k2 = 0;
        for (int t = 0, o = g % size; t < size; t++, o = o + 1 == size ? 0 : o + 1) {
          const uint64_t k = key[g * size + o];
          if (k > k1) k2 = k1, k1 = k;
          else if (k > k2) k2 = k;
        }
        double gs = 0.0 + key_choice(k1);
        if (size > 1) gs += key_choice(k2);
        gsc[g] = isfinite(gs) ? gs : -INFINITY;
      }
      __syncwarp();
      for (int g = lane; g < G; g += 32) {
        const double v = gsc[g];
        int rank = 0;
        for (int h = 0; h < G; h++) rank += gsc[h] > v || (gsc[h] == v && h < g);
        if (rank >= topkGroup)
          for (int e = g * size; e < (g + 1) * size; e++) key[e] = 0;
      }
      __syncwarp();
    }
    Cand* c = s.cand[i];
    const bool ranked = topK <= kRankedTopK;
    // The threshold (tk, te): the k-th best of the lanes' bests where k lanes have one, else none
    // (every available expert is a candidate).
    uint64_t tk = 0;
    int te = kNone;
    if (ranked) {
      uint64_t bk;
      int be;
      lane_best<4>(key, lane, n, E, bk, be);
      if (__popc(__ballot_sync(kFull, bk != 0)) >= topK) {
        c[lane] = {bk, be, 0};
        __syncwarp();
        int rank = 0;
#pragma unroll 8
        for (int t = 0; t < 32; t++) rank += beats(c[t].key, c[t].e, bk, be);
        const int src = __ffs(__ballot_sync(kFull, rank == topK - 1)) - 1;
        tk = __shfl_sync(kFull, bk, src);
        te = __shfl_sync(kFull, be, src);
        __syncwarp();
      }
    }
    // The candidates: the available experts ranking at or above the threshold, listed in c.
    int C = 0;
#pragma unroll 4
    for (int j = 0; j < n; j++) {
      const int e = lane + 32 * j;
      const uint64_t k = e < E ? key[e] : 0;
      const bool in = k != 0 && !beats(tk, te, k, e);
      const unsigned m = __ballot_sync(kFull, in);
      const int at = C + __popc(m & ((1u << lane) - 1));
      if (in && at < kCands) c[at] = {k, e, 0};
      C += __popc(m);
    }
    __syncwarp();
    const int kk = min(topK, C);  // fewer only where fewer experts are available (checkMoe rules that out)
    // Slot j's score goes to key[j] (the keys are done with once the slots are known).
    if (ranked && C <= kCands) {
      // A candidate's slot: how many candidates rank before it (a lane per candidate).
      uint64_t k1 = 0, k2 = 0;
      int e1 = kNone, e2 = kNone, rank1 = 0, rank2 = 0;
      if (lane < C) k1 = c[lane].key, e1 = c[lane].e;
      if (lane + 32 < C) k2 = c[lane + 32].key, e2 = c[lane + 32].e;
#pragma unroll 4
      for (int t = 0; t < C; t++) {
        const Cand o = c[t];
        rank1 += beats(o.key, o.e, k1, e1);
        rank2 += beats(o.key, o.e, k2, e2);
      }
      if (lane < C && rank1 < kk) idsRow[rank1] = e1, key[rank1] = bits_of(score_of(k1, e1));
      if (lane + 32 < C && rank2 < kk) idsRow[rank2] = e2, key[rank2] = bits_of(score_of(k2, e2));
    } else {
      // One pick at a time: the best available expert by a warp argmax, taken out of its lane; its
      // score kept in x at its index, then moved to its slot.
#pragma unroll 1
      for (int j = 0; j < kk; j++) {
        uint64_t bk;
        int be;
        lane_best<1>(key, lane, n, E, bk, be);
        warp_best(bk, be);
        const double sc = score_of(bk, be);
        __syncwarp();  // every lane has read x[be]
        if (lane == (be & 31)) key[be] = 0, x[be] = sc;
        if (lane == 0) idsRow[j] = be;
      }
      __syncwarp();
#pragma unroll 1
      for (int j = lane; j < kk; j += 32) key[j] = bits_of(x[idsRow[j]]);
    }
    __syncwarp();
    // The weights: the slots' sum in slot order (every lane the same), each slot's share.
    double total = 0.0;
#pragma unroll 4
    for (int t = 0; t < kk; t++) total += double_of(key[t]);
    if (scoring == 1) total += 1e-20;
#pragma unroll 1
    for (int j = lane; j < kk; j += 32) {
      double w = double_of(key[j]);
      if (normTopK) w /= total;
      wRow[j] = (float)(w * (double)scaling);
    }
  }
  __syncthreads();  // the next pass reuses s
}

/** Row r's batch position's slot in the step's slot table padSlots (no table: 0, not padding). */
__device__ __forceinline__ int row_slot(const int32_t* __restrict__ padSlots, int padK, int r) {
  return padSlots && padK > 0 ? padSlots[r / padK] : 0;
}

/**
 * This lane's batch position's slot (lanes past the positions, or no table: 0), read at a kernel's
 * start and compared only where the route needs it (pad_rows), so the load rides beside the
 * kernel's own instead of stalling it (a compare right after it held every warp for the load).
 */
__device__ __forceinline__ int pad_slot_early(const int32_t* __restrict__ padSlots, int padK, int rows) {
  const int lane = (int)(threadIdx.x & 31);
  return padSlots && padK > 0 && lane < (rows + padK - 1) / padK ? padSlots[lane] : 0;
}

/**
 * Which rows of a launch are padding: those whose batch position (r / k) has slot −1 in the step's
 * slot table `slots` (null: the step has no padding, as a prefill). A bit per position for the
 * first 32 positions; later ones are read when asked.
 */
struct PadRows {
  const int32_t* slots;
  int k;
  unsigned first;
  __device__ __forceinline__ bool operator()(int r) const {
    if (!slots || k <= 0) return false;
    const int p = r / k;
    return p < 32 ? (first >> p) & 1u : row_slot(slots, k, r) < 0;
  }
  /** Whether any of `rows` may be padding (every thread of the CTA gives the same answer). */
  __device__ __forceinline__ bool any(int rows) const { return first != 0u || (slots && k > 0 && rows > 32 * k); }
};

/** pad_slot_early's loads as a mask: every thread of the CTA, in uniform control flow (a ballot). */
__device__ __forceinline__ PadRows pad_rows(const int32_t* __restrict__ padSlots, int padK, int early) {
  if (!padSlots || padK <= 0) return {nullptr, 0, 0u};
  return {padSlots, padK, __ballot_sync(0xffffffffu, early < 0)};
}

/**
 * Row r, when padding, routed to no expert: ids −1 (outside the experts, which every expert kernel
 * skips) and weights 0, over the route's (after the barrier that ends route_pass).
 */
__device__ __forceinline__ void unroute_padded(int32_t* __restrict__ ids, float* __restrict__ weights, int r, int topK, bool padded) {
  if (!padded) return;
  for (int j = threadIdx.x; j < topK; j += blockDim.x) ids[(size_t)r * topK + j] = -1, weights[(size_t)r * topK + j] = 0.f;
}

/**
 * Every row by this CTA: as many at a time as s holds, the CTA has warps for, and kPassRows; then
 * the padded rows (padEarly: pad_slot_early's) routed to no expert. Returns which rows are padding.
 */
__device__ __forceinline__ PadRows route_rows(const float* __restrict__ logits, const float* __restrict__ bias, int32_t* __restrict__ ids,
                                              float* __restrict__ weights, int rows, int E, int topK, int scoring, int normTopK, int nGroup, int topkGroup,
                                              float scaling, const int32_t* __restrict__ padSlots, int padK, int padEarly, RouteShared& s) {
  const int stride = row_stride(E, nGroup);
  const int per = max(1, min(min(kPassRows, num_warps()), kRowWords / stride));
  for (int r0 = 0; r0 < rows; r0 += per)
    route_pass(logits, bias, ids, weights, r0, min(per, rows - r0), E, topK, scoring, normTopK, nGroup, topkGroup, scaling, stride, s);
  const PadRows pad = pad_rows(padSlots, padK, padEarly);
  if (!pad.any(rows)) return pad;
  for (int r = 0; r < rows; r++) unroute_padded(ids, weights, r, topK, pad(r));
  __syncthreads();  // the padded rows' ids, before anything of this CTA reads them
  return pad;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024) std_moe_route(const float* __restrict__ logits, const float* __restrict__ bias, int32_t* __restrict__ ids,
                                                                 float* __restrict__ weights, int rows, int experts, int topK, int scoring, int normTopK,
                                                                 int nGroup, int topkGroup, float scaling, const int32_t* __restrict__ padSlots, int padK) {
  STD_SHARED(RouteShared, s, 1);
  if (experts > kMaxExperts || experts < 1) __trap();
  const int stride = row_stride(experts, nGroup);
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    // Compared after the route, so the load does not hold the route's first reads.
    const int slot = row_slot(padSlots, padK, r);
    route_pass(logits, bias, ids, weights, r, 1, experts, topK, scoring, normTopK, nGroup, topkGroup, scaling, stride, s[0]);
    unroute_padded(ids, weights, r, topK, slot < 0);
  }
}

// ---- few rows: std_moe_route_few and std_moe_router_gemv ------------------------------------------

namespace {

/** Most rows of std_moe_router_gemv: 8 accumulators an expert. */
constexpr int kGemvRows = 8;

/**
 * Experts a CTA of std_moe_router_gemv takes (routerGemvLaunch): up to 4, fewer where the experts
 * are few, so their weight is spread over more SMs (each CTA streams fewer bytes).
 */
__device__ __forceinline__ int gemv_experts(int E) { return E <= 128 ? 1 : E <= 256 ? 2 : 4; }

/** warp_halve on lane bits O, O / 2 … 1 (warp_sum_32's tree where V = 32). */
template <int O, int V>
__device__ __forceinline__ void halve(float (&v)[V], int lane) {
  warp_halve<O>(v, lane);
  if constexpr (O > 1) halve<O / 2>(v, lane);
}

/**
 * V warp sums at once (V = 8, 16, 32): lane L gets Σ over the lanes of v[L mod V]. Halving
 * exchanges on lane bits below V (for V = 32 warp_sum_32's tree), then the xor butterfly on the
 * others; v is clobbered.
 */
template <int V>
__device__ __forceinline__ float warp_sums(float (&v)[V]) {
  halve<V / 2>(v, lane_id());
  float t = v[0];
#pragma unroll
  for (int o = V; o < 32; o <<= 1) t += __shfl_xor_sync(kFull, t, o);
  return t;
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
 * logits[r][e] = x_r · W_e for this CTA's EPC experts: the 8 warps split D (lane l of warp w takes
 * the 8-element steps k ≡ 32w + l mod 256; elements likewise where D is not a multiple of 8 or a
 * base is unaligned), each lane sums its steps in order with one fma per element, then the lanes'
 * sums by warp_sums' tree and the warps' in warp order. A row's logits do not depend on the other
 * rows of the step.
 */
template <typename T, int EPC>
__device__ __forceinline__ void router_gemv(const T* __restrict__ x, const T* __restrict__ w, float* __restrict__ logits, int rows, int D, int E, float* red) {
  constexpr int V = EPC * kGemvRows;
  const int lane = lane_id(), warp = warp_id();
  const int e0 = blockIdx.x * EPC;
  float acc[EPC][kGemvRows];
#pragma unroll
  for (int ex = 0; ex < EPC; ex++)
#pragma unroll
    for (int r = 0; r < kGemvRows; r++) acc[ex][r] = 0.f;
  if ((D & 7) == 0 && aligned16(x) && aligned16(w)) {
    const int nv = D >> 3;
    for (int k = warp * 32 + lane; k < nv; k += kFewThreads) {
      float4 wa[EPC], wb[EPC];
#pragma unroll
      for (int ex = 0; ex < EPC; ex++) {
        if (e0 + ex < E) ldg8(w + (size_t)(e0 + ex) * D, k, wa[ex], wb[ex]);
        else wa[ex] = wb[ex] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int r = 0; r < kGemvRows; r++) {
        if (r >= rows) break;
        float4 xa, xb;
        ldg8(x + (size_t)r * D, k, xa, xb);
#pragma unroll
        for (int ex = 0; ex < EPC; ex++) acc[ex][r] = dot8(acc[ex][r], wa[ex], wb[ex], xa, xb);
      }
    }
  } else {
    for (int d = warp * 32 + lane; d < D; d += kFewThreads) {
      float wv[EPC];
#pragma unroll
      for (int ex = 0; ex < EPC; ex++) wv[ex] = e0 + ex < E ? ldg_value(w, (size_t)(e0 + ex) * D + d) : 0.f;
#pragma unroll
      for (int r = 0; r < kGemvRows; r++) {
        if (r >= rows) break;
        const float xv = ldg_value(x, (size_t)r * D + d);
#pragma unroll
        for (int ex = 0; ex < EPC; ex++) acc[ex][r] = __fmaf_rn(wv[ex], xv, acc[ex][r]);
      }
    }
  }
  float v[V];
#pragma unroll
  for (int ex = 0; ex < EPC; ex++)
#pragma unroll
    for (int r = 0; r < kGemvRows; r++) v[ex * kGemvRows + r] = acc[ex][r];
  const float t = warp_sums(v);  // lane L < V: expert e0 + L / 8, row L % 8
  if (lane < V) red[warp * V + lane] = t;
  __syncthreads();
  if (warp == 0 && lane < V) {
    float u = red[lane];
    for (int o = 1; o < kFewWarps; o++) u += red[o * V + lane];
    const int e = e0 + lane / kGemvRows, r = lane % kGemvRows;
    if (r < rows && e < E) logits[(size_t)r * E + e] = u;
  }
}

template <typename T>
__device__ __forceinline__ void router_gemv_any(const T* __restrict__ x, const T* __restrict__ w, float* __restrict__ logits, int rows, int D, int E, float* red) {
  switch (gemv_experts(E)) {
    case 1: router_gemv<T, 1>(x, w, logits, rows, D, E, red); break;
    case 2: router_gemv<T, 2>(x, w, logits, rows, D, E, red); break;
    default: router_gemv<T, 4>(x, w, logits, rows, D, E, red);
  }
}

/**
 * Counts this CTA done (one thread, after the CTA's barrier): one acq_rel atomic, which publishes
 * the CTA's logits with the count and, in the last CTA, makes the others' visible to it.
 */
__device__ __forceinline__ unsigned count_done(unsigned* counter) {
#ifdef METRALE_CUDA_EMU
  return atomicAdd(counter, 1u);
#else
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(counter), "r"(1u) : "memory");
  return old;
#endif
}

}  // namespace

// ---- the shared expert as one more slot ----------------------------------------------------------

namespace {

/**
 * Rows r0, r0 + step, … of the shared expert's slot: slots [r][0, topK) are the route's ids and
 * weights, slot topK the shared expert (`sharedId`). ids and weights are plain loads: the router's
 * last CTA reads them right after writing them.
 */
__device__ __forceinline__ void route_slots(const int32_t* ids, const float* weights, int32_t* __restrict__ slotIds, float* __restrict__ slotWeights,
                                            int rows, int topK, int sharedId, PadRows pad, int r0, int step) {
  const int tid = threadIdx.x, B = blockDim.x, S = topK + 1;
  for (int r = r0; r < rows; r += step) {
    for (int j = tid; j < topK; j += B) {
      slotIds[(size_t)r * S + j] = ids[(size_t)r * topK + j];
      slotWeights[(size_t)r * S + j] = weights[(size_t)r * topK + j];
    }
    // A padded row takes no shared expert either (its weight is made as any row's).
    if (tid == 0) slotIds[(size_t)r * S + topK] = pad(r) ? -1 : sharedId;
  }
}

/**
 * Rows r0, r0 + step, … of the shared expert's slot weight (a CTA of any multiple of 32 threads):
 * slotWeights[r][topK] = sigmoid(Σ_d x[r][d] · g[d]) (each thread sums its d ≡ t (mod B) in order by
 * fma, then block_sum's tree), or 1 where g is null. A row's weight does not depend on the other
 * rows, nor on which CTA (of the same size) makes it.
 */
template <typename T>
__device__ __forceinline__ void shared_gate_weights(const T* __restrict__ x, const float* __restrict__ gate, float* __restrict__ slotWeights, int rows,
                                                    int D, int topK, float* red, int r0, int step) {
  const int tid = threadIdx.x, B = blockDim.x, S = topK + 1;
  for (int r = r0; r < rows; r += step) {
    float g = 1.f;
    if (gate) {
      // d = tid, tid + B, … in order, 8 of them loaded at once (one after another, each load's
      // latency was the kernel's).
      constexpr int kAhead = 8;
      float acc = 0.f;
      for (int d0 = tid; d0 < D; d0 += kAhead * B) {
        float xv[kAhead], gv[kAhead];
#pragma unroll
        for (int a = 0; a < kAhead; a++) {
          const int d = d0 + a * B;
          xv[a] = d < D ? ldg_value(x, (size_t)r * D + d) : 0.f;
          gv[a] = d < D ? gate[d] : 0.f;
        }
#pragma unroll
        for (int a = 0; a < kAhead; a++)
          if (d0 + a * B < D) acc = __fmaf_rn(xv[a], gv[a], acc);
      }
      g = sigmoid(block_sum(acc, red));
    }
    if (tid == 0) slotWeights[(size_t)r * S + topK] = g;
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kFewThreads) std_moe_route_few(const float* __restrict__ logits, const float* __restrict__ bias,
                                                                           int32_t* __restrict__ ids, float* __restrict__ weights, int rows, int experts,
                                                                           int topK, int scoring, int normTopK, int nGroup, int topkGroup, float scaling,
                                                                           const int32_t* __restrict__ padSlots, int padK) {
  STD_SHARED(RouteShared, s, 1);
  if (blockIdx.x != 0) return;  // one CTA routes every row
  if (experts > kMaxExperts || experts < 1) __trap();
  route_rows(logits, bias, ids, weights, rows, experts, topK, scoring, normTopK, nGroup, topkGroup, scaling, padSlots, padK,
             pad_slot_early(padSlots, padK, rows), s[0]);
}

extern "C" __global__ void __launch_bounds__(kFewThreads, 1) std_moe_router_gemv(const void* __restrict__ x, const void* __restrict__ w, float* __restrict__ logits,
                                                                             unsigned* __restrict__ counter, const float* __restrict__ bias,
                                                                             int32_t* __restrict__ ids, float* __restrict__ weights, int rows, int hidden,
                                                                             int experts, int topK, int scoring, int normTopK, int nGroup, int topkGroup,
                                                                             float scaling, int dtype, const float* __restrict__ sharedGate,
                                                                             int32_t* __restrict__ slotIds, float* __restrict__ slotWeights, int sharedId,
                                                                             int32_t* __restrict__ groups, int groupExperts,
                                                                             const int32_t* __restrict__ padSlots, int padK) {
  STD_SHARED(float, red, kFewWarps * 32);
  STD_SHARED(RouteShared, s, 1);
  STD_SHARED(int, last, 1);
  STD_SHARED(int, groupKeys, 2 * kFewGroupEntries);
  early_start();
  if (rows > kGemvRows || blockDim.x != kFewThreads || experts < 1 || experts > kMaxExperts) __trap();
  if (groups && rows * (topK + (sharedId >= 0)) > kFewGroupEntries) __trap();
  const int padEarly = pad_slot_early(padSlots, padK, rows);
  const int epc = gemv_experts(experts);
  const unsigned gemvCtas = (unsigned)((experts + epc - 1) / epc);
  // One CTA more than the experts take (routerGemvLaunch's gateCta): it makes the shared expert's
  // gated slot weights while the others make the logits, so the last CTA's tail does not wait on
  // that dot product.
  const bool gateCta = gridDim.x == gemvCtas + 1;
  if ((gridDim.x != gemvCtas && !(gateCta && sharedGate && sharedId >= 0)) || gridDim.y * gridDim.z != 1) __trap();
  if (gateCta && blockIdx.x == gemvCtas) {
    METRALE_BY_ROW_TYPE(dtype, shared_gate_weights, static_cast<const T*>(x), sharedGate, slotWeights, rows, hidden, topK, red, 0, 1);
  } else {
    METRALE_BY_ROW_TYPE(dtype, router_gemv_any, static_cast<const T*>(x), static_cast<const T*>(w), logits, rows, hidden, experts, red);
  }
  // The last CTA to finish routes; it resets the counter, so the next launch (or a graph replay)
  // starts from zero.
  __syncthreads();
  if (threadIdx.x == 0) {
    last[0] = count_done(counter) == gridDim.x - 1;
    if (last[0]) *counter = 0;
  }
  __syncthreads();
  if (!last[0]) return;
  const PadRows pad = route_rows(logits, bias, ids, weights, rows, experts, topK, scoring, normTopK, nGroup, topkGroup, scaling, padSlots, padK, padEarly, s[0]);
  // The tail the layer would launch next, in the same CTA (std_moe_shared_slots, std_moe_group; the
  // same bits: the slots' gate sums over the same 256 threads, the groups buffer is one order).
  if (sharedId < 0 && !groups) return;
  __syncthreads();  // the route's ids and weights, written by this CTA, are visible to all of it
  if (sharedId >= 0) {
    route_slots(ids, weights, slotIds, slotWeights, rows, topK, sharedId, pad, 0, 1);
    if (!gateCta) METRALE_BY_ROW_TYPE(dtype, shared_gate_weights, static_cast<const T*>(x), sharedGate, slotWeights, rows, hidden, topK, red, 0, 1);
    __syncthreads();
  }
  if (groups) group_few(sharedId >= 0 ? slotIds : ids, rows * (topK + (sharedId >= 0)), groupExperts, groups, groupKeys);
}

extern "C" __global__ void __launch_bounds__(256) std_moe_shared_slots(const void* __restrict__ x, const float* __restrict__ gate, const int32_t* __restrict__ ids,
                                                                      const float* __restrict__ weights, int32_t* __restrict__ slotIds,
                                                                      float* __restrict__ slotWeights, int rows, int hidden, int topK, int sharedId, int dtype,
                                                                      const int32_t* __restrict__ padSlots, int padK) {
  STD_SHARED(float, red, 32);
  if ((blockDim.x & 31) != 0) __trap();
  const int padEarly = pad_slot_early(padSlots, padK, rows);
  // The gate's weights first (they write only the shared slot's weight), so the padding is
  // compared after them.
  METRALE_BY_ROW_TYPE(dtype, shared_gate_weights, static_cast<const T*>(x), gate, slotWeights, rows, hidden, topK, red, (int)blockIdx.x, (int)gridDim.x);
  route_slots(ids, weights, slotIds, slotWeights, rows, topK, sharedId, pad_rows(padSlots, padK, padEarly), (int)blockIdx.x, (int)gridDim.x);
}
