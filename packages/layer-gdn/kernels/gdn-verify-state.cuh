// Gated DeltaNet two-kernel verify, second kernel (gdn_verify_state): the state pass of a verify
// step of k ≤ 4 rows whose rows gdn_verify_prep (gdn-verify-prep.cuh) prepared. Layouts:
// ../KERNELS.md ("Two-kernel verify").
//
// Why it streams the state instead of holding it (as gdn_decode_state does): a verify never
// updates S with its rows, so nothing waits for the whole head — each chunk of S is folded
// (carried), written back, and added into the rows' dot products as it lands. Holding the head
// in registers (256 threads × 16 rows) left 2 CTAs per SM whose long tail (8 dot products per
// column, 4 rows of scalars, norms, stash) had no load in flight (docs/benchmarks.md, GDN verify
// and fold). Here each of 128 threads owns 4 columns of ⌈d_k / 4⌉₄ rows and streams them in
// chunks of 4 rows through its own slots of a shared-memory ring of kStages chunks (16-byte
// cp.async, kStages − 1 in flight, a copy group per chunk: a thread waits for its own copies only,
// no barrier). Through the ring the state pass measured faster than with 2 chunks in flight in
// registers.

// Per head h of batch position b: carried mode folds the slot's pending rows,
// S ← e^{γ_{M−1}} S + Σ_q e^{γ_{M−1}−γ_q} k_q u_qᵀ, and writes S back (evict-first stores); then
//   a_t = Sᵀk̂_t, b_t = Sᵀq̂_t (the 4 warps' parts added in warp order),
//   u_t = β_t (v_t − A_t a_t − Σ_{s<t} ck[s][t] u_s),  o_t = A_t b_t + Σ_{s≤t} cq[s][t] u_s,
// y_t the gated norm of o_t, and the stash rows k̂_t, u_t, Γ_t (after the pending rows were read).
//
// Launch: grid [batch, H_v], kVThreads threads, the dynamic shared memory of vstate_smem_floats()
// (gdn-verify-launch.ts computes the same). Takes maxK ≤ 8, d_k ≤ 128, d_v ≤ 128 and a multiple of 4.
#pragma once
#include "gdn-decode-state.cuh"
#include "gdn-verify-prep.cuh"

#ifndef GDN_VSTATE_STAGES
#define GDN_VSTATE_STAGES 4  // chunks of 4 rows per thread in the shared-memory ring (STAGES − 1 in flight)
#endif
#ifndef GDN_VSTATE_MINB
#define GDN_VSTATE_MINB 4  // CTAs per SM the registers are capped for (128: no spills; 5 CTAs, 96 registers, spilled)
#endif

