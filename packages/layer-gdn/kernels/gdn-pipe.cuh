// Gated DeltaNet decode steps, column-pipelined (the `pipe` entry point gdn_recurrent_pipe).
// Layouts and semantics: ../KERNELS.md; the math is that of gdn-fast.cuh for one row (the pending
// rows of a carried decode folded first), whose prologue helpers this file reuses.
//
// Why: the smem kernels hold a head's whole state (64 KiB at the 80B shape) from its load to its
// last store, and the CTAs of a wave move in step (all load, then all compute, then all store),
// so the DRAM alternates between reading and writing and neither is busy the whole time (ncu on
// the H200 at batch 32: far below DRAM peak, 12 warps per SM). Every column of S is independent
// but for the dot products over its own d_k rows, so a CTA here streams its head in blocks of 32
// columns (d_k × 32 floats, 16 KiB) through GDN_PIPE_NB shared buffers with 16-byte cp.async:
// while it computes and stores block c it has blocks c+1 .. c+NB−1 in flight, and a CTA holds
// NB blocks instead of the whole head (NB = 2: 39.5 KiB, 4 CTAs per SM instead of 3). The first
// copies start as soon as the CTA knows its slot, before the rest of the task is read; the
// prologue then loads all else the head needs in one round, so a block waits only for its copy.
//
// Launch: grid [batch, H_v] (any grid of at least batch·H_v CTAs), 128 threads, the dynamic
// shared memory of pipe_smem_floats() (gdn-launch.ts computes the same). Thread (warp w, lane l)
// owns column c·32 + l of block c and the rows of part w (d_k split in 4 parts); the dot
// products of the 4 parts are summed through shared memory in a fixed order. Takes what the fast
// kernels take (maxK ≤ 8, conv K ≤ 4, d_k ≤ 128) with d_v a multiple of 4; decode steps only
// (mode 0, k = 1: the host launches it for those), else traps.
#pragma once
#include "gdn-fast.cuh"

#ifndef GDN_PIPE_NB
#define GDN_PIPE_NB 2  // column blocks in shared memory per CTA (2: faster than 3 on the H200)
#endif
#ifndef GDN_PIPE_MAXNREG
#define GDN_PIPE_MAXNREG 128  // 4 CTAs of 128 threads per SM
#endif

