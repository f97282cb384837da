// Gated DeltaNet decode steps with one head split over 4 CTAs of 32 columns each (the `split`
// entry point gdn_recurrent_split). Layouts and semantics: ../KERNELS.md; the per-column math is
// gdn-pipe.cuh's (block_passes), one block.
//
// Why: every column of S is independent but for the gated RMSNorm of the row's output over d_v.
// The pipe kernels stream a head's 4 blocks through one CTA, so each CTA waits on its blocks one
// after another (one 16 KiB copy in flight per CTA, 4 CTAs per SM). Here each CTA copies its one
// block (16 KiB at the 80B shape) as soon as it knows its slot, computes its columns, stores them
// and exits: more CTAs per SM and no chain of copies within one. The redundant part (each CTA
// computes the row's q, k, gates and pending keys) is small next to the state. The norm needs
// the row's Σo² over all columns: the CTAs form a cluster of 4 (sm_90) and swap their partial
// sums through distributed shared memory. Measured on
// the H200: fastest below batch 8 (4 × the CTAs of one per head while the GPU is not full), slower
// from 8 on, where the prologue run 4 times per head costs more than it hides; the layer runs it
// for decode steps of fewer than 8 positions (gdn-launch.ts recurrentVariant).
//
// Launch: grid [4·batch, H_v] (CTA x = 4·b + rank: columns rank·32 .. rank·32 + 31 of batch
// position b), 128 threads (4 warps own a quarter of the d_k rows each, as in gdn-pipe.cuh), the
// dynamic shared memory of pipe_smem_floats(d_k, d_v, maxK, 1) (gdn-launch.ts computes the same).
// Takes what the pipe kernels take with d_v ≤ 128; decode steps only (mode 0, k = 1), and needs
// clusters (sm_90); else traps.
#pragma once
#include "gdn-cluster.cuh"
#include "gdn-pipe.cuh"

#ifndef GDN_SPLIT_MAXNREG
#define GDN_SPLIT_MAXNREG 80  // 6 CTAs of 128 threads per SM
#endif

namespace gdn {
namespace split {

using pipe::kThreads;
using pipe::kW;
using pipe::PLay;
constexpr int kCluster = 4;  // CTAs per head (d_v ≤ 4·32)

__device__ __forceinline__ void check_split(const Args& A) {
  const bool ok = A.maxK <= fast::kMaxRows && A.K <= fast::kMaxConv && A.dk <= pipe::kParts * pipe::kPartRows && A.dv % 4 == 0 &&
                  A.dv <= kCluster * kW && nthreads() == kThreads &&
                  fast::dyn_smem_bytes() >= 4u * (unsigned)pipe::pipe_smem_floats(A.dk, A.dv, A.maxK, 1) &&
                  gdn_cluster::available();
  if (!ok) __trap();
}

// Batch position, value head and rank (column block) of this CTA: grid [4·batch, H_v] only.
__device__ __forceinline__ void coords(const Args& A, int batch, int& b, int& h, int& rank) {
  if (gridDim.x != (unsigned)(kCluster * batch) || gridDim.y != (unsigned)A.hv || gridDim.z != 1) __trap();
  b = blockIdx.x / kCluster;
  rank = blockIdx.x % kCluster;
  h = blockIdx.y;
}

// Columns rank·32 .. of the head: the pending fold, then the row; the norm's Σo² over the
// cluster. The CTAs arrived on the cluster barrier at their start.
template <int MB>
__device__ __forceinline__ void run_columns(const Args& A, const Geo& G, const Task& T, const PLay& P, int h, int m, const float* pendSh, int M,
                                            float* headS, int rank) {
  const int tid = tid_lin(), lane = tid & 31, part = tid >> 5;
  const int j = rank * kW + lane;
  const bool act = j < A.dv;
  const pipe::RowCoef R = pipe::prologue(A, G, T, h, m, pendSh, M, P, rank == 0);  // one CTA of the head writes the conv ring
  const pipe::PendCoef<MB> PC = pipe::pend_coef<MB>(A, G, pendSh, M);
  pipe::ColumnIn<MB> c;
  pipe::column_inputs<MB>(A, G, T, P, pendSh, M, PC, nullptr, j, act, c);
  pipe::wait_copies<0>();
  __syncthreads();
  pipe::block_passes<MB>(A, T, P, R, PC, c, P.buf, headS, j, act);
  __syncthreads();
  const int j0 = min(A.dv, rank * kW), j1 = min(A.dv, j0 + kW);
  const float part_ss = pipe::osm_sumsq(P, j0, j1);
  gdn_cluster::wait();  // every CTA of the cluster has started: its shared memory takes stores
  if (tid < kCluster) gdn_cluster::st(gdn_cluster::saddr(P.clu + rank), (unsigned)tid, part_ss);
  gdn_cluster::arrive();
  gdn_cluster::wait();
  // Added in rank order: the 4 CTAs get the same bits.
  float tot = 0.0f;
#pragma unroll
  for (int p = 0; p < kCluster; ++p) tot += P.clu[p];
  const float inv = 1.0f / sqrtf(tot / (float)A.dv + A.eps);
  if (part == 0 && act) store_y(A, (size_t)T.row0 * A.hv * A.dv + (size_t)h * A.dv + j, A.normWeight[j] * P.osm[j] * inv * siluf_(P.zsm[j]));
}

__device__ __forceinline__ void run_task(const Args& A, const Geo& G, const Task& T, const PLay& P, int rank) {
  if (T.nh != 1 || T.nPendFold > A.maxK || T.nrows != 1) __trap();
  const int h = T.h0, m = h - T.g * G.r;
  float* headS = pipe::head_state(A, T.slot, h);
  const float* pendSh = T.pendK + (size_t)h * A.maxK * G.stashRow;
  const int M = T.nPendFold;
  if (M == 0) run_columns<0>(A, G, T, P, h, m, pendSh, M, headS, rank);
  else if (M <= 4) run_columns<4>(A, G, T, P, h, m, pendSh, M, headS, rank);
  else run_columns<8>(A, G, T, P, h, m, pendSh, M, headS, rank);
}

// The CTA's block of the head's state starts copying.
__device__ __forceinline__ void issue_own(const Args& A, const PLay& P, int slot, int h, int rank) {
  pipe::issue_block(pipe::head_state(A, slot, h), rank, (A.dv + kW - 1) / kW, P.buf, A.dk, A.dv);
}

__device__ __forceinline__ void recurrent_entry(const Args& A, int mode, int batch, int k) {
  check_split(A);
  if (mode != 0 || k != 1) __trap();  // decode steps only
  int b, h, rank;
  coords(A, batch, b, h, rank);
  const int slot = A.slots[b];
  if (slot < 0) return;  // the whole cluster (same b)
  gdn_cluster::arrive();
  const PLay P = pipe::pipe_lay(A, 1);
  issue_own(A, P, slot, h, rank);
  const Geo G = geo_of(A);
  Task T;
  if (!make_task(A, G, b, h, A.rowStarts[b], 1, true, false, T) || T.nrows != 1) {
    gdn_cluster::wait();
    return;
  }
  run_task(A, G, T, P, rank);
}

}  // namespace split
}  // namespace gdn
