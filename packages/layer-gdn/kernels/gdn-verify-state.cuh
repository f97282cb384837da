// Gated DeltaNet two-kernel verify, second kernel (gdn_verify_state): the state pass of a verify
// step of k ≤ 4 rows whose rows gdn_verify_prep (gdn-verify-prep.cuh) prepared. Layouts:
// ../KERNELS.md ("Two-kernel verify").
//
// The thread layout and loads of gdn_decode_state (gdn-decode-state.cuh): each of 256 threads
// holds 16 rows × 4 columns of its head in registers from its 16-byte loads, issued as soon as it
// has read its slot. Carried mode folds the slot's pending rows and writes the folded state back
// (evict-first stores); then, from registers, the 2k dot products a_t = Sᵀk̂_t, b_t = Sᵀq̂_t (the 8
// warps' parts added in warp order), and per column the rows' scalars:
//   u_t = β_t (v_t − A_t a_t − Σ_{s<t} ck[s][t] u_s),  o_t = A_t b_t + Σ_{s≤t} cq[s][t] u_s,
// the gated norm of each o_t, and the stash rows k̂_t, u_t, Γ_t. The new rows never touch S, so a
// write-on-accept verify reads the state once and writes nothing of it.
//
// Launch: grid [batch, H_v], 256 threads, the dynamic shared memory of vstate_smem_floats()
// (gdn-verify-launch.ts computes the same). Takes maxK ≤ 8, d_k ≤ 128, d_v ≤ 128 and a multiple of 4.
#pragma once
#include "gdn-decode-state.cuh"
#include "gdn-verify-prep.cuh"

#ifndef GDN_VSTATE_MAXNREG
#define GDN_VSTATE_MAXNREG 128  // 2 CTAs of 256 threads per SM
#endif

