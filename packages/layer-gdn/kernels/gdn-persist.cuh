// Gated DeltaNet decode steps and the write-on-accept fold, persistent and column-pipelined
// across heads (the `persist` entry points gdn_recurrent_persist, gdn_fold_persist). Layouts and
// semantics: ../KERNELS.md; the per-column math is gdn-pipe.cuh's (block_passes).
//
// Why: a pipe CTA streams one head's 4 blocks through 2 buffers and exits. Between its blocks and
// around them (task reads, conv and gates, the norm, the conv ring) it has little or nothing in
// flight, and its successor on the SM starts from zero: measured, its CTAs kept the DRAM far less
// busy than the bare read-modify-write of the same bytes (docs/benchmarks.md, GDN decode).
// Here a CTA runs a list of heads (w = blockIdx.x + i·gridDim.x over batch × H_v) and its blocks
// form one sequence through GDN_PERSIST_NB buffers: while it computes block s it has blocks
// s+1 .. s+NB−1 in flight, which at the end of a head are the next head's, so the copies go on
// through the next head's task reads and prologue. The per-head loop is pipe's stream_head.
// Measured once pipe's prologue loaded all it needs in one round (and before the two shared
// stream_head): even with pipe on decode, slower on carried decode at batch 32, so the layer runs
// pipe; this stays in the A/B and the GPU suite.
//
// Launch: grid [n] for any n ≥ ceil(batch·H_v / kMaxHeads) (gdn-launch.ts: 4 per SM), 128
// threads, the dynamic shared memory of persist_smem_floats() (gdn-launch.ts computes the same).
// Takes what the pipe kernels take; decode steps only (mode 0, k = 1), else traps.
#pragma once
#include "gdn-pipe.cuh"

#ifndef GDN_PERSIST_NB
#define GDN_PERSIST_NB 3  // blocks of 16 KiB in shared memory per CTA: 4 CTAs per SM
#endif
#ifndef GDN_PERSIST_MAXNREG
#define GDN_PERSIST_MAXNREG 128
#endif