namespace gdn {
namespace verify {

constexpr int kVThreads = 128;
constexpr int kVWarps = kVThreads / 32;
constexpr int kVChunks = 8;  // chunks of 4 rows per thread at most (d_k ≤ 128 over 4 warps)
constexpr int kStages = GDN_VSTATE_STAGES;
constexpr int kSlot = 4 * kVThreads;  // floats of one row of a stage: 16 bytes per thread

// Dynamic shared memory, in floats: the keys record [8][d_kp], the value record [4·d_vp + 48], the
// pending keys [mb][d_kp], Σo² [4][kVWarps], then the ring of state chunks [kStages][4][kSlot],
// which the warps' dot products [8][kVWarps][d_vp] (a_t then b_t) take over after the last chunk.
__host__ __device__ __forceinline__ int vstate_smem_floats(int dk, int dv, int maxK) {
  const int ring = kStages * 4 * kSlot, sums = 2 * kVRows * kVWarps * fast::pad4(dv);
  return key_stride(dk) + value_stride(dv) + fast::fast_mb_alloc(maxK) * fast::pad4(dk) + kVRows * kVWarps + (ring > sums ? ring : sums);
}

struct VLay {
  float* keys;  // k̂_t [dkp], q̂_t [dkp] for t < 4
  float* vals;  // v_t [dvp] for t < 4, then the scalars
  float* kf;    // [mb][dkp] pending keys
  float* osq;   // [4][kVWarps]
  float* ring;  // [kStages][4][kSlot] state chunks, then sums [8][kVWarps][dvp]
  int dkp, dvp;
};

__device__ __forceinline__ VLay vstate_lay(const Args& A) {
  VLay Q;
  Q.dkp = fast::pad4(A.dk);
  Q.dvp = fast::pad4(A.dv);
  Q.keys = fast::dyn_smem();
  Q.vals = Q.keys + key_stride(A.dk);
  Q.kf = Q.vals + value_stride(A.dv);
  Q.osq = Q.kf + fast::fast_mb_alloc(A.maxK) * Q.dkp;
  Q.ring = Q.osq + kVRows * kVWarps;
  return Q;
}

// The thread's part of the head as chunks of 4 rows: row 4c + e of chunk c at rowp + (4c + e)·d_v
// (rowp: its first row's columns 4·lane ..); d_k may end inside a chunk, and a thread with no
// columns (4·lane ≥ d_v) has no rows. Each address is one product from rowp (with has_row and a
// product from the head's start per row, a load cost ~12 instructions: ncu).
struct Chunks {
  float* rowp;
  float* ring;  // this thread's 16 bytes of row 0 of stage 0 of the ring (row e of stage s: + (4s + e)·kSlot)
  __device__ __forceinline__ int rows(const Args& A, const decode::Part& p, int c) const { return p.act ? min(4, A.dk - p.r0 - 4 * c) : 0; }
  // This thread's row 0 of chunk c's stage.
  __device__ __forceinline__ float* stage(int c) const { return ring + (c % kStages) * 4 * kSlot; }
  // Chunk c's copies into its stage, one cp.async group (empty for rows that do not exist and for
  // c ≥ nc, so every thread commits as many groups).
  __device__ __forceinline__ void issue(const Args& A, const decode::Part& p, int c, int nc) const {
    const int n = c < nc ? rows(A, p, c) : 0;
    const float* src = rowp + (size_t)(4 * c) * A.dv;
    float* dst = stage(c);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (e < n) fast::cp_async16(dst + e * kSlot, src + e * A.dv);
    pipe::commit_copies();
  }
  __device__ __forceinline__ void store(const Args& A, const decode::Part& p, int c, const float4 (&x)[4]) const {
    const int n = rows(A, p, c);
    float* dst = rowp + (size_t)(4 * c) * A.dv;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (e < n) decode::st_state(dst + e * A.dv, x[e]);
  }
};

template <int MB>
__device__ __forceinline__ void vrun_head(const Args& A, const Geo& G, const TaskIn& I, const VLay& Q, const decode::Part& p, int h, int k,
                                          const float (&z)[kVRows], float nw, const Chunks& H) {
  const int M = I.nPend;
  const float* pendSh = A.stash + (size_t)I.slot * G.stashSeq + (size_t)h * A.maxK * G.stashRow;
  // The pending rows' u (this thread's columns) and γ, loaded before the first barrier so that
  // they land with the state; plain arrays, not a struct passed by reference: the wait's memory
  // clobber below would keep an address-taken struct in local memory.
  constexpr int MBa = MB > 0 ? MB : 1;
  float4 uw[MBa];
  float gam[MBa];
#pragma unroll
  for (int q = 0; q < MBa; ++q) {
    const float* row = pendSh + (size_t)q * G.stashRow;
    const float* src = row + A.dk + 4 * p.lane;
    const bool in = MB > 0 && q < M;
    uw[q] = in && p.act ? make_float4(src[0], src[1], src[2], src[3]) : decode::f4(0.0f);
    gam[q] = in ? row[A.dk + A.dv] : 0.0f;
  }
  // γ_{M−1} loaded apart (picked out of gam by the runtime M, gam went to local memory).
  const float gl = MB > 0 && M > 0 ? pendSh[(size_t)(M - 1) * G.stashRow + A.dk + A.dv] : 0.0f;
  if (MB > 0) {
    fast::Lay L;
    L.kf = Q.kf;
    L.dkp = Q.dkp;
    fast::pending_keys(A, G, pendSh, M, MB, L);
  }
  pipe::wait_copies<0>();  // the records (the newest group: the state's first chunks have landed too)
  __syncthreads();  // the records and the pending keys (every read of the pending stash rows is done)
  // The fold's weights: u_q ← e^{γ_{M−1}−γ_q} u_q (zero for q ≥ M), c0 = e^{γ_{M−1}}.
#pragma unroll
  for (int q = 0; q < MBa; ++q) uw[q] = q < M ? decode::scale4(expf(gl - gam[q]), uw[q]) : decode::f4(0.0f);
  const float c0 = expf(gl);
  // The chunks: fold and write back (carried), the 8 dot products; chunk c + kStages − 1 issued
  // as chunk c is used (a loop, not unrolled: addresses advance from the last and the stage is
  // c mod kStages, so nothing per chunk stays in registers).
  float4 acc[2 * kVRows];
#pragma unroll
  for (int t = 0; t < 2 * kVRows; ++t) acc[t] = decode::f4(0.0f);
  const int nc = p.nr / 4;
  const float* kf = Q.kf + p.r0;    // pending row q's keys of chunk c: kf + q·d_kp + 4c
  const float* kw = Q.keys + p.r0;  // k̂_t, q̂_t of chunk c: kw + (2t or 2t + 1)·d_kp + 4c
#pragma unroll 1
  for (int c = 0; c < nc; ++c) {
    H.issue(A, p, c + kStages - 1, nc);  // into the stage chunk c − 1 left
    pipe::wait_copies<kStages - 1>();          // chunk c has landed (this thread's copies: no barrier)
    const float* st = H.stage(c);
    const int n = H.rows(A, p, c);
    float4 x[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) x[e] = e < n ? fast::ld4s(st + e * kSlot) : decode::f4(0.0f);
    if (MB > 0) {
      // Pending row q's keys for the chunk's 4 rows in one load (rows past d_k: zero keys, never stored).
#pragma unroll
      for (int e = 0; e < 4; ++e) x[e] = decode::scale4(c0, x[e]);
#pragma unroll
      for (int q = 0; q < MBa; ++q) {
        const float4 kq = fast::ld4s(kf + q * Q.dkp + 4 * c);
        decode::fma4(kq.x, uw[q], x[0]), decode::fma4(kq.y, uw[q], x[1]), decode::fma4(kq.z, uw[q], x[2]), decode::fma4(kq.w, uw[q], x[3]);
      }
      H.store(A, p, c, x);
    }
    if (p.r0 + 4 * c < Q.dkp) {  // k̂ and q̂ are zero from d_k to d_kp
#pragma unroll
      for (int t = 0; t < 2 * kVRows; ++t) {
        // t < 4: k̂_t (a_t); t ≥ 4: q̂_{t−4} (b_t).
        const float4 w = fast::ld4s(kw + ((t & 3) * 2 + (t >> 2)) * Q.dkp + 4 * c);
        decode::fma4(w.x, x[0], acc[t]), decode::fma4(w.y, x[1], acc[t]), decode::fma4(w.z, x[2], acc[t]), decode::fma4(w.w, x[3], acc[t]);
      }
    }
  }
  __syncthreads();  // every thread is done with its stages: the warps' dot products take the ring
  if (p.act) {
#pragma unroll
    for (int t = 0; t < 2 * kVRows; ++t) *reinterpret_cast<float4*>(Q.ring + (t * kVWarps + p.warp) * Q.dvp + 4 * p.lane) = acc[t];
  }
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
      for (int w = 0; w < kVWarps; ++w) sa += Q.ring[(t * kVWarps + w) * dvp + j], sb += Q.ring[((kVRows + t) * kVWarps + w) * dvp + j];
    }
    float a = sc[4 + t] * sa;
#pragma unroll
    for (int q = 0; q < t; ++q) a = fmaf(sc[16 + 4 * q + t], u[q], a);
    u[t] = col ? sc[t] * (Q.vals[t * dvp + j] - a) : 0.0f;
    float oo = sc[4 + t] * sb;
#pragma unroll
    for (int q = 0; q <= t; ++q) oo = fmaf(sc[32 + 4 * q + t], u[q], oo);
    o[t] = col ? oo : 0.0f;
  }
#pragma unroll
  for (int t = 0; t < kVRows; ++t) {
    const float ss = warp_sum_to_lane0(o[t] * o[t]);
    if (p.lane == 0) Q.osq[t * kVWarps + p.warp] = ss;
  }
  // The stash rows of the new rows (the pending ones were read before the first barrier).
  float* sh = A.stash + (size_t)I.slot * G.stashSeq + (size_t)h * A.maxK * G.stashRow;
#pragma unroll
  for (int t = 0; t < kVRows; ++t) {
    if (t >= k) break;
    float* srow = sh + (size_t)t * G.stashRow;
    if (col) srow[dk + j] = u[t];
    for (int i = j; i < dk; i += kVThreads) srow[i] = Q.keys[t * 2 * Q.dkp + i];
    if (j == 0) srow[dk + dv] = sc[8 + t];
  }
  __syncthreads();
  if (col) {
#pragma unroll
    for (int t = 0; t < kVRows; ++t) {
      if (t >= k) break;
      float tot = 0.0f;
#pragma unroll
      for (int w = 0; w < kVWarps; ++w) tot += Q.osq[t * kVWarps + w];
      const float inv = 1.0f / sqrtf(tot / (float)dv + A.eps);
      store_y(A, (size_t)(I.row0 + t) * A.hv * dv + (size_t)h * dv + j, nw * o[t] * inv * siluf_(z[t]));
    }
  }
}