namespace gdn {
namespace verify {

using decode::kRows;
using decode::kThreads;
using decode::kWarps;

// Dynamic shared memory, in floats: the keys record [8][d_kp], the value record [4·d_vp + 48], the
// pending keys [mb][d_kp], the warps' dot products [8][kWarps][d_vp] (a_t then b_t), Σo² [4][kWarps].
__host__ __device__ __forceinline__ int vstate_smem_floats(int dk, int dv, int maxK) {
  return key_stride(dk) + value_stride(dv) + fast::fast_mb_alloc(maxK) * fast::pad4(dk) + 2 * kVRows * kWarps * fast::pad4(dv) + kVRows * kWarps;
}

struct VLay {
  float* keys;  // k̂_t [dkp], q̂_t [dkp] for t < 4
  float* vals;  // v_t [dvp] for t < 4, then the scalars
  float* kf;    // [mb][dkp] pending keys
  float* sums;  // [8][kWarps][dvp]
  float* osq;   // [4][kWarps]
  int dkp, dvp;
};

__device__ __forceinline__ VLay vstate_lay(const Args& A) {
  VLay Q;
  Q.dkp = fast::pad4(A.dk);
  Q.dvp = fast::pad4(A.dv);
  Q.keys = fast::dyn_smem();
  Q.vals = Q.keys + key_stride(A.dk);
  Q.kf = Q.vals + value_stride(A.dv);
  Q.sums = Q.kf + fast::fast_mb_alloc(A.maxK) * Q.dkp;
  Q.osq = Q.sums + 2 * kVRows * kWarps * Q.dvp;
  return Q;
}

// Σ_r x_t[r0 + r] s[r] over the thread's rows for the 4 rows t of x (k̂ or q̂: stride 2·d_kp), to
// sums[base + t][warp] (x is zero past d_k and for rows ≥ k).
__device__ __forceinline__ void row_dots(const VLay& Q, const decode::Part& p, const float* x, int base, const float4 (&s)[kRows]) {
  float4 acc[kVRows];
#pragma unroll
  for (int t = 0; t < kVRows; ++t) acc[t] = decode::f4(0.0f);
#pragma unroll
  for (int r0 = 0; r0 < kRows; r0 += 4) {
    const int i0 = p.r0 + r0;
    if (r0 >= p.nr || i0 >= Q.dkp) break;
#pragma unroll
    for (int t = 0; t < kVRows; ++t) {
      const float4 xx = fast::ld4s(x + t * 2 * Q.dkp + i0);
      decode::fma4(xx.x, s[r0], acc[t]), decode::fma4(xx.y, s[r0 + 1], acc[t]);
      decode::fma4(xx.z, s[r0 + 2], acc[t]), decode::fma4(xx.w, s[r0 + 3], acc[t]);
    }
  }
  if (p.act) {
#pragma unroll
    for (int t = 0; t < kVRows; ++t) *reinterpret_cast<float4*>(Q.sums + ((base + t) * kWarps + p.warp) * Q.dvp + 4 * p.lane) = acc[t];
  }
}

template <int MB>
__device__ __forceinline__ void vrun_head(const Args& A, const Geo& G, const TaskIn& I, const VLay& Q, const decode::Part& p, int h, int k,
                                          const float (&z)[kVRows], float nw, float* headS, float4 (&s)[kRows]) {
  const int M = I.nPend;
  const float* pendSh = A.stash + (size_t)I.slot * G.stashSeq + (size_t)h * A.maxK * G.stashRow;
  decode::Pending<MB> U;
  if (MB > 0) {
    decode::load_pending<MB>(A, G, p, pendSh, M, U);
    fast::Lay L;
    L.kf = Q.kf;
    L.dkp = Q.dkp;
    fast::pending_keys(A, G, pendSh, M, MB, L);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
  __syncthreads();  // the records and the pending keys (every read of the pending stash rows is done)
  if (MB > 0) {
    decode::SLay D;
    D.kf = Q.kf;
    D.dkp = Q.dkp;
    decode::fold_pending<MB>(A, D, p, M, U, s);
    if (p.act) decode::store_state(A, p, headS, s);  // carried: the folded state is committed now
  }
  row_dots(Q, p, Q.keys, 0, s);
  row_dots(Q, p, Q.keys + Q.dkp, kVRows, s);
  __syncthreads();
  const int j = tid_lin(), dv = A.dv, dk = A.dk, dvp = Q.dvp;
  const float* sc = Q.vals + kVRows * dvp;
  float u[kVRows], o[kVRows];
  const bool col = j < dv;
#pragma unroll
  for (int t = 0; t < kVRows; ++t) {
    float sa = 0.0f, sb = 0.0f;
    if (col) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sa += Q.sums[(t * kWarps + w) * dvp + j], sb += Q.sums[((kVRows + t) * kWarps + w) * dvp + j];
    }
    float acc = sc[4 + t] * sa;
#pragma unroll
    for (int q = 0; q < t; ++q) acc = fmaf(sc[16 + 4 * q + t], u[q], acc);
    u[t] = col ? sc[t] * (Q.vals[t * dvp + j] - acc) : 0.0f;
    float oo = sc[4 + t] * sb;
#pragma unroll
    for (int q = 0; q <= t; ++q) oo = fmaf(sc[32 + 4 * q + t], u[q], oo);
    o[t] = col ? oo : 0.0f;
  }
#pragma unroll
  for (int t = 0; t < kVRows; ++t) {
    const float ss = warp_sum_to_lane0(o[t] * o[t]);
    if (p.lane == 0) Q.osq[t * kWarps + p.warp] = ss;
  }
  // The stash rows of the new rows (the pending ones were read before the first barrier).
  float* sh = A.stash + (size_t)I.slot * G.stashSeq + (size_t)h * A.maxK * G.stashRow;
  for (int t = 0; t < k; ++t) {
    float* srow = sh + (size_t)t * G.stashRow;
    if (col) srow[dk + j] = u[t];
    for (int i = j; i < dk; i += kThreads) srow[i] = Q.keys[t * 2 * Q.dkp + i];
    if (j == 0) srow[dk + dv] = sc[8 + t];
  }
  __syncthreads();
  if (col) {
#pragma unroll
    for (int t = 0; t < kVRows; ++t) {
      if (t >= k) break;
      float tot = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) tot += Q.osq[t * kWarps + w];
      const float inv = 1.0f / sqrtf(tot / (float)dv + A.eps);
      A.y[(size_t)(I.row0 + t) * A.hv * dv + (size_t)h * dv + j] = nw * o[t] * inv * siluf_(z[t]);
    }
  }
}

__device__ __forceinline__ void vstate_entry(const Args& A, const float* prep, int batch, int k) {
  const bool ok = A.maxK <= fast::kMaxRows && A.dk <= kWarps * kRows && A.dv % 4 == 0 && A.dv <= decode::kMaxDv && nthreads() == kThreads &&
                  k >= 1 && k <= kVRows && k <= A.maxK && fast::dyn_smem_bytes() >= 4u * (unsigned)vstate_smem_floats(A.dk, A.dv, A.maxK);
  if (!ok) __trap();
  int b, h;
  cta_coords(batch, A.hv, b, h);
  if (b >= batch || h >= A.hv) return;
  const TaskIn I = decode_task_in(A, b);
  if (I.slot < 0) return;
  if (I.nPend > A.maxK || I.nPend > I.P0) __trap();
  const decode::Part p = decode::part_of(A);
  float* headS = pipe::head_state(A, I.slot, h);
  float4 s[kRows];
  decode::load_state(A, p, headS, s);
  const VLay Q = vstate_lay(A);
  const Geo G = geo_of(A);
  const int g = h / G.r, m = h - g * G.r;
  decode::copy_record(prep + ((size_t)b * A.hk + g) * key_stride(A.dk), Q.keys, key_stride(A.dk));
  decode::copy_record(prep + (size_t)batch * A.hk * key_stride(A.dk) + ((size_t)b * A.hv + h) * value_stride(A.dv), Q.vals, value_stride(A.dv));
  // z of this thread's column for the rows, and the norm's weight, loaded with the state.
  const int j = tid_lin();
  const bool col = j < A.dv;
  float z[kVRows];
#pragma unroll
  for (int t = 0; t < kVRows; ++t) z[t] = (col && t < k) ? A.qkvz[(size_t)(I.row0 + t) * G.width + g * G.grp + 2 * A.dk + (G.r + m) * A.dv + j] : 0.0f;
  const float nw = col ? A.normWeight[j] : 0.0f;
  if (I.nPend == 0) vrun_head<0>(A, G, I, Q, p, h, k, z, nw, headS, s);
  else if (I.nPend <= 4) vrun_head<4>(A, G, I, Q, p, h, k, z, nw, headS, s);
  else vrun_head<8>(A, G, I, Q, p, h, k, z, nw, headS, s);
}

}  // namespace verify
}  // namespace gdn
