// Gated DeltaNet two-kernel decode, second kernel (gdn_decode_state): the state pass of a decode
// step whose row gdn_decode_prep (gdn-decode-prep.cuh) prepared. Layouts: ../KERNELS.md
// ("Two-kernel decode").
//
// Why: with the row's inputs ready, a CTA's only wait is one round of loads after its slot — its
// head's state and the prep record — as in the bare read-modify-write (bench/rmw-ceiling.cu,
// `head-reg-256`, which runs near the copy rate at batch 256). Each of 256 threads holds 16 rows × 4
// columns of the head in registers from its 16-byte loads to its 16-byte stores; the head needs
// three barriers: the prep record (and pending keys) landed, the 8 warps' dot products added,
// u and Σo² ready. 2 CTAs per SM (128 registers). Once its loads are out, a CTA asks L2 for the
// head of a CTA that starts a little later (prefetch_head_ahead, gdn-l2-ahead.cuh).
//
// Per head h of batch position b, with k̂, q̂, v, β, α, k̂·q̂ from the prep record and the slot's
// pending rows (carried mode) folded first, S ← e^{γ_{M−1}} S + Σ_q e^{γ_{M−1}−γ_q} k_q u_qᵀ:
//   a = Sᵀk̂, b = Sᵀq̂, u = β (v − α a), o = α b + (k̂·q̂) u, S ← α S + k̂ uᵀ,
//   y = normWeight ⊙ o / √(mean(o²) + eps) ⊙ SiLU(z).
//
// Two entry points (gdn-decode.cu): gdn_decode_state for any step, gdn_decode_state_plain for a
// step without a pending table (state_entry).
//
// Launch: grid [batch, H_v], 256 threads, the dynamic shared memory of state_smem_floats()
// (gdn-decode-launch.ts computes the same). Thread (warp w, lane l) holds columns 4l .. 4l + 3 of
// rows w·R .. w·R + R − 1 (R = ⌈d_k / 8⌉ rounded up to 4, at most 16). Takes maxK ≤ 8, d_k ≤ 128,
// d_v ≤ 128 and a multiple of 4; else traps.
#pragma once
#include "gdn-decode-prep.cuh"
#include "gdn-l2-ahead.cuh"
#include "gdn-pipe.cuh"

#ifndef GDN_STATE_MAXNREG
#define GDN_STATE_MAXNREG 128  // 2 CTAs of 256 threads per SM
#endif
#ifndef GDN_STATE_CS
// Bit 0: the state's loads evict-first (ld.global.cs); bit 1: its stores (st.global.cs). The stores
// (2): on the H200 at the 80B shape they left decode at batch 256 unchanged, sped it up at 32 and
// sped up carried decode; the loads too (3) lost at 256 (docs/benchmarks.md, GDN decode).
#define GDN_STATE_CS 2
#endif