// The head's records into shared memory (16-byte cp.async; the records' floats are multiples of 4).
__device__ __forceinline__ void copy_records(const float* src, float* dst, int n) {
  for (int e = tid_lin(); e < n / 4; e += kVThreads) fast::cp_async16(dst + 4 * e, src + 4 * e);
}

__device__ __forceinline__ void vstate_entry(const Args& A, const float* prep, int batch, int k) {
  const bool ok = A.maxK <= fast::kMaxRows && A.dk <= 4 * kVChunks * kVWarps && A.dv % 4 == 0 && A.dv <= kVThreads && nthreads() == kVThreads &&
                  k >= 1 && k <= kVRows && k <= A.maxK && fast::dyn_smem_bytes() >= 4u * (unsigned)vstate_smem_floats(A.dk, A.dv, A.maxK);
  if (!ok) __trap();
  int b, h;
  cta_coords(batch, A.hv, b, h);
  if (b >= batch || h >= A.hv) return;
  const TaskIn I = decode_task_in(A, b);
  if (I.slot < 0) return;
  if (I.nPend > A.maxK || I.nPend > I.P0) __trap();
  const decode::Part p = decode::part_for<kVWarps, 0>(A);  // columns 4·lane .. + 3 of ⌈d_k / 4⌉₄ rows
  const VLay Q = vstate_lay(A);
  const Chunks H{pipe::head_state(A, I.slot, h) + (size_t)p.r0 * A.dv + 4 * p.lane, Q.ring + 4 * tid_lin()};
  const Geo G = geo_of(A);
  const int g = h / G.r, m = h - g * G.r;
  // The state's first kStages − 1 chunks, a group each; then (launched with an early start after
  // gdn_verify_prep) the wait for the prep, and its records as one more group.
#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) H.issue(A, p, c, p.nr / 4);
  wait_previous_kernel();
  copy_records(prep + ((size_t)b * A.hk + g) * key_stride(A.dk), Q.keys, key_stride(A.dk));
  copy_records(prep + (size_t)batch * A.hk * key_stride(A.dk) + ((size_t)b * A.hv + h) * value_stride(A.dv), Q.vals, value_stride(A.dv));
  pipe::commit_copies();
  // z of this thread's column for the rows, and the norm's weight, loaded with the state.
  const int j = tid_lin();
  const bool col = j < A.dv;
  float z[kVRows];
#pragma unroll
  for (int t = 0; t < kVRows; ++t) z[t] = (col && t < k) ? A.qkvz[(size_t)(I.row0 + t) * G.width + g * G.grp + 2 * A.dk + (G.r + m) * A.dv + j] : 0.0f;
  const float nw = col ? A.normWeight[j] : 0.0f;
  if (I.nPend == 0) vrun_head<0>(A, G, I, Q, p, h, k, z, nw, H);
  else if (I.nPend <= 4) vrun_head<4>(A, G, I, Q, p, h, k, z, nw, H);
  else vrun_head<8>(A, G, I, Q, p, h, k, z, nw, H);
}

}  // namespace verify
}  // namespace gdn