namespace gdn {
namespace pipe {

using fast::Lay;
using fast::pad4;

constexpr int kThreads = 128;
constexpr int kW = 32;         // columns per block (a warp's lanes)
constexpr int kParts = 4;      // row parts (the warps)
constexpr int kPartRows = 32;  // rows per part at most (d_k ≤ 128)
constexpr int kNB = GDN_PIPE_NB;
static_assert(kNB >= 2 && kNB <= 4, "GDN_PIPE_NB: 2 to 4 blocks");

// Dynamic shared memory, in floats: nb block buffers [d_kp][32], then the fast kernels' one-row
// layout (k, q, pending keys, scalars), the part sums [2][4][32], o [d_v], the cluster's partial
// sums [4] (gdn-split.cuh; the pipe kernels leave them unused), v and z of the row [d_v] each.
__host__ __device__ __forceinline__ int pipe_smem_floats(int dk, int dv, int maxK, int nb = kNB) {
  return nb * pad4(dk) * kW + (2 + fast::fast_mb_alloc(maxK)) * pad4(dk) + fast::kSmallFloats + 2 * kParts * kW + 3 * pad4(dv) + 4;
}

struct PLay {
  float* buf;  // [kNB][dkp][kW]
  float* red;  // [2][kParts][kW]
  float* osm;  // [dv] o of the row (before the norm)
  float* clu;  // [4] the cluster's partial sums (gdn-split.cuh)
  float* vsm;  // [dv] v of the row (after the conv), loaded with q and k in the prologue
  float* zsm;  // [dv] z of the row (the gate of the norm)
  Lay L;
};

__device__ __forceinline__ PLay pipe_lay(const Args& A, int nb = kNB) {
  PLay P;
  float* base = fast::dyn_smem();
  const int dkp = pad4(A.dk);
  P.buf = base;
  P.L.dkp = dkp;
  P.L.S = nullptr;
  P.L.kd = base + nb * dkp * kW;
  P.L.qd = P.L.kd + dkp;
  P.L.kf = P.L.qd + dkp;
  P.L.sc = P.L.kf + fast::fast_mb_alloc(A.maxK) * dkp;
  P.red = P.L.sc + fast::kSmallFloats;
  P.osm = P.red + 2 * kParts * kW;
  P.clu = P.osm + pad4(A.dv);
  P.vsm = P.clu + 4;
  P.zsm = P.vsm + pad4(A.dv);
  return P;
}

// Starts the copy of column block cb of a head's state (rows 0..d_k−1, columns cb·32 .. +31
// that exist) into dst [d_k][32], as one cp.async group (empty past the last block, so every
// thread commits the same number of groups). commit = false: the caller adds to the group and
// closes it (commit_copies).
__device__ __forceinline__ void commit_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Until at most N of this thread's copy groups are in flight (the older ones have landed).
template <int N>
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void issue_block(const float* headS, int cb, int nblk, float* dst, int dk, int dv, bool commit = true) {
  if (cb < nblk) {
    const int c0 = cb * kW;
    const int nseg = min(kW, dv - c0) / 4;
    for (int e = tid_lin(); e < dk * (kW / 4); e += kThreads) {
      const int i = e / (kW / 4), sg = e % (kW / 4);
      if (sg >= nseg) continue;
      fast::cp_async16(dst + i * kW + 4 * sg, headS + (size_t)i * dv + c0 + 4 * sg);
    }
  }
  if (commit) commit_copies();
}

// The pending rows' u of block cb (rows q < M ≤ 4, its 32 columns) into stage [4][32], with the
// block's copy: a block then waits on no load of its own for the pending fold either. 4-byte copies: the
// stash rows are d_k + d_v + 1 floats apart. The stage lives in the small region's floats
// kStage.. (unused by these kernels), kNB of them.
constexpr int kStage = 16;
template <int NB>
constexpr bool can_stage() { return kStage + NB * 4 * kW <= fast::kPos; }
__device__ __forceinline__ void copy_stage(const Args& A, const Geo& G, const float* pendSh, int M, int cb, float* stage) {
  const int t = tid_lin(), q = t / kW, l = t % kW, col = cb * kW + l;
  if (q < M && q < 4 && col < A.dv) {
    const float* src = pendSh + (size_t)q * G.stashRow + A.dk + col;
    float* d = stage + q * kW + l;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(fast::smem_addr(d)), "l"(src) : "memory");
#else
    *d = *src;
#endif
  }
}

// The oldest block in flight has landed for every thread (NB − 2 later ones may still be in
// flight), and every thread is done with the previous block (its buffer takes the next copy).
template <int NB = kNB>
__device__ __forceinline__ void wait_block() {
  wait_copies<NB - 2>();
  __syncthreads();
}

// The row's scalars (β, the A·fk and A·fq products, the k̂·q̂ term, the decay of the commit and
// the key's norm factor): what gram() and coefs() of gdn-fast-prologue.cuh give for a block of one row.
struct RowCoef {
  float beta, ca, cb, cq, cl, ub;
};

// The step's row: gates, q and k (conv, raw) of the key head and v, z of the value head into
// shared memory (so that no block waits on a load of its own but for the state), the row's
// scalars from Σq², Σk², k·q summed on the way; the pending keys. `ring`: this CTA writes the conv
// ring entries of the channels it owns here too, in the same round of loads (a decode step
// commits one row: gdn-common.cuh write_ring_channel).
__device__ __forceinline__ RowCoef prologue(const Args& A, const Geo& G, const Task& T, int h, int m, const float* pendSh, int M, const PLay& P,
                                            bool ring) {
  const Lay& L = P.L;
  const int tid = tid_lin(), nt = nthreads(), lane = tid & 31, warp = tid >> 5;
  const int dk = A.dk, dv = A.dv, g = T.g;
  if (T.recordConv) __trap();  // verify steps do not come here
  // The gates' inputs, in every thread's registers: their loads go out with the conv inputs'
  // (one thread loading them and passing them through shared memory made a second round).
  const float* bar = A.qkvz + (size_t)T.row0 * G.width + G.baCol + g * 2 * G.r;
  const float bRaw = bar[m], aRaw = bar[G.r + m], aLogH = A.aLog[h], dtB = A.dtBias[h];
  fast::conv_sources(A, G, T, 0, A.K, L);
  __syncthreads();
  // q_i, k_i of the key head, v_i, z_i of the value head and ring channel i in one loop: a
  // thread's loads issue together.
  const int nRow = max(L.dkp, dv);
  const int nRing = ring ? owned_count(A, G, T) : 0;
  float sq = 0.0f, sk = 0.0f, kq = 0.0f;
  for (int i = tid; i < max(nRow, nRing); i += nt) {
    float q[1] = {0.0f}, k[1] = {0.0f}, v[1] = {0.0f}, z = 0.0f;
    if (i < dk && i < nRow) {
      const int cq = g * dk + i, colq = g * G.grp + i;
      fast::conv_rows<1>(A, L, cq, colq, 1, q);
      fast::conv_rows<1>(A, L, G.keyDim + cq, colq + dk, 1, k);
    }
    if (i < dv && i < nRow) {
      fast::conv_rows<1>(A, L, 2 * G.keyDim + h * dv + i, g * G.grp + 2 * dk + m * dv + i, 1, v);
      z = A.qkvz[(size_t)T.row0 * G.width + g * G.grp + 2 * dk + (G.r + m) * dv + i];
    }
    if (i < nRing) write_ring_channel<fast::kMaxConv>(A, G, T, i);
    if (i < dv && i < nRow) {
      P.vsm[i] = v[0];
      P.zsm[i] = z;
    }
    if (i < L.dkp && i < nRow) {
      L.qd[i] = q[0];
      L.kd[i] = k[0];
      sq = fmaf(q[0], q[0], sq);
      sk = fmaf(k[0], k[0], sk);
      kq = fmaf(k[0], q[0], kq);
    }
  }
  sq = warp_sum_to_lane0(sq);
  sk = warp_sum_to_lane0(sk);
  kq = warp_sum_to_lane0(kq);
  if (lane == 0) P.red[warp] = sq, P.red[kParts + warp] = sk, P.red[2 * kParts + warp] = kq;
  if (M > 0) fast::pending_keys(A, G, pendSh, M, fast::fast_mb_alloc(A.maxK), L);
  __syncthreads();
  // Summed in warp order: every thread gets the same bits.
  float SQ = 0.0f, SK = 0.0f, KQ = 0.0f;
#pragma unroll
  for (int w = 0; w < kParts; ++w) SQ += P.red[w], SK += P.red[kParts + w], KQ += P.red[2 * kParts + w];
  const float fk = 1.0f / sqrtf(SK + 1e-6f);
  const float fq = (1.0f / sqrtf((float)dk)) / sqrtf(SQ + 1e-6f);
  const float At = expf(-expf(aLogH) * softplusf_(aRaw + dtB));
  return RowCoef{sigmoidf_(bRaw), At * fk, At * fq, fk * fq * KQ, At, fk};
}

// Per-column inputs of one block: v of the row and the pending rows' coefficients (0 past M).
template <int MB>
struct ColumnIn {
  float v[1];
  float uf[MB > 0 ? MB : 1];
};

// The pending rows of the head: w[q] = e^{γ_{M−1}−γ_q} (0 past M) and c0 = e^{γ_{M−1}}, once
// per head; a column's coefficient is then w[q]·u_q[j].
template <int MB>
struct PendCoef {
  float c0;
  float w[MB > 0 ? MB : 1];
};
// From the rows' cumulative gates γ_q (gam[q], q < M).
template <int MB>
__device__ __forceinline__ PendCoef<MB> pend_coef_of(const float (&gam)[MB > 0 ? MB : 1], int M) {
  PendCoef<MB> C;
  float gl = 0.0f;
#pragma unroll
  for (int q = 0; q < MB; ++q)
    if (q == M - 1) gl = gam[q];
  C.c0 = M > 0 ? expf(gl) : 1.0f;
#pragma unroll
  for (int q = 0; q < MB; ++q) C.w[q] = q < M ? expf(gl - gam[q]) : 0.0f;
  return C;
}
// γ_q from the stash rows of the head (pendSh).
template <int MB>
__device__ __forceinline__ void pend_gammas(const Args& A, const Geo& G, const float* pendSh, int M, float (&gam)[MB > 0 ? MB : 1]) {
#pragma unroll
  for (int q = 0; q < (MB > 0 ? MB : 1); ++q) gam[q] = q < M ? pendSh[(size_t)q * G.stashRow + A.dk + A.dv] : 0.0f;
}
template <int MB>
__device__ __forceinline__ PendCoef<MB> pend_coef(const Args& A, const Geo& G, const float* pendSh, int M) {
  float gam[MB > 0 ? MB : 1];
  pend_gammas<MB>(A, G, pendSh, M, gam);
  return pend_coef_of<MB>(gam, M);
}

// Column j's inputs: v from shared memory (the prologue's), the pending rows' u_q[j] from the
// block's stage [4][32] when given (copy_stage), else from the stash.
template <int MB>
__device__ __forceinline__ void column_inputs(const Args& A, const Geo& G, const Task& T, const PLay& P, const float* pendSh, int M,
                                              const PendCoef<MB>& PC, const float* stage, int j, bool act, ColumnIn<MB>& c) {
  c.v[0] = act ? P.vsm[j] : 0.0f;
#pragma unroll
  for (int q = 0; q < MB; ++q) {
    const float u = !(q < M && act) ? 0.0f : stage ? stage[q * kW + (j % kW)] : pendSh[(size_t)q * G.stashRow + A.dk + j];
    c.uf[q] = PC.w[q] * u;
  }
}

// Thread (warp `part`, lane) on column j of a block in shared memory (blk [d_kp][32], landed for
// every thread): fold MB pending terms (uf = 0 past M), then the row's dot products, u, o
// (→ P.osm[j]) and the commit of the new column to global memory.
template <int MB>
__device__ __forceinline__ void block_passes(const Args& A, const Task& T, const PLay& P, const RowCoef& R, const PendCoef<MB>& PC,
                                             const ColumnIn<MB>& c, float* blk, float* headS, int j, bool act) {
  const Lay& L = P.L;
  const int dk = A.dk, dv = A.dv, dkp = L.dkp;
  const int tid = tid_lin(), lane = tid & 31, part = tid >> 5;
  const int pr = min(kPartRows, pad4((dk + kParts - 1) / kParts));
  const int ib = min(dk, part * pr), ie = min(dk, ib + pr);
  // Pass A over the part's rows (groups of 4): the pending fold and the dot products with k and
  // q (raw); the folded values go back to the block (only this thread reads them again, in
  // pass B).
  float a = 0.0f, b = 0.0f;
#pragma unroll 2
  for (int i0 = ib; i0 < ie; i0 += 4) {
    float x[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) x[e] = (act && i0 + e < ie) ? blk[(i0 + e) * kW + lane] : 0.0f;
    if (MB > 0) {
#pragma unroll
      for (int e = 0; e < 4; ++e) x[e] *= PC.c0;
#pragma unroll
      for (int q = 0; q < MB; ++q) {
        const float4 kk = fast::ld4s(L.kf + q * dkp + i0);
        x[0] = fmaf(kk.x, c.uf[q], x[0]);
        x[1] = fmaf(kk.y, c.uf[q], x[1]);
        x[2] = fmaf(kk.z, c.uf[q], x[2]);
        x[3] = fmaf(kk.w, c.uf[q], x[3]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (i0 + e < ie) blk[(i0 + e) * kW + lane] = x[e];
    }
    const float4 kk = fast::ld4s(L.kd + i0), qq = fast::ld4s(L.qd + i0);
    a = fmaf(x[0], kk.x, fmaf(x[1], kk.y, fmaf(x[2], kk.z, fmaf(x[3], kk.w, a))));
    b = fmaf(x[0], qq.x, fmaf(x[1], qq.y, fmaf(x[2], qq.z, fmaf(x[3], qq.w, b))));
  }
  // The row parts' sums, added in part order (every thread of a column gets the same bits).
  P.red[part * kW + lane] = a;
  P.red[(kParts + part) * kW + lane] = b;
  __syncthreads();
  a = b = 0.0f;
#pragma unroll
  for (int p = 0; p < kParts; ++p) {
    a += P.red[p * kW + lane];
    b += P.red[(kParts + p) * kW + lane];
  }
  const float u = R.beta * (c.v[0] - R.ca * a);
  const float o = R.cb * b + R.cq * u;
  if (part == 0 && act) P.osm[j] = o;
  // Pass B, the commit s ← cl s + kc k_raw[i], to global memory (a warp stores 128 B per row).
  const float cl = R.cl, kc = R.ub * u;
  if (act) {
#pragma unroll 4
    for (int i = ib; i < ie; ++i) headS[(size_t)i * dv + j] = fmaf(kc, L.kd[i], cl * blk[i * kW + lane]);
  }
}

// Σ o² over P.osm[j0 .. j1), the CTA's total in every thread. Call after a barrier that follows
// the writes of osm; uses P.red[0 .. 3].
__device__ __forceinline__ float osm_sumsq(const PLay& P, int j0, int j1) {
  const int tid = tid_lin(), lane = tid & 31, part = tid >> 5;
  float ss = 0.0f;
  for (int j = j0 + tid; j < j1; j += kThreads) ss = fmaf(P.osm[j], P.osm[j], ss);
  ss = warp_sum_to_lane0(ss);
  if (lane == 0) P.red[part] = ss;
  __syncthreads();
  float tot = 0.0f;
#pragma unroll
  for (int p = 0; p < kParts; ++p) tot += P.red[p];
  return tot;
}

// The gated RMSNorm of the row: y = w ⊙ o · inv ⊙ SiLU(z).
__device__ __forceinline__ void write_y(const Args& A, const Task& T, const PLay& P, int h, float inv) {
  for (int j = tid_lin(); j < A.dv; j += kThreads)
    store_y(A, (size_t)T.row0 * A.hv * A.dv + (size_t)h * A.dv + j, A.normWeight[j] * P.osm[j] * inv * siluf_(P.zsm[j]));
}

// The head's blocks stream through kNB buffers (block cb in buffer cb % kNB; the first kNB − 1
// already issued): each trip waits for its block, issues the block kNB − 1 ahead with its pending
// rows' u (copy_stage, when there are at most 4), or an empty group past the last, and runs the
// column passes; then the gated RMSNorm over the whole d_v.
template <int MB>
__device__ __forceinline__ void stream_head(const Args& A, const Geo& G, const Task& T, const PLay& P, const RowCoef& R, int h, const float* pendSh,
                                            int M, float* headS) {
  constexpr bool kStaged = can_stage<kNB>() && MB > 0 && MB <= 4;
  const int dkp = P.L.dkp, lane = tid_lin() & 31;
  const int nblk = (A.dv + kW - 1) / kW;
  const PendCoef<MB> PC = pend_coef<MB>(A, G, pendSh, M);
  float* stage = P.L.sc + kStage;  // [kNB][4][32]
  for (int cb = 0; cb < nblk; ++cb) {
    const int j = cb * kW + lane, next = cb + kNB - 1;
    const bool act = j < A.dv;
    // Blocks this head issued carry their u (read after the wait); the first kNB − 1, issued
    // before it, load theirs from the stash (before the wait, overlapping it).
    const float* st = kStaged && cb >= kNB - 1 ? stage + (cb % kNB) * 4 * kW : nullptr;
    ColumnIn<MB> c;
    if (!st) column_inputs<MB>(A, G, T, P, pendSh, M, PC, nullptr, j, act, c);
    wait_block<kNB>();
    // Block `next` into the buffer of block cb − 1, which pass B of the last trip read.
    if (next < nblk) {
      issue_block(headS, next, nblk, P.buf + (next % kNB) * dkp * kW, A.dk, A.dv, false);
      if (kStaged) copy_stage(A, G, pendSh, M, next, stage + (next % kNB) * 4 * kW);
    }
    commit_copies();  // past the head's last block: an empty group, so every trip commits one
    if (st) column_inputs<MB>(A, G, T, P, pendSh, M, PC, st, j, act, c);
    block_passes<MB>(A, T, P, R, PC, c, P.buf + (cb % kNB) * dkp * kW, headS, j, act);
  }
  __syncthreads();
  const float tot = osm_sumsq(P, 0, A.dv);
  write_y(A, T, P, h, 1.0f / sqrtf(tot / (float)A.dv + A.eps));
}

__device__ __forceinline__ void check_pipe(const Args& A) {
  const bool ok = A.maxK <= fast::kMaxRows && A.K <= fast::kMaxConv && A.dk <= kParts * kPartRows && A.dv % 4 == 0 &&
                  nthreads() == kThreads && fast::dyn_smem_bytes() >= 4u * (unsigned)pipe_smem_floats(A.dk, A.dv, A.maxK);
  if (!ok) __trap();
}

__device__ __forceinline__ float* head_state(const Args& A, int slot, int h) { return A.state + ((size_t)slot * A.hv + h) * (size_t)A.dk * A.dv; }

// The first NB − 1 blocks of the head's state start copying (before the prologue).
__device__ __forceinline__ void issue_first(const Args& A, const PLay& P, float* headS) {
  const int nblk = (A.dv + kW - 1) / kW;
  for (int cb = 0; cb < kNB - 1; ++cb) issue_block(headS, cb, nblk, P.buf + cb * P.L.dkp * kW, A.dk, A.dv);
}

// Runs the task whose first blocks issue_first started.
__device__ __forceinline__ void run_task(const Args& A, const Geo& G, const Task& T, const PLay& P) {
  if (T.nh != 1 || T.nPendFold > A.maxK || T.nrows != 1) __trap();
  const int h = T.h0, m = h - T.g * G.r;
  float* headS = head_state(A, T.slot, h);
  const float* pendSh = T.pendK + (size_t)h * A.maxK * G.stashRow;
  const int M = T.nPendFold;
  const RowCoef R = prologue(A, G, T, h, m, pendSh, M, P, true);
  if (M == 0) stream_head<0>(A, G, T, P, R, h, pendSh, M, headS);
  else if (M <= 4) stream_head<4>(A, G, T, P, R, h, pendSh, M, headS);
  else stream_head<8>(A, G, T, P, R, h, pendSh, M, headS);
}

__device__ __forceinline__ void recurrent_entry(const Args& A, int mode, int batch, int k) {
  check_pipe(A);
  if (mode != 0 || k != 1) __trap();  // decode steps only
  int b, h;
  cta_coords(batch, A.hv, b, h);
  if (b >= batch || h >= A.hv) return;
  const TaskIn I = decode_task_in(A, b);
  if (I.slot < 0) return;
  const PLay P = pipe_lay(A);
  issue_first(A, P, head_state(A, I.slot, h));
  const Geo G = geo_of(A);
  Task T;
  if (!task_of(A, G, h, I, 1, true, false, T)) return;
  run_task(A, G, T, P);
}

}  // namespace pipe
}  // namespace gdn
