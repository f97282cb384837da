// Gated DeltaNet two-kernel verify, first kernel (gdn_verify_prep): per (batch position, key head)
// of a verify step of k ≤ 4 rows, everything the rows need but the state — the conv and SiLU of
// the key head's channels for each row, the L2 norms, the Gram entries k̂_s·k̂_t and k̂_s·q̂_t, the
// gates — written to the prep buffer; in carried mode the pending rows go to the ring and the new
// rows' conv inputs to the conv stash. Layouts: ../KERNELS.md ("Two-kernel verify").
//
// Why: the decode's reason (gdn-decode-prep.cuh): a CTA that holds its head's state while this
// chain of small loads runs waits on it behind the state traffic. Why per key head: q̂, k̂ and the
// Gram entries are the key head's, shared by its r value heads (written once, in the keys region).
//
// Launch: grid [batch, H_k, 2] (z: the q and k channels with everything derived from them, or the
// v channels: two CTAs of one trip each rather than one of two dependent trips), kVPrepThreads
// threads, the dynamic shared memory of vprep_smem_floats() (gdn-verify-launch.ts computes the same).
#pragma once
#include "gdn-common.cuh"
#include "gdn-decode-prep.cuh"

namespace gdn {
namespace verify {

constexpr int kVRows = 4;          // rows of a two-kernel verify at most
constexpr int kVPrepThreads = 128;
#ifndef GDN_VPREP_CH
#define GDN_VPREP_CH 2
#endif
constexpr int kVCh = GDN_VPREP_CH;  // channels per thread per trip (their inputs load together)
#ifndef GDN_VPREP_MINB
#define GDN_VPREP_MINB 6  // 80 registers, no spills (8: 64 with spills; 1: 112)
#endif
constexpr int kVPrepMinBlocks = GDN_VPREP_MINB;  // CTAs per SM its registers are capped for
constexpr int kWin = fast::kMaxConv + kVRows;  // conv input positions P0 − K .. P0 + 3
constexpr int kDots = 24;          // Σq_t², Σk_t² (4 + 4), k_s·q_t s ≤ t (10), k_s·k_t s < t (6)
constexpr int kScalars = 48;       // β [4], A [4], Γ [4], 0 [4], ck [4][4], cq [4][4]

__host__ __device__ __forceinline__ int key_stride(int dk) { return 2 * kVRows * fast::pad4(dk); }
__host__ __device__ __forceinline__ int value_stride(int dv) { return kVRows * fast::pad4(dv) + kScalars; }

// Dynamic shared memory, in floats: the rows' conv outputs [4][⌈2·d_k + r·d_v⌉₄], the warps' sums
// [24][4], the gates [r][4][2] (β, g).
__host__ __device__ __forceinline__ int vprep_smem_floats(int dk, int dv, int r) {
  return kVRows * fast::pad4(2 * dk + r * dv) + kDots * (kVPrepThreads / 32) + 2 * kVRows * r;
}

// The dot of Gram entry d (0..23) of a key head's raw q_t, k_t: which rows and vectors.
// 0..3 q_t·q_t, 4..7 k_t·k_t, 8..17 k_s·q_t (s ≤ t, in order of t), 18..23 k_s·k_t (s < t).
__host__ __device__ __forceinline__ void dot_rows(int d, int& s, int& t, bool& xq, bool& yq) {
  if (d < 8) {
    s = t = d & 3;
    xq = yq = d < 4;
    return;
  }
  int e = d - 8;
  if (e < 10) {
    t = 0;
    while (e > t) e -= ++t;
    s = e, xq = false, yq = true;
    return;
  }
  e -= 10;
  t = 1;
  while (e >= t) e -= t++;
  s = e, xq = false, yq = false;
}

__device__ __forceinline__ void vprep_entry(const Args& A, float* prep, int batch, int k) {
  const Geo G = geo_of(A);
  const bool ok = A.K <= fast::kMaxConv && A.maxK <= fast::kMaxRows && nthreads() == kVPrepThreads && gridDim.z == 2 &&
                  gridDim.y == (unsigned)A.hk && k >= 1 && k <= kVRows && k <= A.maxK &&
                  fast::dyn_smem_bytes() >= 4u * (unsigned)vprep_smem_floats(A.dk, A.dv, G.r);
  if (!ok) __trap();
  // z = 0: the q and k channels, the norms, Gram entries and gates (the keys record and the
  // values' scalars); z = 1: the v channels (the values' v rows). Each owns its channels' ring
  // and conv stash entries.
  const int b = blockIdx.x, g = blockIdx.y, half = blockIdx.z;
  if (b >= batch || g >= A.hk) return;
  const TaskIn I = decode_task_in(A, b);
  if (I.slot < 0) return;
  const int n = I.nPend, P0 = I.P0, L = P0 - n;
  if (n > A.maxK || n > P0) __trap();
  const bool carried = A.pending != nullptr;
  const int nch = 2 * A.dk + G.r * A.dv, nchp = fast::pad4(nch);
  float* mixed = fast::dyn_smem();                 // [4][nchp]: q, k, then v of the r value heads
  float* red = mixed + kVRows * nchp;              // [24][4] warp sums
  float* gates = red + kDots * (kVPrepThreads / 32);  // [r][4][2]: β, g
  const int tid = tid_lin(), lane = tid & 31, warp = tid >> 5;
  const int R = conv_stash_rows(A);
  // Gates' inputs first (they load with the conv inputs): thread e < r·k takes value head e / k, row e % k.
  float bRaw = 0.0f, aRaw = 0.0f, aLogH = 0.0f, dtB = 0.0f;
  const bool gateThread = half == 0 && tid < G.r * k;
  if (gateThread) {
    const int m = tid / k, t = tid - m * k;
    const float* bar = A.ba + (size_t)(I.row0 + t) * 2 * A.hv + g * 2 * G.r;
    bRaw = bar[m], aRaw = bar[G.r + m], aLogH = A.aLog[g * G.r + m], dtB = A.dtBias[g * G.r + m];
  }
  // Window position w = p − (P0 − K), p = P0 − K .. P0 + k − 1: its row (source by conv_source's
  // rule: p ≥ P0 the step's rows, p ≥ L the conv stash, else the ring; p < 0 zero). Position
  // P0 − K is read only to commit it (a pending row; no row's conv reaches it).
  // Carried mode also writes position p's inputs: a pending row (kind 2) to its ring row, a new row
  // (kind 1) to its conv stash row (dst). Rows by position walk p mod K and p mod R from one division
  // each (p0 = P0 − K ≥ −K, so p0 + R·K is not negative).
  const float* base[kWin];
  float* dst[kWin];
  int kind[kWin];
  {
    const int p0 = P0 - A.K;
    int rk = (p0 + A.K * R) % A.K, rr = (p0 + A.K * R) % R;
#pragma unroll
    for (int w = 0; w < kWin; ++w, rk = rk + 1 == A.K ? 0 : rk + 1, rr = rr + 1 == R ? 0 : rr + 1) {
      const int p = p0 + w;
      base[w] = nullptr, dst[w] = nullptr, kind[w] = 0;
      if (w > A.K + k - 1 || p < 0) continue;
      float* ringRow = A.convRing + ((size_t)I.slot * A.K + rk) * G.convDim;
      float* stashRow = A.convStash + ((size_t)I.slot * R + rr) * G.convDim;
      if (p >= P0) kind[w] = 1, base[w] = A.qkvz + (size_t)(I.row0 + p - P0) * G.width, dst[w] = carried ? stashRow : nullptr;
      else if (p >= L) kind[w] = 2, base[w] = stashRow, dst[w] = carried ? ringRow : nullptr;
      else if (w > 0) kind[w] = 3, base[w] = ringRow;
    }
  }
  // Conv + SiLU of kVCh channels per trip; carried: the ring takes the pending rows' inputs
  // (positions [max(L, P0 − K), P0), ring entries no row of this step reads: the rows read
  // positions ≥ P0 − K + 1 from the ring only below L) and the conv stash the new rows'.
  const int lEnd = half == 0 ? 2 * A.dk : nch;
  for (int l0 = (half == 0 ? 0 : 2 * A.dk) + tid; l0 < lEnd; l0 += kVCh * kVPrepThreads) {
    float x[kVCh][kWin], wt[kVCh][fast::kMaxConv];
    int cs[kVCh];
#pragma unroll
    for (int e = 0; e < kVCh; ++e) {
      const int l = l0 + e * kVPrepThreads;
      const bool in = l < lEnd;
      const int c = decode::key_head_channel(A, G, g, l);
      cs[e] = c;
      const int col = g * G.grp + l;
#pragma unroll
      for (int w = 0; w < kWin; ++w) x[e][w] = (in && kind[w]) ? base[w][kind[w] == 1 ? col : c] : 0.0f;
#pragma unroll
      for (int t = 0; t < fast::kMaxConv; ++t) wt[e][t] = (in && t < A.K) ? A.convWeight[(size_t)c * A.K + t] : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < kVCh; ++e) {
      const int l = l0 + e * kVPrepThreads;
      if (l >= lEnd) continue;
#pragma unroll
      for (int t = 0; t < kVRows; ++t) {
        float acc = 0.0f;
#pragma unroll
        for (int tap = 0; tap < fast::kMaxConv; ++tap) acc = fmaf(wt[e][tap], x[e][t + 1 + tap], acc);  // position P0 + t − K + 1 + tap
        mixed[t * nchp + l] = t < k ? siluf_(acc) : 0.0f;
      }
#pragma unroll
      for (int w = 0; w < kWin; ++w)
        if (dst[w]) dst[w][cs[e]] = x[e][w];
    }
  }
  if (gateThread) {
    const int m = tid / k, t = tid - m * k;
    gates[(m * kVRows + t) * 2] = sigmoidf_(bRaw);
    gates[(m * kVRows + t) * 2 + 1] = -expf(aLogH) * softplusf_(aRaw + dtB);
  }
  __syncthreads();
  const int dkp = fast::pad4(A.dk), dvp = fast::pad4(A.dv);
  float* vals = prep + (size_t)batch * A.hk * key_stride(A.dk);
  if (half == 1) {
    // The v rows of g's r value records (zero past d_v and for rows ≥ k).
    for (int m = 0; m < G.r; ++m) {
      float* out = vals + ((size_t)b * A.hv + g * G.r + m) * value_stride(A.dv);
#pragma unroll
      for (int t = 0; t < kVRows; ++t)
        for (int j = tid; j < dvp; j += kVPrepThreads) out[t * dvp + j] = j < A.dv ? mixed[t * nchp + 2 * A.dk + m * A.dv + j] : 0.0f;
    }
    return;
  }
  // The 24 dots of the key head's raw q_t, k_t: per thread, per warp (tree), then the warps in order.
  float dots[kDots];
#pragma unroll
  for (int d = 0; d < kDots; ++d) dots[d] = 0.0f;
  for (int i = tid; i < A.dk; i += kVPrepThreads) {
    float q[kVRows], kk[kVRows];
#pragma unroll
    for (int t = 0; t < kVRows; ++t) q[t] = mixed[t * nchp + i], kk[t] = mixed[t * nchp + A.dk + i];
#pragma unroll
    for (int d = 0; d < kDots; ++d) {
      int s, t;
      bool xq, yq;
      dot_rows(d, s, t, xq, yq);
      dots[d] = fmaf(xq ? q[s] : kk[s], yq ? q[t] : kk[t], dots[d]);
    }
  }
  constexpr int kWarpsP = kVPrepThreads / 32;
#pragma unroll
  for (int d = 0; d < kDots; ++d) {
    float v = dots[d];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[d * kWarpsP + warp] = v;
  }
  __syncthreads();
  // Every thread adds the warps' sums of the dots it needs (in warp order: the same bits everywhere).
  const auto total = [&](int d) {
    float s = 0.0f;
#pragma unroll
    for (int v = 0; v < kWarpsP; ++v) s += red[d * kWarpsP + v];
    return s;
  };
  float fq[kVRows], fk[kVRows];
  const float rdk = 1.0f / sqrtf((float)A.dk);
#pragma unroll
  for (int t = 0; t < kVRows; ++t) {
    fq[t] = t < k ? rdk / sqrtf(total(t) + 1e-6f) : 0.0f;
    fk[t] = t < k ? 1.0f / sqrtf(total(4 + t) + 1e-6f) : 0.0f;
  }
  // Keys record of (b, g): k̂_t, q̂_t for t < 4 (zero past d_k and for rows ≥ k).
  float* keys = prep + ((size_t)b * A.hk + g) * key_stride(A.dk);
#pragma unroll
  for (int t = 0; t < kVRows; ++t) {
    for (int i = tid; i < dkp; i += kVPrepThreads) {
      const bool in = i < A.dk;
      keys[t * 2 * dkp + i] = in ? mixed[t * nchp + A.dk + i] * fk[t] : 0.0f;
      keys[t * 2 * dkp + dkp + i] = in ? mixed[t * nchp + i] * fq[t] : 0.0f;
    }
  }
  // The scalars of g's r value records (thread e < 48 writes scalar e).
  for (int m = 0; m < G.r; ++m) {
    float* out = vals + ((size_t)b * A.hv + g * G.r + m) * value_stride(A.dv);
    if (tid < kScalars) {
      const float* gm = gates + m * kVRows * 2;
      float gam[kVRows];
      float acc = 0.0f;
#pragma unroll
      for (int t = 0; t < kVRows; ++t) acc += t < k ? gm[2 * t + 1] : 0.0f, gam[t] = acc;
      float v = 0.0f;
      if (tid < 16) {
        const int t = tid & 3;
        if (t < k) v = tid < 4 ? gm[2 * t] : tid < 8 ? expf(gam[t]) : tid < 12 ? gam[t] : 0.0f;
      } else {
        const int e = tid & 15, s = e >> 2, t = e & 3;
        const bool kq = tid >= 32;
        if (t < k && (kq ? s <= t : s < t)) {
          // The dot's index among the 24 (dot_rows' order).
          const int d = kq ? 8 + t * (t + 1) / 2 + s : 18 + (t - 1) * t / 2 + s;
          v = expf(gam[t] - gam[s]) * fk[s] * (kq ? fq[t] : fk[t]) * total(d);
        }
      }
      out[kVRows * dvp + tid] = v;
    }
  }
}

}  // namespace verify
}  // namespace gdn