namespace gdn {
namespace persist {

using pipe::kThreads;
using pipe::kW;
using pipe::PLay;
constexpr int kNB = GDN_PERSIST_NB;
constexpr int kMaxHeads = 64;  // heads per CTA (their slots wait in shared memory)
static_assert(kNB >= 2 && kNB <= 8, "GDN_PERSIST_NB: 2 to 8 blocks");

// Dynamic shared memory, in floats: the pipe layout with NB blocks, then the slots of the CTA's heads.
__host__ __device__ __forceinline__ int persist_smem_floats(int dk, int dv, int maxK) { return pipe::pipe_smem_floats(dk, dv, maxK, kNB) + kMaxHeads; }

__device__ __forceinline__ void check_persist(const Args& A, int batch) {
  const int heads = batch * A.hv;
  const bool ok = A.maxK <= fast::kMaxRows && A.K <= fast::kMaxConv && A.dk <= pipe::kParts * pipe::kPartRows && A.dv % 4 == 0 &&
                  nthreads() == kThreads && gridDim.y == 1 && gridDim.z == 1 && (heads + (int)gridDim.x - 1) / (int)gridDim.x <= kMaxHeads &&
                  fast::dyn_smem_bytes() >= 4u * (unsigned)persist_smem_floats(A.dk, A.dv, A.maxK);
  if (!ok) __trap();
}

// The CTA's heads, their slots and the sequence of their blocks.
struct Work {
  int n;       // heads of this CTA
  int nblk;    // column blocks per head
  int* slots;  // [n] in shared memory (−1: padding, or no fold to run)
};

__device__ __forceinline__ int head_index(int i) { return (int)blockIdx.x + i * (int)gridDim.x; }

// Block s of the sequence (head s / nblk, block s % nblk) into buffer s % NB: one cp.async group
// (empty past the end or for a head without a slot).
__device__ __forceinline__ void issue(const Args& A, const Work& W, const PLay& P, int s) {
  const int i = s / W.nblk, c = s - i * W.nblk;
  const int slot = i < W.n ? W.slots[i] : -1;
  float* dst = P.buf + (s % kNB) * P.L.dkp * kW;
  if (slot < 0) pipe::issue_block(nullptr, W.nblk, W.nblk, dst, A.dk, A.dv);  // just the commit
  else pipe::issue_block(pipe::head_state(A, slot, head_index(i) % A.hv), c, W.nblk, dst, A.dk, A.dv);
}

// One head of the list (run: it has a task; uniform over the CTA): pipe's stream_head, the
// blocks past its last being the next heads' (issue). s: the sequence index of its first block,
// advanced past its last. A head without a task only keeps the sequence going.
template <int MB>
__device__ __forceinline__ void run_head(const Args& A, const Geo& G, const Work& W, const PLay& P, const Task& T, bool run, int h, int& s) {
  if (!run) {
    for (int cb = 0; cb < W.nblk; ++cb, ++s) {
      pipe::wait_block<kNB>();
      issue(A, W, P, s + kNB - 1);
    }
    return;
  }
  const int m = h - T.g * G.r;
  const float* pendSh = T.pendK + (size_t)h * A.maxK * G.stashRow;
  const int M = T.nPendFold;
  const pipe::RowCoef R = pipe::prologue(A, G, T, h, m, pendSh, M, P, true);
  pipe::stream_head<MB, kNB>(A, G, T, P, R, h, pendSh, M, pipe::head_state(A, T.slot, h), s, [&](int next) { issue(A, W, P, next); });
  s += W.nblk;
}

// The slots of the CTA's heads into shared memory (fold: −1 where nothing is accepted), the
// first NB − 1 blocks in flight.
template <class SlotOf>
__device__ __forceinline__ Work start(const Args& A, const PLay& P, int batch, SlotOf slotOf) {
  Work W;
  const int heads = batch * A.hv;
  W.n = max(0, (heads - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x);
  W.nblk = (A.dv + kW - 1) / kW;
  W.slots = reinterpret_cast<int*>(P.end);
  for (int i = tid_lin(); i < W.n; i += kThreads) W.slots[i] = slotOf(head_index(i) / A.hv);
  __syncthreads();
  for (int s = 0; s < kNB - 1; ++s) issue(A, W, P, s);
  return W;
}

// The heads in order (inOf: the TaskIn of batch position b and its slot). Loading the next head's
// TaskIn while one head runs was tried: the values spilled and it was slower at batch 256.
template <class InOf, class TaskOf>
__device__ __forceinline__ void run_list(const Args& A, const Work& W, const PLay& P, InOf inOf, TaskOf taskOf) {
  const Geo G = geo_of(A);
  int s = 0;
  for (int i = 0; i < W.n; ++i) {
    const int w = head_index(i), b = w / A.hv, h = w % A.hv;
    const TaskIn I = inOf(b, W.slots[i]);
    Task T;
    const bool run = I.slot >= 0 && taskOf(G, b, h, I, T);
    if (run && (T.nh != 1 || T.nPendFold > A.maxK || T.nrows > 1)) __trap();
    __syncthreads();  // the previous head's shared memory is free
    const int M = run ? T.nPendFold : 0;
    if (M == 0) run_head<0>(A, G, W, P, T, run, h, s);
    else if (M <= 4) run_head<4>(A, G, W, P, T, run, h, s);
    else run_head<8>(A, G, W, P, T, run, h, s);
  }
}

__device__ __forceinline__ void recurrent_entry(const Args& A, int mode, int batch, int k) {
  check_persist(A, batch);
  if (mode != 0 || k != 1) __trap();  // decode steps only
  const PLay P = pipe::pipe_lay(A, kNB);
  const Work W = start(A, P, batch, [&](int b) { return A.slots[b]; });
  run_list(
      A, W, P, [&](int b, int slot) { return task_in(A, b, slot); },
      [&](const Geo& G, int, int h, const TaskIn& I, Task& T) { return task_of(A, G, h, I, 1, true, false, T); });
}

__device__ __forceinline__ void fold_entry(const Args& A, const uint32_t* naTab, int batch, int k) {
  check_persist(A, batch);
  const PLay P = pipe::pipe_lay(A, kNB);
  const Work W = start(A, P, batch, [&](int b) {
    int slot, na;
    return fold_slot(A, naTab, k, b, slot, na) ? slot : -1;
  });
  run_list(
      A, W, P, [&](int, int slot) { return TaskIn{slot, 0, 0, 0}; },  // fold_task reads what it needs
      [&](const Geo& G, int b, int h, const TaskIn& I, Task& T) {
        fold_task(A, G, b, h, I.slot, (int)naTab[b], k, T);
        return true;
      });
}

}  // namespace persist
}  // namespace gdn
