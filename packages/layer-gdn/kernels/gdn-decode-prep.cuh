// Gated DeltaNet two-kernel decode, first kernel (gdn_decode_prep): per (batch position, key head)
// of a decode step, everything its rows need but the state — the conv and SiLU of the key head's
// channels, the gates, the L2 norms of q and k — written to the prep buffer as one record per value
// head, and the conv ring committed. Layouts: ../KERNELS.md ("Two-kernel decode").
//
// Why a kernel of its own: a decode CTA that holds its head's state while its prologue runs
// keeps 64 KiB of registers or shared memory waiting on that prologue's chain of small loads
// (tables, then conv inputs), and under a saturated memory system every trip of the chain
// queues behind the state's own loads (docs/benchmarks.md, GDN decode: a probe of the state pass
// without its prologue ran far faster than with it). Why a CTA per key head: q and k are
// normalised once per key head and the CTA owns its key head's channels (no ring race to reason
// about). Why two warps and float4 lanes (gdn-prep-window.cuh): warp 0 holds the key head's q and
// k, 4 channels of each per lane, so Σq², Σk², k·q reduce inside the warp, and warp 1 the v
// channels; no shared memory, no barrier. (The version before, 128 threads with the conv outputs
// in shared memory, was slower: docs/benchmarks.md, GDN decode.)
//
// Launch: grid [batch, H_k], kPrepThreads = 64 threads, no shared memory. Per real position b and
// value head h of key head g it writes prep[(b·H_v + h)·stride ..]: k̂ [d_k], q̂ [d_k] (with
// 1/√d_k), v [d_v], then β, α = e^g, k̂·q̂, 0 (stride = 2·d_kp + d_vp + 4; d_k and d_v are
// multiples of 4 here). In carried mode the pending rows' conv inputs go to the ring here too;
// their state fold is gdn_decode_state's.
#pragma once
#include "gdn-common.cuh"
#include "gdn-fast.cuh"
#include "gdn-prep-window.cuh"

