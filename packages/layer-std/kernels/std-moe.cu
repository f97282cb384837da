// Mixture-of-experts kernels of layer-std (src/moe-kernels.ts; reference src/moe.cpu.ts;
// KERNELS.md):
//   std_moe_route    one CTA per row: scores (softmax, or sigmoid + correction bias), the kept
//                    groups, the top-k experts and their weights, in f64 as the reference
//   std_moe_group    one CTA: the (row, slot) entries of the step grouped by expert (counting sort
//                    of ids, on the device: no host sync, graph-safe), the experts chosen listed
//   std_moe_experts_up    h[rj] = silu(gate_e x_r) ⊙ (up_e x_r) for every entry rj = r·topK + j of
//                         expert e; grid [min(E, rows·topK) expert slots, ⌈I / 16⌉], 256 threads,
//                         a warp per 2 intermediate rows, the expert's entries 16 at a time
//   std_moe_experts_down  y[rj] = down_e h[rj]; grid [min(E, rows·topK), ⌈D / 16⌉], 256 threads,
//                         a warp per 2 output values, the expert's entries 16 at a time
//   std_moe_experts       out[r] = Σ_j w_rj · y[r][j], summed in order j (no atomics: deterministic,
//                         `out` overwritten, never accumulated)
//   std_moe_combine       out = routed + σ(gate) · shared (or + shared)
//   std_moe_experts_up_rowwise, std_moe_experts_rowwise: the previous per-(row, expert) kernels
//                         (each row re-reads its experts' weights), kept as the reference the
//                         grouped ones are bit-identical to (test/gpu) and as the bench's baseline
//
// Decode reads every weight of a chosen expert once per step, whatever the number of rows that
// chose it: a CTA owns (expert, tile of 16 weight rows) and runs the expert's entries through the
// tile 16 at a time. Each value is computed exactly as by the row-wise kernels (lane l sums the
// float4 k ≡ l mod 32 in order, the same fma sequence, the xor-butterfly tree over lanes), so a
// row's result is bit-identical whatever the batch and whichever rows share its experts.
#include "std-common.cuh"

using namespace stdk;

namespace {

constexpr int kMaxExperts = 2048;
/** Intermediate rows of one (row, expert) per CTA of std_moe_experts_up_rowwise (expertsUpRowwiseLaunch). */
constexpr int kUpRows = 32;
/** Output values of one row per CTA of std_moe_experts_rowwise (expertsRowwiseLaunch). */
constexpr int kDownRows = 16;
/** Weight rows per warp of the grouped kernels (tile of a CTA: 2 · warps; launches: src/moe-kernels.ts). */
constexpr int kRowsPerWarp = 2;
/** Entries (row, slot) of one expert run through a warp's weight rows at a time. */
constexpr int kEntries = 16;
static_assert(kRowsPerWarp * kEntries == 32, "one value per lane after warp_sum_32");

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
  // Every warp reduces the warps' bests with a second butterfly (not a serial loop over them):
  // `better` is a strict total order on real candidates (values never NaN), so the best is unique.
  const bool has = lane_id() < num_warps();
  v = has ? redV[lane_id()] : 0.0;
  i = has ? redI[lane_id()] : -1;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const double ov = __shfl_xor_sync(kFull, v, o);
    const int oi = __shfl_xor_sync(kFull, i, o);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
}