namespace gdn {
namespace decode {

constexpr int kThreads = 256;
constexpr int kCtasPerSm = 65536 / (kThreads * GDN_STATE_MAXNREG);  // an SM's 64 Ki registers: 2 at 128
constexpr int kWarps = 8;
constexpr int kRows = 16;    // rows per warp at most (d_k ≤ 128)
constexpr int kMaxDv = 128;  // 4 columns per lane

// Dynamic shared memory, in floats: the head's prep record, the pending keys [mb][d_kp], the
// warps' dot products [2][8][d_vp], u [d_vp], the warps' Σo² [8].
__host__ __device__ __forceinline__ int state_smem_floats(int dk, int dv, int maxK) {
  return prep_stride(dk, dv) + fast::fast_mb_alloc(maxK) * fast::pad4(dk) + (2 * kWarps + 1) * fast::pad4(dv) + kWarps;
}

struct SLay {
  float* rec;   // the prep record: k̂ [dkp], q̂ [dkp], v [dvp], β, α, k̂·q̂
  float* kf;    // [mb][dkp] pending keys
  float* sums;  // [2][kWarps][dvp]
  float* usm;   // [dvp]
  float* osq;   // [kWarps]
  int dkp, dvp;
};

__device__ __forceinline__ SLay state_lay(const Args& A) {
  SLay Q;
  Q.dkp = fast::pad4(A.dk);
  Q.dvp = fast::pad4(A.dv);
  Q.rec = fast::dyn_smem();
  Q.kf = Q.rec + prep_stride(A.dk, A.dv);
  Q.sums = Q.kf + fast::fast_mb_alloc(A.maxK) * Q.dkp;
  Q.usm = Q.sums + 2 * kWarps * Q.dvp;
  Q.osq = Q.usm + Q.dvp;
  return Q;
}

// This thread's part of the head: rows r0 .. r0 + nr − 1 (those < d_k), columns 4·lane .. + 3.
struct Part {
  int lane, warp, r0, nr;
  bool act;  // 4·lane < d_v
};

// W warps share the d_k rows (at most MaxRows each; 0: no cap): this kernel's 8 warps of ≤ 16
// rows, and the verify state pass's 4 warps (gdn-verify-state.cuh; its check bounds d_k).
template <int W, int MaxRows>
__device__ __forceinline__ Part part_for(const Args& A) {
  Part p;
  const int tid = tid_lin();
  p.lane = tid & 31;
  p.warp = tid >> 5;
  const int nr = fast::pad4((A.dk + W - 1) / W);
  p.nr = MaxRows > 0 ? min(MaxRows, nr) : nr;
  p.r0 = p.warp * p.nr;
  p.act = 4 * p.lane < A.dv;
  return p;
}

__device__ __forceinline__ bool has_row(const Args& A, const Part& p, int r) { return p.act && r < p.nr && p.r0 + r < A.dk; }
using fast::f4;  // the float4 helpers (gdn-fast-layout.cuh), as decode::… for this file's users
using fast::fma4;
using fast::scale4;

__device__ __forceinline__ float4 ld_state(const float* p) {
#if (GDN_STATE_CS & 1) && defined(__CUDA_ARCH__)
  return __ldcs(reinterpret_cast<const float4*>(p));
#else
  return *reinterpret_cast<const float4*>(p);
#endif
}
__device__ __forceinline__ void st_state(float* p, const float4& v) {
#if (GDN_STATE_CS & 2) && defined(__CUDA_ARCH__)
  __stcs(reinterpret_cast<float4*>(p), v);
#else
  *reinterpret_cast<float4*>(p) = v;
#endif
}

// The thread's rows of the head, every load issued before any is used.
__device__ __forceinline__ void load_state(const Args& A, const Part& p, const float* headS, float4 (&s)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) s[r] = has_row(A, p, r) ? ld_state(headS + (size_t)(p.r0 + r) * A.dv + 4 * p.lane) : f4(0.0f);
}

__device__ __forceinline__ void store_state(const Args& A, const Part& p, float* headS, const float4 (&s)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    if (has_row(A, p, r)) st_state(headS + (size_t)(p.r0 + r) * A.dv + 4 * p.lane, s[r]);
}

// Asks L2 for the state head of the CTA `eighths` / 8 of the resident CTAs (SMs × ctasPerSm) after
// this one (gdn-l2-ahead.cuh), by threads 0..3, when that CTA reads one: a real slot and, for a
// fold (naTab), accepted rows. Called once the CTA's own state loads are out.
__device__ __forceinline__ void prefetch_head_ahead(const Args& A, int batch, int ctasPerSm, int eighths, const uint32_t* naTab = nullptr) {
  const int t = tid_lin();
  int b, h;
  if (t >= 4 || !cta_ahead(batch, A.hv, gdn_ahead::ahead_ctas(ctasPerSm, eighths), b, h)) return;
  const int slot = A.slots[b];
  if (slot < 0 || (naTab && naTab[b] == 0)) return;
  gdn_ahead::prefetch_l2_part(pipe::head_state(A, slot, h), 4u * (unsigned)(A.dk * A.dv), t, 4);
}

// The head's prep record into shared memory (16-byte cp.async; the record's floats are a multiple of 4).
__device__ __forceinline__ void copy_record(const float* src, float* dst, int n) {
  for (int e = tid_lin(); e < n / 4; e += kThreads) fast::cp_async16(dst + 4 * e, src + 4 * e);
}

// The pending rows' u for this thread's columns and their γ, loaded before the first barrier so
// that they land with the state (4-byte loads: stash rows are d_k + d_v + 1 floats apart).
template <int MB>
struct Pending {
  float4 u[MB > 0 ? MB : 1];
  float gam[MB > 0 ? MB : 1];
};
template <int MB>
__device__ __forceinline__ void load_pending(const Args& A, const Geo& G, const Part& p, const float* pendSh, int M, Pending<MB>& U) {
#pragma unroll
  for (int q = 0; q < MB; ++q) {
    const float* row = pendSh + (size_t)q * G.stashRow;
    const float* src = row + A.dk + 4 * p.lane;
    U.u[q] = (q < M && p.act) ? make_float4(src[0], src[1], src[2], src[3]) : f4(0.0f);
    U.gam[q] = q < M ? row[A.dk + A.dv] : 0.0f;
  }
}

// S ← c0·S + Σ_q k_q (w_q u_q)ᵀ over the thread's rows, w_q = e^{γ_{M−1}−γ_q}, c0 = e^{γ_{M−1}}
// (kf: the pending keys, zero past M). pipe::pend_coef_of computes the same weights; a build that
// called it here (with the prep calling conv_source per tap) grew this kernel's stack frame and
// spills and made carried decode slower on the H200 (docs/benchmarks.md, GDN decode), so the
// weights are computed in place.
template <int MB>
__device__ __forceinline__ void fold_pending(const Args& A, const SLay& Q, const Part& p, int M, Pending<MB>& U, float4 (&s)[kRows]) {
  float gl = 0.0f;
#pragma unroll
  for (int q = 0; q < MB; ++q)
    if (q == M - 1) gl = U.gam[q];
  const float c0 = expf(gl);
#pragma unroll
  for (int q = 0; q < MB; ++q) U.u[q] = q < M ? scale4(expf(gl - U.gam[q]), U.u[q]) : f4(0.0f);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (!has_row(A, p, r)) continue;
    float4 x = scale4(c0, s[r]);
#pragma unroll
    for (int q = 0; q < MB; ++q) fma4(Q.kf[q * Q.dkp + p.r0 + r], U.u[q], x);
    s[r] = x;
  }
}

