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
// Launch: grid [batch, H_k], kVPrepThreads = 64 threads, no shared memory. Warp 0 takes the q and
// k channels: lane l holds channels 4l .. 4l + 3 of both (d_k ≤ 128), so the 24 dot products of
// the rows' q and k reduce inside the warp, and it writes the keys record and the values'
// scalars; warp 1 takes the v channels of the r value heads, 4 per lane per turn. Every input
// moves as a float4 (d_k and d_v multiples of 4). No barrier: the warps share nothing. (The first
// version, a CTA of 128 threads per (position, key head, half) with the rows in shared memory,
// was issue-bound: too many warp instructions per key head; docs/benchmarks.md, GDN verify and
// fold.)
#pragma once
#include "gdn-common.cuh"
#include "gdn-prep-window.cuh"

namespace gdn {
namespace verify {

constexpr int kVRows = 4;          // rows of a two-kernel verify at most
constexpr int kVPrepThreads = 64;  // warp 0: q and k channels; warp 1: v channels
#ifndef GDN_VPREP_MINB
#define GDN_VPREP_MINB 6  // 166 registers, no spills (8: 128 with 372 B of spills)
#endif
constexpr int kVPrepMinBlocks = GDN_VPREP_MINB;  // CTAs per SM its registers are capped for
constexpr int kWin = fast::kMaxConv + kVRows;  // conv input positions P0 − K .. P0 + 3
constexpr int kDots = 24;          // Σq_t², Σk_t² (4 + 4), k_s·q_t s ≤ t (10), k_s·k_t s < t (6)
constexpr int kScalars = 48;       // β [4], A [4], Γ [4], 0 [4], ck [4][4], cq [4][4]

__host__ __device__ __forceinline__ int key_stride(int dk) { return 2 * kVRows * fast::pad4(dk); }
__host__ __device__ __forceinline__ int value_stride(int dv) { return kVRows * fast::pad4(dv) + kScalars; }

// Window positions P0 − K .. P0 + 3 (prep::Window): what each reads (prep::conv_group's src), and
// in carried mode where it is committed: a new row (p ≥ P0) to its conv stash row, a pending row
// (L ≤ p < P0) to its ring row. Position P0 − K is read only to commit it (no row's conv reaches
// it). Ring and conv stash rows walk p mod K and p mod R from one division each (p0 = P0 − K ≥ −K,
// so p0 + R·K is not negative).
using Window = prep::Window<kWin>;

__device__ __forceinline__ Window window_of(const Args& A, const Geo& G, const TaskIn& I, int k, bool carried) {
  Window W;
  const int R = conv_stash_rows(A), P0 = I.P0, L = P0 - I.nPend, p0 = P0 - A.K;
  int rk = (p0 + A.K * R) % A.K, rr = (p0 + A.K * R) % R;
#pragma unroll
  for (int w = 0; w < kWin; ++w, rk = rk + 1 == A.K ? 0 : rk + 1, rr = rr + 1 == R ? 0 : rr + 1) {
    const int p = p0 + w;
    W.src[w] = nullptr, W.row[w] = false, W.dst[w] = nullptr;
    if (w > A.K + k - 1 || p < 0) continue;
    float* ringRow = A.convRing + ((size_t)I.slot * A.K + rk) * G.convDim;
    float* stashRow = A.convStash + ((size_t)I.slot * R + rr) * G.convDim;
    if (p >= P0) W.src[w] = A.qkvz + (size_t)(I.row0 + p - P0) * G.width, W.row[w] = true, W.dst[w] = carried ? stashRow : nullptr;
    else if (p >= L) W.src[w] = stashRow, W.dst[w] = carried ? ringRow : nullptr;
    else if (w > 0) W.src[w] = ringRow;
  }
  return W;
}

// Conv + SiLU of key head g's channels l .. l + 3 for rows t < 4 (zero for t ≥ k).
__device__ __forceinline__ void conv_rows(const Args& A, const Geo& G, const Window& W, int g, int l, int k, float4 (&out)[kVRows]) {
  prep::conv_group<kVRows, 1>(A, G, W, g, l, k, out);
}

// The value of a per-lane array at a runtime index, by selects (a runtime index into a register
// array would put it in local memory).
template <int N>
__device__ __forceinline__ float pick(const float (&a)[N], int i) {
  float v = 0.0f;
#pragma unroll
  for (int e = 0; e < N; ++e) v = e == i ? a[e] : v;
  return v;
}

// Warp 0: q and k of key head g, their norms and Gram entries, the keys record of (b, g) and the
// scalars of g's r value records.
__device__ __forceinline__ void keys_warp(const Args& A, const Geo& G, const Window& W, float* buf, int batch, int b, int g, int k, const TaskIn& I) {
  const int lane = tid_lin() & 31, l = 4 * lane;
  // Gates' inputs first (they load with the conv inputs): lane e < r·k takes value head e / k, row e % k.
  float bRaw = 0.0f, aRaw = 0.0f, aLogH = 0.0f, dtB = 0.0f;
  if (lane < G.r * k) {
    const int m = lane / k, t = lane - m * k;
    const float* bar = A.qkvz + (size_t)(I.row0 + t) * G.width + G.baCol + g * 2 * G.r;
    bRaw = bar[m], aRaw = bar[G.r + m], aLogH = A.aLog[g * G.r + m], dtB = A.dtBias[g * G.r + m];
  }
  float4 q[kVRows], kk[kVRows];
  const bool act = l < A.dk;
  if (act) {
    conv_rows(A, G, W, g, l, k, q);
    conv_rows(A, G, W, g, A.dk + l, k, kk);
  } else {
#pragma unroll
    for (int t = 0; t < kVRows; ++t) q[t] = kk[t] = fast::f4(0.0f);
  }
  // The 24 dots of the raw rows, in this order: q_t·q_t (0..3), k_t·k_t (4..7), k_s·q_t for s ≤ t
  // (8..17, in order of t), k_s·k_t for s < t (18..23); summed over the warp (butterfly: every
  // lane gets every total, the same bits in each).
  float dots[kDots];
  {
    int d = 8, e = 18;
#pragma unroll
    for (int t = 0; t < kVRows; ++t) {
      dots[t] = prep::dot4(q[t], q[t]);
      dots[4 + t] = prep::dot4(kk[t], kk[t]);
#pragma unroll
      for (int s = 0; s <= t; ++s) dots[d++] = prep::dot4(kk[s], q[t]);
#pragma unroll
      for (int s = 0; s < t; ++s) dots[e++] = prep::dot4(kk[s], kk[t]);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int d = 0; d < kDots; ++d) dots[d] += __shfl_xor_sync(0xffffffffu, dots[d], o);
  float fq[kVRows], fk[kVRows];
  const float rdk = 1.0f / sqrtf((float)A.dk);
#pragma unroll
  for (int t = 0; t < kVRows; ++t) {
    fq[t] = t < k ? rdk / sqrtf(dots[t] + 1e-6f) : 0.0f;
    fk[t] = t < k ? 1.0f / sqrtf(dots[4 + t] + 1e-6f) : 0.0f;
  }
  // Keys record of (b, g): k̂_t, q̂_t for t < 4 (rows ≥ k zero: their conv outputs and factors are).
  const int dkp = A.dk;  // d_k is a multiple of 4
  float* keys = buf + ((size_t)b * A.hk + g) * key_stride(A.dk);
  if (act) {
#pragma unroll
    for (int t = 0; t < kVRows; ++t) {
      prep::st4(keys + t * 2 * dkp + l, fast::scale4(fk[t], kk[t]));
      prep::st4(keys + t * 2 * dkp + dkp + l, fast::scale4(fq[t], q[t]));
    }
  }
  // The gates of lane e (value head e / k, row e % k): β and g.
  const float beta = sigmoidf_(bRaw), gate = -expf(aLogH) * softplusf_(aRaw + dtB);
  // The scalars of g's r value records: lane e writes scalars e and e + 32 (< 48).
  float* vals = buf + (size_t)batch * A.hk * key_stride(A.dk);
  const int dvp = A.dv;  // d_v is a multiple of 4
  for (int m = 0; m < G.r; ++m) {
    float gam[kVRows], bet[kVRows];
    float acc = 0.0f;
#pragma unroll
    for (int t = 0; t < kVRows; ++t) {
      const int src = min(m * k + t, 31);
      const float gt = __shfl_sync(0xffffffffu, gate, src), bt = __shfl_sync(0xffffffffu, beta, src);
      acc += t < k ? gt : 0.0f;
      gam[t] = acc, bet[t] = bt;
    }
    float* out = vals + ((size_t)b * A.hv + g * G.r + m) * value_stride(A.dv) + kVRows * dvp;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int e = lane + 32 * half;
      if (e >= kScalars) continue;
      float v = 0.0f;
      if (e < 16) {
        const int t = e & 3;
        if (t < k) v = e < 4 ? pick(bet, t) : e < 8 ? expf(pick(gam, t)) : e < 12 ? pick(gam, t) : 0.0f;
      } else {
        const int f = e & 15, s = f >> 2, t = f & 3;
        const bool kq = e >= 32;
        if (t < k && (kq ? s <= t : s < t)) {
          // The dot's index among the 24 (the order above).
          const int d = kq ? 8 + t * (t + 1) / 2 + s : 18 + (t - 1) * t / 2 + s;
          v = expf(pick(gam, t) - pick(gam, s)) * pick(fk, s) * (kq ? pick(fq, t) : pick(fk, t)) * pick(dots, d);
        }
      }
      out[e] = v;
    }
  }
}

// Warp 1: the v channels of key head g's r value heads, 4 per lane per turn, into their value
// records' v rows (rows ≥ k zero).
__device__ __forceinline__ void values_warp(const Args& A, const Geo& G, const Window& W, float* buf, int batch, int b, int g, int k) {
  const int lane = tid_lin() & 31;
  float* vals = buf + (size_t)batch * A.hk * key_stride(A.dk);
  const int dvp = A.dv;  // d_v is a multiple of 4
  for (int j0 = 4 * lane; j0 < G.r * A.dv; j0 += 4 * 32) {
    float4 v[kVRows];
    conv_rows(A, G, W, g, 2 * A.dk + j0, k, v);
    const int m = j0 / A.dv, j = j0 - m * A.dv;
    float* out = vals + ((size_t)b * A.hv + g * G.r + m) * value_stride(A.dv);
#pragma unroll
    for (int t = 0; t < kVRows; ++t) prep::st4(out + t * dvp + j, v[t]);
  }
}

__device__ __forceinline__ void vprep_entry(const Args& A, float* prep, int batch, int k) {
  let_next_kernel_start();  // gdn_verify_state may start streaming its heads' state (it waits for the records)
  const Geo G = geo_of(A);
  const bool ok = A.K <= fast::kMaxConv && A.maxK <= fast::kMaxRows && nthreads() == kVPrepThreads && gridDim.z == 1 &&
                  gridDim.y == (unsigned)A.hk && k >= 1 && k <= kVRows && k <= A.maxK && A.dk % 4 == 0 && A.dv % 4 == 0 && G.r * k <= 32;
  if (!ok) __trap();
  const int b = blockIdx.x, g = blockIdx.y;
  if (b >= batch || g >= A.hk) return;
  const TaskIn I = decode_task_in(A, b);
  if (I.slot < 0) return;
  if (I.nPend > A.maxK || I.nPend > I.P0) __trap();
  const Window W = window_of(A, G, I, k, A.pending != nullptr);
  if (tid_lin() < 32) keys_warp(A, G, W, prep, batch, b, g, k, I);
  else values_warp(A, G, W, prep, batch, b, g, k);
}

}  // namespace verify
}  // namespace gdn