__device__ __forceinline__ float dot4(const float4 a, const float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

/**
 * dot4 spelled out as nvcc contracts it in the row-wise kernels (PTX: mul y, fma x, fma z, fma w),
 * so the grouped kernels round exactly as they do; `acc + dot4_rn(..)` is an add, as there.
 */
__device__ __forceinline__ float dot4_rn(const float4 a, const float4 b) {
  return __fmaf_rn(a.w, b.w, __fmaf_rn(a.z, b.z, __fmaf_rn(a.x, b.x, __fmul_rn(a.y, b.y))));
}

/**
 * 32 warp sums at once: lane L gets Σ over the lanes of v[L]. Halving exchanges (31 shuffles, not
 * 160) that add the same pairs in the same tree as warp_sum's xor butterfly (bit 4 first, then 3 …
 * 0; a + b = b + a exactly), so each sum is bit-identical to warp_sum(v[i]). v is clobbered.
 */
template <int O>
__device__ __forceinline__ void warp_halve(float (&v)[32], int lane) {
  const bool hi = (lane & O) != 0;
#pragma unroll
  for (int i = 0; i < O; i++) {
    const float keep = hi ? v[i + O] : v[i];
    const float send = hi ? v[i] : v[i + O];
    v[i] = keep + __shfl_xor_sync(kFull, send, O);
  }
}

__device__ __forceinline__ float warp_sum_32(float (&v)[32]) {
  const int lane = lane_id();
  warp_halve<16>(v, lane);
  warp_halve<8>(v, lane);
  warp_halve<4>(v, lane);
  warp_halve<2>(v, lane);
  warp_halve<1>(v, lane);
  return v[0];
}

/** Layout of the int32 `groups` buffer std_moe_group writes (moeGroupsLength ints; KERNELS.md). */
struct Groups {
  int nActive, nInvalid, nValid;
  const int32_t* expert;  // [nActive] the experts chosen, ascending
  const int32_t* start;   // [nActive + 1] start of each one's entries in `order`
  const int32_t* order;   // [nValid] entries rj by expert then rj; then the nInvalid ids outside [0, E)
  __device__ __forceinline__ Groups(const int32_t* g, int E)
      : nActive(g[0]), nInvalid(g[1]), nValid(g[2]), expert(g + 3), start(g + 3 + E), order(g + 4 + 2 * E) {}
};

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

extern "C" __global__ void __launch_bounds__(256) std_moe_experts_up_rowwise(const float* __restrict__ input, const int32_t* __restrict__ ids,
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

extern "C" __global__ void __launch_bounds__(256) std_moe_experts_rowwise(const float* __restrict__ h, const int32_t* __restrict__ ids,
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

// ---- grouped experts ----------------------------------------------------------------------------

extern "C" __global__ void __launch_bounds__(1024) std_moe_group(const int32_t* __restrict__ ids, int32_t* __restrict__ groups, int rows, int experts,
                                                                 int topK) {
  STD_SHARED(int, cursor, kMaxExperts);
  STD_SHARED(unsigned long long, red, 32);
  const int E = experts;
  if (E > kMaxExperts || E < 1) __trap();
  if (blockIdx.x != 0) return;  // one CTA does it all
  const int n = rows * topK, tid = threadIdx.x, B = blockDim.x, lane = lane_id(), warp = warp_id();
  for (int e = tid; e < E; e += B) cursor[e] = 0;
  __syncthreads();
  for (int rj = tid; rj < n; rj += B) {
    const int e = ids[rj];
    if (e >= 0 && e < E) atomicAdd(&cursor[e], 1);
  }
  __syncthreads();
  // Exclusive scan over the experts of (entries << 32 | chosen): thread t owns experts [t·c, t·c + c).
  const int c = (E + B - 1) / B;
  const int e0 = min(E, tid * c), e1 = min(E, e0 + c);
  unsigned long long local = 0;
  for (int e = e0; e < e1; e++) local += ((unsigned long long)cursor[e] << 32) | (cursor[e] > 0 ? 1ull : 0ull);
  unsigned long long incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long v = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) red[warp] = incl;
  __syncthreads();
  unsigned long long run = incl - local, total = 0;
  for (int w = 0; w < num_warps(); w++) {
    if (w < warp) run += red[w];
    total += red[w];
  }
  int32_t* expertOf = groups + 3;
  int32_t* start = groups + 3 + E;
  for (int e = e0; e < e1; e++) {
    const int cnt = cursor[e];
    if (cnt > 0) expertOf[(int)(run & 0xffffffffu)] = e, start[(int)(run & 0xffffffffu)] = (int)(run >> 32);
    cursor[e] = (int)(run >> 32);
    run += ((unsigned long long)cnt << 32) | (cnt > 0 ? 1ull : 0ull);
  }
  const int nActive = (int)(total & 0xffffffffu), nValid = (int)(total >> 32);
  if (tid == 0) groups[0] = nActive, groups[2] = nValid, start[nActive] = nValid;
  __syncthreads();
  // Placement by warp 0 in order of rj (each expert's entries ascending, then the ids outside the
  // experts): deterministic, whatever the scheduling.
  if (warp == 0) {
    int32_t* order = groups + 4 + 2 * E;
    int invalid = 0;
    for (int base = 0; base < n; base += 32) {
      const int rj = base + lane;
      const bool in = rj < n;
      const int e = in ? ids[rj] : -1;
      const bool valid = in && e >= 0 && e < E;
      const unsigned peers = __match_any_sync(kFull, !in ? -2 : valid ? e : -1);
      const int rank = __popc(peers & ((1u << lane) - 1u));
      const unsigned outside = __ballot_sync(kFull, in && !valid);
      if (valid) order[cursor[e] + rank] = rj;
      else if (in) order[nValid + invalid + rank] = rj;
      __syncwarp();
      if (valid && rank == __popc(peers) - 1) cursor[e] += __popc(peers);
      invalid += __popc(outside);
      __syncwarp();
    }
    if (lane == 0) groups[1] = invalid;
  }
}

extern "C" __global__ void __launch_bounds__(128, 3) std_moe_experts_up(const float* __restrict__ input, const int32_t* __restrict__ ids,
                                                                      const int32_t* __restrict__ groups, const float* __restrict__ gateUp,
                                                                      float* __restrict__ h, int rows, int hidden, int inter, int experts, int topK) {
  (void)ids;
  (void)rows;
  const int D = hidden, I = inter;
  const int lane = lane_id(), nw = num_warps();
  const Groups gr(groups, experts);
  const bool vec = (D & 3) == 0 && aligned16(input) && aligned16(gateUp);
  const int tile = nw * kRowsPerWarp;
  // Entries whose id is outside the experts: zeros (the first column of CTAs).
  if (blockIdx.x == 0) {
    for (int i0 = blockIdx.y * tile; i0 < I; i0 += gridDim.y * tile)
      for (int q = warp_id(); q < gr.nInvalid; q += nw) {
        float* hr = h + (size_t)gr.order[gr.nValid + q] * I;
        for (int i = i0 + lane; i < min(I, i0 + tile); i += 32) hr[i] = 0.f;
      }
  }
  for (int a = blockIdx.x; a < gr.nActive; a += gridDim.x) {
    const int e = gr.expert[a], s0 = gr.start[a], s1 = gr.start[a + 1];
    const float* G = gateUp + (size_t)e * 2 * I * D;
    const float* U = G + (size_t)I * D;
    for (int i0 = blockIdx.y * tile; i0 < I; i0 += gridDim.y * tile) {
      const int ib = i0 + warp_id() * kRowsPerWarp;
      if (ib >= I) continue;
      // This warp's weight rows (a row past I repeats the last one; its sums are not written).
      size_t wrow[kRowsPerWarp];
#pragma unroll
      for (int m = 0; m < kRowsPerWarp; m++) wrow[m] = (size_t)min(ib + m, I - 1) * D;
      for (int q0 = s0; q0 < s1; q0 += kEntries) {
        const int nq = min(kEntries, s1 - q0);
        const int myRj = lane < nq ? gr.order[q0 + lane] : 0;
        int xoff[kEntries];  // input row of each entry, in floats
#pragma unroll
        for (int q = 0; q < kEntries; q++) xoff[q] = (__shfl_sync(kFull, myRj, q) / topK) * D;
        float sg[32], su[32];  // [m · kEntries + q]
#pragma unroll
        for (int t = 0; t < 32; t++) sg[t] = 0.f, su[t] = 0.f;
        if (vec) {
          const float4* G4 = reinterpret_cast<const float4*>(G);
          const float4* U4 = reinterpret_cast<const float4*>(U);
          const float4* X4 = reinterpret_cast<const float4*>(input);
#pragma unroll 4
          for (int k = lane; k < (D >> 2); k += 32) {
            float4 gv[kRowsPerWarp], uv[kRowsPerWarp];
#pragma unroll
            for (int m = 0; m < kRowsPerWarp; m++) gv[m] = __ldg(G4 + (wrow[m] >> 2) + k), uv[m] = __ldg(U4 + (wrow[m] >> 2) + k);
#pragma unroll
            for (int q = 0; q < kEntries; q++) {
              if (q < nq) {
                const float4 xv = __ldg(X4 + (xoff[q] >> 2) + k);
#pragma unroll
                for (int m = 0; m < kRowsPerWarp; m++) {
                  sg[m * kEntries + q] = __fadd_rn(sg[m * kEntries + q], dot4_rn(gv[m], xv));
                  su[m * kEntries + q] = __fadd_rn(su[m * kEntries + q], dot4_rn(uv[m], xv));
                }
              }
            }
          }
        } else {
          for (int k = lane; k < D; k += 32) {
            float gv[kRowsPerWarp], uv[kRowsPerWarp];
#pragma unroll
            for (int m = 0; m < kRowsPerWarp; m++) gv[m] = __ldg(G + wrow[m] + k), uv[m] = __ldg(U + wrow[m] + k);
#pragma unroll
            for (int q = 0; q < kEntries; q++) {
              if (q < nq) {
                const float xv = __ldg(input + xoff[q] + k);
#pragma unroll
                for (int m = 0; m < kRowsPerWarp; m++) {
                  sg[m * kEntries + q] = __fmaf_rn(gv[m], xv, sg[m * kEntries + q]);
                  su[m * kEntries + q] = __fmaf_rn(uv[m], xv, su[m * kEntries + q]);
                }
              }
            }
          }
        }
        const float g = warp_sum_32(sg);
        const float u = warp_sum_32(su);
        const int m = lane / kEntries, q = lane % kEntries;
        const int rj = __shfl_sync(kFull, myRj, q);
        if (q < nq && ib + m < I) h[(size_t)rj * I + ib + m] = silu(g) * u;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(128, 4) std_moe_experts_down(const float* __restrict__ h, const int32_t* __restrict__ ids,
                                                                        const int32_t* __restrict__ groups, const float* __restrict__ down,
                                                                        float* __restrict__ y, int rows, int hidden, int inter, int experts, int topK) {
  (void)ids;
  (void)rows;
  (void)topK;
  const int D = hidden, I = inter;
  const int lane = lane_id(), nw = num_warps();
  const Groups gr(groups, experts);
  const bool vec = (I & 3) == 0 && aligned16(h) && aligned16(down);
  const int tile = nw * kRowsPerWarp;
  if (blockIdx.x == 0) {
    for (int d0 = blockIdx.y * tile; d0 < D; d0 += gridDim.y * tile)
      for (int q = warp_id(); q < gr.nInvalid; q += nw) {
        float* yr = y + (size_t)gr.order[gr.nValid + q] * D;
        for (int d = d0 + lane; d < min(D, d0 + tile); d += 32) yr[d] = 0.f;
      }
  }
  for (int a = blockIdx.x; a < gr.nActive; a += gridDim.x) {
    const int e = gr.expert[a], s0 = gr.start[a], s1 = gr.start[a + 1];
    const float* W = down + (size_t)e * D * I;
    for (int d0 = blockIdx.y * tile; d0 < D; d0 += gridDim.y * tile) {
      const int db = d0 + warp_id() * kRowsPerWarp;
      if (db >= D) continue;
      size_t wrow[kRowsPerWarp];
#pragma unroll
      for (int m = 0; m < kRowsPerWarp; m++) wrow[m] = (size_t)min(db + m, D - 1) * I;
      for (int q0 = s0; q0 < s1; q0 += kEntries) {
        const int nq = min(kEntries, s1 - q0);
        const int myRj = lane < nq ? gr.order[q0 + lane] : 0;
        int hoff[kEntries];  // h row of each entry, in floats
#pragma unroll
        for (int q = 0; q < kEntries; q++) hoff[q] = __shfl_sync(kFull, myRj, q) * I;
        float s[32];  // [m · kEntries + q]
#pragma unroll
        for (int t = 0; t < 32; t++) s[t] = 0.f;
        if (vec) {
          const float4* W4 = reinterpret_cast<const float4*>(W);
          const float4* H4 = reinterpret_cast<const float4*>(h);
#pragma unroll 2
          for (int k = lane; k < (I >> 2); k += 32) {
            float4 wv[kRowsPerWarp];
#pragma unroll
            for (int m = 0; m < kRowsPerWarp; m++) wv[m] = __ldg(W4 + (wrow[m] >> 2) + k);
#pragma unroll
            for (int q = 0; q < kEntries; q++) {
              if (q < nq) {
                const float4 hv = __ldg(H4 + (hoff[q] >> 2) + k);
#pragma unroll
                for (int m = 0; m < kRowsPerWarp; m++) s[m * kEntries + q] = __fadd_rn(s[m * kEntries + q], dot4_rn(wv[m], hv));
              }
            }
          }
        } else {
          for (int k = lane; k < I; k += 32) {
            float wv[kRowsPerWarp];
#pragma unroll
            for (int m = 0; m < kRowsPerWarp; m++) wv[m] = __ldg(W + wrow[m] + k);
#pragma unroll
            for (int q = 0; q < kEntries; q++) {
              if (q < nq) {
                const float hv = __ldg(h + hoff[q] + k);
#pragma unroll
                for (int m = 0; m < kRowsPerWarp; m++) s[m * kEntries + q] = __fmaf_rn(wv[m], hv, s[m * kEntries + q]);
              }
            }
          }
        }
        const float t = warp_sum_32(s);
        const int m = lane / kEntries, q = lane % kEntries;
        const int rj = __shfl_sync(kFull, myRj, q);
        if (q < nq && db + m < D) y[(size_t)rj * D + db + m] = t;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(256) std_moe_experts(const float* __restrict__ y, const int32_t* __restrict__ ids,
                                                                   const float* __restrict__ weights, float* __restrict__ output, int rows, int hidden,
                                                                   int experts, int topK) {
  const int D = hidden;
  const bool vec = (D & 3) == 0 && aligned16(y) && aligned16(output);
  const int per = vec ? 4 : 1;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int32_t* id = ids + (size_t)r * topK;
    const float* w = weights + (size_t)r * topK;
    for (int d = (blockIdx.y * blockDim.x + threadIdx.x) * per; d < D; d += gridDim.y * blockDim.x * per) {
      if (vec) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int j = 0; j < topK; j++) {
          const int e = id[j];
          if (e < 0 || e >= experts) continue;
          const float wj = w[j];
          const float4 v = __ldg(reinterpret_cast<const float4*>(y + ((size_t)r * topK + j) * D + d));
          acc.x = __fmaf_rn(wj, v.x, acc.x), acc.y = __fmaf_rn(wj, v.y, acc.y), acc.z = __fmaf_rn(wj, v.z, acc.z), acc.w = __fmaf_rn(wj, v.w, acc.w);
        }
        *reinterpret_cast<float4*>(output + (size_t)r * D + d) = acc;
      } else {
        float acc = 0.f;
        for (int j = 0; j < topK; j++) {
          const int e = id[j];
          if (e < 0 || e >= experts) continue;
          acc = __fmaf_rn(w[j], y[((size_t)r * topK + j) * D + d], acc);
        }
        output[(size_t)r * D + d] = acc;
      }
    }
  }
}