// The row: dot products (the 8 warps' parts added in warp order, so every column gets the same
// bits whatever the timing), u, o, the commit from registers and the gated RMSNorm.
__device__ __forceinline__ void run_row(const Args& A, const Task& T, const SLay& Q, const Part& p, int h, float z, float nw, float* headS,
                                        float4 (&s)[kRows]) {
  const int dkp = Q.dkp, dv = A.dv, dvp = Q.dvp;
  const float* kh = Q.rec;
  const float* qh = Q.rec + dkp;
  const float* vh = Q.rec + 2 * dkp;
  const float beta = Q.rec[2 * dkp + dvp], alpha = Q.rec[2 * dkp + dvp + 1], kq = Q.rec[2 * dkp + dvp + 2];
  float4 a = f4(0.0f), b = f4(0.0f);
#pragma unroll
  for (int r0 = 0; r0 < kRows; r0 += 4) {
    const int i0 = p.r0 + r0;
    if (r0 >= p.nr || i0 >= dkp) break;  // k̂ and q̂ are zero from d_k to d_kp
    const float4 kk = fast::ld4s(kh + i0), qq = fast::ld4s(qh + i0);
    fma4(kk.x, s[r0], a), fma4(kk.y, s[r0 + 1], a), fma4(kk.z, s[r0 + 2], a), fma4(kk.w, s[r0 + 3], a);
    fma4(qq.x, s[r0], b), fma4(qq.y, s[r0 + 1], b), fma4(qq.z, s[r0 + 2], b), fma4(qq.w, s[r0 + 3], b);
  }
  if (p.act) {
    *reinterpret_cast<float4*>(Q.sums + p.warp * dvp + 4 * p.lane) = a;
    *reinterpret_cast<float4*>(Q.sums + (kWarps + p.warp) * dvp + 4 * p.lane) = b;
  }
  __syncthreads();
  const int j = tid_lin();
  float o = 0.0f;
  if (j < dv) {
    float sa = 0.0f, sb = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sa += Q.sums[w * dvp + j], sb += Q.sums[(kWarps + w) * dvp + j];
    const float u = beta * (vh[j] - alpha * sa);
    o = alpha * sb + kq * u;
    Q.usm[j] = u;
  }
  const float ss = warp_sum_to_lane0(o * o);
  if (p.lane == 0) Q.osq[p.warp] = ss;
  __syncthreads();
  if (p.act) {
    const float4 u4 = fast::ld4s(Q.usm + 4 * p.lane);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (!has_row(A, p, r)) continue;
      float4 x = scale4(alpha, s[r]);
      fma4(kh[p.r0 + r], u4, x);
      s[r] = x;
    }
    store_state(A, p, headS, s);
  }
  if (j < dv) {
    float tot = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) tot += Q.osq[w];
    const float inv = 1.0f / sqrtf(tot / (float)dv + A.eps);
    store_y(A, (size_t)T.row0 * A.hv * dv + (size_t)h * dv + j, nw * o * inv * siluf_(z));
  }
}

