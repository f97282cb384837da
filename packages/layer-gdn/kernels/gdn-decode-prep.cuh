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
// The gates' raw inputs b and a: from the row's in_proj_ba columns in qkvz, or, where the layer
// runs in_proj_ba apart from in_proj_qkvz (block-FP8 checkpoints keep in_proj_ba in the row type,
// so the two cannot stack into one GEMM: gdn-weights.ts inputProjections), made here from the
// layer's input row (`GateRows`): two warps more, warp 2 the key head's r rows of b and warp 3 its
// r rows of a, each lane its 16-byte vectors of x and of the weight row in order, then the warp's
// butterfly. That GEMM's launch (a cuBLAS kernel of 2·H_v columns, without early start) is then
// not in the step; its 2·r·D weights per CTA load beside the conv inputs.
//
// Launch: grid [batch, H_k], kPrepThreads = 64 threads (gdn_decode_prep_gates: kPrepThreadsGates
// = 128), no shared memory. Per real position b and value head h of key head g it writes
// prep[(b·H_v + h)·stride ..]: k̂ [d_k], q̂ [d_k] (with 1/√d_k), v [d_v], then β, α = e^g, k̂·q̂, 0
// (stride = 2·d_kp + d_vp + 4; d_k and d_v are multiples of 4 here). In carried mode the pending rows' conv inputs go to the ring here too;
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
constexpr int kPrepThreadsGates = 128;  // gdn_decode_prep_gates: and warps 2, 3, the gates' raw inputs from the input row (GateRows)
// Its CTAs a multiprocessor: 96 registers (at 80, as many threads a multiprocessor as
// gdn_decode_prep's, the warps' two paths together spilled).
constexpr int kPrepGatesCtasPerSm = 5;

// in_proj_ba where the prep makes the gates' raw inputs (w non-null): the layer's input rows x
// [rows][hidden] and the weight [2·H_v][hidden] (per key head g: b of its r value heads, then a),
// both of element type `code` (metrale::ElementCode, the layer's row type: bf16 or f16, as only
// block-FP8 checkpoints, which take 16-bit rows, keep in_proj_ba apart).
struct GateRows {
  const void* x;
  const void* w;
  int hidden;
  int code;
};

__host__ __device__ __forceinline__ int prep_stride(int dk, int dv) { return 2 * fast::pad4(dk) + fast::pad4(dv) + 4; }

// The scalars (β, α, k̂·q̂, 0) of position b's record for value head h (d_k, d_v multiples of 4).
__device__ __forceinline__ float* record_scalars(const Args& A, float* buf, int b, int h) {
  return buf + ((size_t)b * A.hv + h) * prep_stride(A.dk, A.dv) + 2 * A.dk + A.dv;
}