namespace gdn {
namespace decode {

constexpr int kPrepThreads = 64;  // warp 0: q and k channels; warp 1: v channels
#ifndef GDN_PREP_MINB
#define GDN_PREP_MINB 12  // 80 registers, no spills with the fast SiLU; faster decode than 8 CTAs (106 registers); 16 (56) measured the same
#endif
constexpr int kPrepCtasPerSm = GDN_PREP_MINB;  // CTAs per SM its registers are capped for

__host__ __device__ __forceinline__ int prep_stride(int dk, int dv) { return 2 * fast::pad4(dk) + fast::pad4(dv) + 4; }

__device__ __forceinline__ void check_prep(const Args& A, const Geo& G) {
  const bool ok = A.K <= fast::kMaxConv && A.maxK <= fast::kMaxRows && nthreads() == kPrepThreads && gridDim.z == 1 &&
                  gridDim.y == (unsigned)A.hk && A.dk % 4 == 0 && A.dv % 4 == 0 && G.r <= 32;
  if (!ok) __trap();
}

// The taps' positions P0 − K + 1 .. P0 (prep::Window): tap t reads the row itself (p = P0), the conv
// stash (a pending row, p ≥ P0 − n) or the ring; a negative position reads zero. The ring takes the
// pending rows and the row (positions P0 − n .. P0 inside the window; a ring of K rows by position,
// so the entries written are not among those read). Ring and conv stash rows by position, walked
// from p0 = P0 − K + 1 with one division each: p0 mod K is (P0 + 1) mod K, p0 mod R is
// (P0 + 2R − K + 1) mod R (R = 2·maxK ≥ 2, K ≤ 4: non-negative).
using Taps = prep::Window<fast::kMaxConv>;

__device__ __forceinline__ Taps taps_of(const Args& A, const Geo& G, const TaskIn& I) {
  Taps T;
  const int R = conv_stash_rows(A), P0 = I.P0;
  const int p0 = P0 - A.K + 1;
  int rk = (P0 + 1) % A.K, rr = (P0 + 2 * R - A.K + 1) % R;
#pragma unroll
  for (int t = 0; t < fast::kMaxConv; ++t, rk = rk + 1 == A.K ? 0 : rk + 1, rr = rr + 1 == R ? 0 : rr + 1) {
    const int p = p0 + t;
    T.src[t] = nullptr, T.row[t] = false, T.dst[t] = nullptr;
    if (t >= A.K || p < 0) continue;
    float* ring = A.convRing + ((size_t)I.slot * A.K + rk) * G.convDim;
    if (p == P0) T.src[t] = A.qkvz + (size_t)I.row0 * G.width, T.row[t] = true, T.dst[t] = ring;
    else if (p >= P0 - I.nPend) T.src[t] = A.convStash + ((size_t)I.slot * R + rr) * G.convDim, T.dst[t] = ring;
    else T.src[t] = ring;
  }
  return T;
}

// Warp 0: q and k of key head g, their norms, the gates; the k̂, q̂ and scalars of g's r records.
__device__ __forceinline__ void prep_keys(const Args& A, const Geo& G, const Taps& T, float* buf, int b, int g, const TaskIn& I) {
  const int lane = tid_lin() & 31, l = 4 * lane;
  // The gates' inputs load with the conv inputs: lane m < r takes value head g·r + m.
  float bRaw = 0.0f, aRaw = 0.0f, aLogH = 0.0f, dtB = 0.0f;
  if (lane < G.r) {
    const float* bar = A.qkvz + (size_t)I.row0 * G.width + G.baCol + g * 2 * G.r;
    bRaw = bar[lane], aRaw = bar[G.r + lane], aLogH = A.aLog[g * G.r + lane], dtB = A.dtBias[g * G.r + lane];
  }
  const bool act = l < A.dk;
  float4 q[1] = {fast::f4(0.0f)}, k[1] = {fast::f4(0.0f)};
  if (act) {
    prep::conv_group<1, 0>(A, G, T, g, l, 1, q);
    prep::conv_group<1, 0>(A, G, T, g, A.dk + l, 1, k);
  }
  // Σq², Σk², k·q over the warp (butterfly: every lane gets the totals, the same bits in each).
  float sq = prep::dot4(q[0], q[0]), sk = prep::dot4(k[0], k[0]), kq = prep::dot4(k[0], q[0]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    sq += __shfl_xor_sync(0xffffffffu, sq, o);
    sk += __shfl_xor_sync(0xffffffffu, sk, o);
    kq += __shfl_xor_sync(0xffffffffu, kq, o);
  }
  const float fk = 1.0f / sqrtf(sk + 1e-6f);
  const float fq = (1.0f / sqrtf((float)A.dk)) / sqrtf(sq + 1e-6f);
  const int dkp = A.dk, dvp = A.dv, stride = prep_stride(A.dk, A.dv);  // d_k, d_v multiples of 4
  const float4 kh = fast::scale4(fk, k[0]), qh = fast::scale4(fq, q[0]);
  for (int m = 0; m < G.r; ++m) {
    float* out = buf + ((size_t)b * A.hv + g * G.r + m) * stride;
    if (act) prep::st4(out + l, kh), prep::st4(out + dkp + l, qh);
  }
  if (lane < G.r) {
    const float beta = sigmoidf_(bRaw), alpha = expf(-expf(aLogH) * softplusf_(aRaw + dtB));
    prep::st4(buf + ((size_t)b * A.hv + g * G.r + lane) * stride + 2 * dkp + dvp, make_float4(beta, alpha, fk * fq * kq, 0.0f));
  }
}

// Warp 1: the v channels of g's r value heads, 4 per lane per turn, into their records.
__device__ __forceinline__ void prep_values(const Args& A, const Geo& G, const Taps& T, float* buf, int b, int g) {
  const int lane = tid_lin() & 31;
  const int dkp = A.dk, stride = prep_stride(A.dk, A.dv);
  for (int j0 = 4 * lane; j0 < G.r * A.dv; j0 += 4 * 32) {
    float4 v[1];
    prep::conv_group<1, 0>(A, G, T, g, 2 * A.dk + j0, 1, v);
    const int m = j0 / A.dv, j = j0 - m * A.dv;
    prep::st4(buf + ((size_t)b * A.hv + g * G.r + m) * stride + 2 * dkp + j, v[0]);
  }
}

__device__ __forceinline__ void prep_entry(const Args& A, float* buf, int batch) {
  let_next_kernel_start();  // gdn_decode_state may start loading its heads' state (it waits for the records)
  const Geo G = geo_of(A);
  check_prep(A, G);
  const int b = blockIdx.x, g = blockIdx.y;
  if (b >= batch || g >= A.hk) return;
  const TaskIn I = decode_task_in(A, b);
  if (I.slot < 0) return;
  if (I.nPend > A.maxK || I.nPend > I.P0) __trap();
  const Taps T = taps_of(A, G, I);
  if (tid_lin() < 32) prep_keys(A, G, T, buf, b, g, I);
  else prep_values(A, G, T, buf, b, g);
}

}  // namespace decode
}  // namespace gdn