template <int MB>
__device__ __forceinline__ void run_head(const Args& A, const Geo& G, const Task& T, const SLay& Q, const Part& p, float z, float nw, float* headS,
                                         float4 (&s)[kRows]) {
  const int h = T.h0, M = T.nPendFold;
  const float* pendSh = T.pendK + (size_t)h * A.maxK * G.stashRow;
  Pending<MB> U;
  if (MB > 0) {
    load_pending<MB>(A, G, p, pendSh, M, U);
    fast::Lay L;
    L.kf = Q.kf;
    L.dkp = Q.dkp;
    fast::pending_keys(A, G, pendSh, M, MB, L);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
  __syncthreads();  // the prep record and the pending keys
  if (MB > 0) fold_pending<MB>(A, Q, p, M, U, s);
  run_row(A, T, Q, p, h, z, nw, headS, s);
}

__device__ __forceinline__ void check_state(const Args& A) {
  const bool ok = A.maxK <= fast::kMaxRows && A.dk <= kWarps * kRows && A.dv % 4 == 0 && A.dv <= kMaxDv && nthreads() == kThreads &&
                  fast::dyn_smem_bytes() >= 4u * (unsigned)state_smem_floats(A.dk, A.dv, A.maxK);
  if (!ok) __trap();
}

// Carried: the slot's pending rows may be folded first (gdn_decode_state). Not carried
// (gdn_decode_state_plain, a step without a pending table; traps when given one): only the
// no-pending path is compiled, so the carried paths' registers (their pending rows' u and γ, which
// spill at 128 registers) cost it nothing; it measured faster on plain decode at batch 256 on the
// H200 (docs/benchmarks.md, GDN decode).
template <bool Carried>
__device__ __forceinline__ void state_entry(const Args& A, const float* prep, int batch) {
  check_state(A);
  if (!Carried && A.pending != nullptr) __trap();
  int b, h;
  cta_coords(batch, A.hv, b, h);
  if (b >= batch || h >= A.hv) return;
  const TaskIn I = decode_task_in(A, b);
  if (I.slot < 0) return;
  const Part p = part_for<kWarps, kRows>(A);
  float* headS = pipe::head_state(A, I.slot, h);
  float4 s[kRows];
  load_state(A, p, headS, s);
  prefetch_head_ahead(A, batch, kCtasPerSm, GDN_STATE_AHEAD_EIGHTHS);
  // Launched with an early start after gdn_decode_prep: the state is in flight; the record is the prep's.
  wait_previous_kernel();
  const SLay Q = state_lay(A);
  copy_record(prep + ((size_t)b * A.hv + h) * prep_stride(A.dk, A.dv), Q.rec, prep_stride(A.dk, A.dv));
  const Geo G = geo_of(A);
  Task T;
  if (!task_of(A, G, h, I, 1, true, false, T) || T.nh != 1 || T.nPendFold > A.maxK) __trap();
  // z and the norm's weight of this thread's column j (threads j < d_v), loaded with the state.
  const int j = tid_lin(), m = h - T.g * G.r;
  const bool col = j < A.dv;
  const float z = col ? A.qkvz[(size_t)T.row0 * G.width + T.g * G.grp + 2 * A.dk + (G.r + m) * A.dv + j] : 0.0f;
  const float nw = col ? A.normWeight[j] : 0.0f;
  if (!Carried || T.nPendFold == 0) run_head<0>(A, G, T, Q, p, z, nw, headS, s);
  else if (T.nPendFold <= 4) run_head<4>(A, G, T, Q, p, z, nw, headS, s);
  else run_head<8>(A, G, T, Q, p, z, nw, headS, s);
}

}  // namespace decode
}  // namespace gdn