__device__ __forceinline__ void check_prep(const Args& A, const Geo& G, const GateRows& R, bool gates) {
  const bool ok = A.K <= fast::kMaxConv && A.maxK <= fast::kMaxRows && nthreads() == (gates ? kPrepThreadsGates : kPrepThreads) &&
                  gridDim.z == 1 && gridDim.y == (unsigned)A.hk && A.dk % 4 == 0 && A.dv % 4 == 0 && G.r <= 32 &&
                  (gates ? R.w != nullptr && R.x != nullptr && R.hidden > 0 && (R.code == metrale::kBF16 || R.code == metrale::kF16) : R.w == nullptr);
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

// Warp 0: q and k of key head g, their norms, the gates (unless warps 2 and 3 make them:
// `gatesHere` false); the k̂, q̂ and scalars of g's r records.
__device__ __forceinline__ void prep_keys(const Args& A, const Geo& G, const Taps& T, float* buf, int b, int g, const TaskIn& I, bool gatesHere) {
  const int lane = tid_lin() & 31, l = 4 * lane;
  // The gates' inputs load with the conv inputs: lane m < r takes value head g·r + m.
  float bRaw = 0.0f, aRaw = 0.0f, aLogH = 0.0f, dtB = 0.0f;
  if (gatesHere && lane < G.r) {
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
  const int dkp = A.dk, stride = prep_stride(A.dk, A.dv);  // d_k a multiple of 4
  const float4 kh = fast::scale4(fk, k[0]), qh = fast::scale4(fq, q[0]);
  for (int m = 0; m < G.r; ++m) {
    float* out = buf + ((size_t)b * A.hv + g * G.r + m) * stride;
    if (act) prep::st4(out + l, kh), prep::st4(out + dkp + l, qh);
  }
  if (lane < G.r) {
    float* sc = record_scalars(A, buf, b, g * G.r + lane);
    if (gatesHere) {
      const float beta = sigmoidf_(bRaw), alpha = expf(-expf(aLogH) * softplusf_(aRaw + dtB));
      prep::st4(sc, make_float4(beta, alpha, fk * fq * kq, 0.0f));
    } else {
      *reinterpret_cast<float2*>(sc + 2) = make_float2(fk * fq * kq, 0.0f);
    }
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

// Σ_d x[d]·w[d] by one warp, every lane getting the total: lane l takes the 16-byte vectors l,
// l + 32, … of both rows in order (kAhead of them loaded before the first is used), each vector's
// elements in order by fma, or the elements l, l + 32, … where a row cannot take vectors; then the
// xor butterfly. A row's sum does not depend on the batch it is in.
template <typename E>
__device__ __forceinline__ float warp_row_dot(const E* __restrict__ x, const E* __restrict__ w, int D, int lane) {
  constexpr int V = 16 / sizeof(E);
  constexpr int kAhead = 8;
  float acc = 0.0f;
  if (D % V == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 && (reinterpret_cast<uintptr_t>(w) & 15) == 0) {
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    const int n = D / V;
    for (int c0 = lane; c0 < n; c0 += 32 * kAhead) {
      uint4 xs[kAhead], ws[kAhead];
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        const int c = c0 + 32 * u;
        xs[u] = c < n ? __ldg(xv + c) : make_uint4(0u, 0u, 0u, 0u);
        ws[u] = c < n ? __ldg(wv + c) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int u = 0; u < kAhead; ++u) {
        if (c0 + 32 * u >= n) break;
        const E* xe = reinterpret_cast<const E*>(&xs[u]);
        const E* we = reinterpret_cast<const E*>(&ws[u]);
#pragma unroll
        for (int e = 0; e < V; ++e) acc = fmaf(metrale::Element<E>::load(xe, e), metrale::Element<E>::load(we, e), acc);
      }
    }
  } else {
    for (int d = lane; d < D; d += 32) acc = fmaf(metrale::Element<E>::load(x, d), metrale::Element<E>::load(w, d), acc);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  return acc;
}

// Warps 2 (b: β) and 3 (a: α) with GateRows: the r raw inputs of key head g's value heads from the
// input row of position b, lane m keeping value head g·r + m's; it writes that record's β or α.
template <typename E>
__device__ __forceinline__ void prep_gates(const Args& A, const Geo& G, const GateRows& R, float* buf, int b, int g, const TaskIn& I, bool alpha) {
  const int lane = tid_lin() & 31;
  const E* x = static_cast<const E*>(R.x) + (size_t)I.row0 * R.hidden;
  const E* w = static_cast<const E*>(R.w) + (size_t)(g * 2 * G.r + (alpha ? G.r : 0)) * R.hidden;
  float raw = 0.0f;
  for (int m = 0; m < G.r; ++m) {
    const float t = warp_row_dot<E>(x, w + (size_t)m * R.hidden, R.hidden, lane);
    if (lane == m) raw = t;
  }
  if (lane < G.r) {
    const int h = g * G.r + lane;
    float* sc = record_scalars(A, buf, b, h);
    if (alpha) sc[1] = expf(-expf(A.aLog[h]) * softplusf_(raw + A.dtBias[h]));
    else sc[0] = sigmoidf_(raw);
  }
}

// Gates: with GateRows (gdn_decode_prep_gates: kPrepThreadsGates threads, warps 2 and 3 making
// the gates' raw inputs), else without (gdn_decode_prep: kPrepThreads, R.w must be null).
template <bool Gates>
__device__ __forceinline__ void prep_entry(const Args& A, float* buf, int batch, const GateRows& R) {
  let_next_kernel_start();  // gdn_decode_state may start loading its heads' state (it waits for the records)
  const Geo G = geo_of(A);
  check_prep(A, G, R, Gates);
  const int b = blockIdx.x, g = blockIdx.y;
  if (b >= batch || g >= A.hk) return;
  const TaskIn I = decode_task_in(A, b);
  if (I.slot < 0) return;
  if (I.nPend > A.maxK || I.nPend > I.P0) __trap();
  const int warp = tid_lin() >> 5;
  if (Gates && warp >= 2) {
    const bool alpha = warp == 3;
    if (R.code == metrale::kBF16) prep_gates<metrale::bf16>(A, G, R, buf, b, g, I, alpha);
    else prep_gates<metrale::f16>(A, G, R, buf, b, g, I, alpha);
    return;
  }
  const Taps T = taps_of(A, G, I);
  if (warp == 0) prep_keys(A, G, T, buf, b, g, I, !Gates);
  else prep_values(A, G, T, buf, b, g);
}

}  // namespace decode
}  // namespace gdn
