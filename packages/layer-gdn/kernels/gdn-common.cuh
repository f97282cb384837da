// Gated DeltaNet kernels: what every kernel of this package shares (arguments, the task of one
// CTA, the causal conv inputs, the conv ring / conv stash writes). Layouts: ../KERNELS.md.
//
// Conv ring and conv stash races. A slot's ring and conv stash are shared by every CTA of the
// sequence; q and k channels of key head g are read by the r = H_v/H_k CTAs of g. Each CTA writes
// only the channels it owns, at its very end. A row at position p writes ring[p mod K], which held
// p − K; the conv stash is a ring of 2·maxK rows by position (p mod 2·maxK). So:
// - a step that commits one row per sequence (decode, carried or not) reads ring positions
//   ≥ p − K + 1 only: race-free;
// - a write-on-accept verify writes neither: race-free;
// - a carried verify reads its pending rows (positions L..P0−1) from the conv stash and records
//   its new rows at P0..P0+k−1; since n + k ≤ 2·maxK the two sets of rows never share an entry,
//   and the ring takes the pending rows only (positions < P0, never read by the step's rows from
//   the ring): race-free;
// - a step that commits two or more rows would overwrite ring entries other CTAs of its key head
//   still read (unless it reads no ring: a fresh sequence). There, when r > 1, the CTA of the first
//   value head of each key head runs all r value heads of its key head one after the other, and
//   the others return ("group mode"). Only multi-row commits (tests, the prefill oracle) take it.
#pragma once
#include <stdint.h>
#include "gdn-pdl.cuh"
#include "gdn-step.cuh"

namespace gdn {

struct Args : gdn_step::Buffers<float> {
  int hk, hv, dk, dv, K, maxK;
  float eps;
  int yDtype;  // the row type y is stored in (gdn_step::store_y); 0 (f32) where a kernel has no such parameter
};

using gdn_step::store_y;

// What one CTA does for one batch position.
struct Task {
  int slot;
  int g;         // key head
  int h0, nh;    // value heads [h0, h0 + nh)
  int m;         // h0 − g·r (value-head mode: this CTA's index within its key head)
  bool group;    // this CTA owns every channel of key head g (else a share of them)
  int nPend;     // pending carried rows to fold first (positions L .. P0−1)
  int L;         // first pending position
  int P0;        // position of the first new row
  int row0;      // its row in qkvz / ba / y
  int nrows;     // new rows
  bool commit;   // state and ring take the new rows
  bool record;   // stash takes the new rows
  bool recordConv;  // conv stash takes their pre-conv inputs (carried verify)
  const float* pendK;  // stash of the pending rows (per head: + h·maxK·stashRow)
  int nPendFold;       // rows of pendK to fold into the state (carried: nPend; fold kernel: na)
  int ringEnd;         // the ring takes positions [max(L, ringEnd − K), ringEnd); none when ringEnd ≤ L
};

using gdn_step::Geo;
__device__ __forceinline__ Geo geo_of(const Args& A) { return gdn_step::geo_of(A); }

// Rows per slot of the conv stash: a ring by position of 2·maxK rows (KERNELS.md).
__device__ __forceinline__ int conv_stash_rows(const Args& A) { return 2 * A.maxK; }

// Where the conv input of position p ≥ 0 comes from, for a step of a slot whose new rows start at
// position P0 (qkvz row row0) with pending rows from position L: kind 1 the step's rows, 2 the
// conv stash (its row p mod 2·maxK), 3 the ring (its row p mod K); off: the element offset of that
// row in its buffer (qkvz, convStash, convRing).
struct ConvSource {
  int kind, off;
};
__device__ __forceinline__ ConvSource conv_source(const Args& A, const Geo& G, int slot, int P0, int L, int row0, int p) {
  if (p >= P0) return {1, (row0 + (p - P0)) * G.width};
  if (p >= L) return {2, (slot * conv_stash_rows(A) + p % conv_stash_rows(A)) * G.convDim};
  return {3, (slot * A.K + p % A.K) * G.convDim};
}

// Programmatic dependent launch (gdn-pdl.cuh).
using gdn_pdl::let_next_kernel_start;
using gdn_pdl::wait_previous_kernel;

__device__ __forceinline__ int tid_lin() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
__device__ __forceinline__ int nthreads() { return blockDim.x * blockDim.y * blockDim.z; }
__device__ __forceinline__ int bid_lin() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }

// The launch's CTA order (x fastest) over (batch position, value head): a grid [batch, H_v] as
// gdn-launch.ts takes b fastest, any other grid is linear with h fastest.
__device__ __forceinline__ bool batch_head_grid(int batch, int hv) { return gridDim.y == (unsigned)hv && gridDim.x == (unsigned)batch && gridDim.z == 1; }
__device__ __forceinline__ void coords_of(int batch, int hv, int lin, int& b, int& h) {
  if (batch_head_grid(batch, hv)) {
    b = lin % batch;
    h = lin / batch;
  } else {
    h = lin % hv;
    b = lin / hv;
  }
}

// (batch position, value head) of this CTA (coords_of its own index, read off blockIdx where it can).
__device__ __forceinline__ void cta_coords(int batch, int hv, int& b, int& h) {
  if (batch_head_grid(batch, hv)) {
    b = blockIdx.x;
    h = blockIdx.y;
  } else {
    coords_of(batch, hv, bid_lin(), b, h);
  }
}

// The CTA `ahead` places after this one in launch order; false when there is none.
__device__ __forceinline__ bool cta_ahead(int batch, int hv, int ahead, int& b, int& h) {
  coords_of(batch, hv, bid_lin() + ahead, b, h);
  return ahead > 0 && b < batch && h < hv;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Pre-conv input of conv channel c (qkvz column col) at position p, for a task whose new rows
// start at P0 (qkvz row row0), pending rows at L..P0−1 (conv stash ring), history below L (ring).
__device__ __forceinline__ float conv_input(const Args& A, const Geo& G, const Task& T, int c, int col, int p) {
  if (p < 0) return 0.0f;
  if (p >= T.P0) return A.qkvz[(size_t)(T.row0 + (p - T.P0)) * G.width + col];
  if (p >= T.L) return A.convStash[((size_t)T.slot * conv_stash_rows(A) + (p % conv_stash_rows(A))) * G.convDim + c];
  return A.convRing[((size_t)T.slot * A.K + (p % A.K)) * G.convDim + c];
}

__device__ __forceinline__ float conv_silu(const Args& A, const Geo& G, const Task& T, int c, int col, int pos) {
  const float* w = A.convWeight + (size_t)c * A.K;
  float acc = 0.0f;
  for (int tap = 0; tap < A.K; ++tap) acc += w[tap] * conv_input(A, G, T, c, col, pos - A.K + 1 + tap);
  return siluf_(acc);
}

// Sum of v over one warp (partial warps included); the total lands in lane 0.
__device__ __forceinline__ float warp_sum_to_lane0(float v) {
  const int tid = tid_lin(), nt = nthreads();
  const int lane = tid & 31, warp = tid >> 5;
  const int wsize = min(32, nt - warp * 32);
  if (wsize == 32) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  } else {
    const unsigned mask = (1u << wsize) - 1u;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float t = __shfl_down_sync(mask, v, o);
      if (lane + o < wsize) v += t;
    }
  }
  return v;
}

// Channels a CTA owns for ring / conv stash writes: group mode, every channel of key head g
// (q, k: 2·d_k; v of its r heads); value-head mode, v of its head and every r-th q/k channel.
__device__ __forceinline__ int owned_count(const Args& A, const Geo& G, const Task& T) {
  if (T.group) return 2 * A.dk + G.r * A.dv;
  return (2 * A.dk - T.m + G.r - 1) / G.r + A.dv;
}

__device__ __forceinline__ void owned_channel(const Args& A, const Geo& G, const Task& T, int idx, int& c, int& col) {
  const int nqk = T.group ? 2 * A.dk : (2 * A.dk - T.m + G.r - 1) / G.r;
  if (idx < nqk) {
    const int e = T.group ? idx : T.m + idx * G.r;  // 0..2·d_k: q then k of key head g
    c = e < A.dk ? T.g * A.dk + e : G.keyDim + T.g * A.dk + (e - A.dk);
    col = T.g * G.grp + e;
  } else {
    const int v = idx - nqk;
    const int mm = T.group ? v / A.dv : T.m;
    const int jj = T.group ? v - mm * A.dv : v;
    c = 2 * G.keyDim + (T.g * G.r + mm) * A.dv + jj;
    col = T.g * G.grp + 2 * A.dk + mm * A.dv + jj;
  }
}

// The ring entries of owned channel (c, col): positions [max(L, end − K), end) (only the last K
// survive), KMAX at a time, every load of a turn before its first store. A step that commits one
// row (or folds accepted rows) may call it before its own reads of history: the entries it writes
// held positions no CTA of the step reads.
template <int KMAX>
__device__ __forceinline__ void write_ring(const Args& A, const Geo& G, const Task& T, int c, int col) {
  const int end = T.ringEnd;
  if (end <= T.L) return;
  float* ring = A.convRing + (size_t)T.slot * A.K * G.convDim + c;
  for (int p0 = max(T.L, end - A.K); p0 < end; p0 += KMAX) {
    float v[KMAX];
#pragma unroll
    for (int e = 0; e < KMAX; ++e) v[e] = p0 + e < end ? conv_input(A, G, T, c, col, p0 + e) : 0.0f;
#pragma unroll
    for (int e = 0; e < KMAX; ++e)
      if (p0 + e < end) ring[(size_t)((p0 + e) % A.K) * G.convDim] = v[e];
  }
}

// The ring entries of owned channel idx (write_ring).
template <int KMAX>
__device__ __forceinline__ void write_ring_channel(const Args& A, const Geo& G, const Task& T, int idx) {
  int c, col;
  owned_channel(A, G, T, idx, c, col);
  write_ring<KMAX>(A, G, T, c, col);
}

// The ring takes the pending and new rows (write_ring), the conv stash the pre-conv inputs of the
// new rows at their positions' rows (carried verify). One thread per owned channel. Call after a
// barrier that follows every read of history by the CTA.
__device__ __forceinline__ void write_conv_state(const Args& A, const Geo& G, const Task& T) {
  if (T.ringEnd <= T.L && !T.recordConv) return;
  const int n = owned_count(A, G, T);
  const int tid = tid_lin(), nt = nthreads();
  const int R = conv_stash_rows(A);
  for (int idx = tid; idx < n; idx += nt) {
    int c, col;
    owned_channel(A, G, T, idx, c, col);
    write_ring<4>(A, G, T, c, col);
    if (T.recordConv) {
      for (int t = 0; t < T.nrows; ++t)
        A.convStash[((size_t)T.slot * R + ((T.P0 + t) % R)) * G.convDim + c] = A.qkvz[(size_t)(T.row0 + t) * G.width + col];
    }
  }
}

// Shapes these kernels support: H_v a multiple of H_k, d_k ≤ 128, d_v ≤ 256, a block of at least
// d_v threads. Anything else is a programming error of the caller: the kernel traps (the launch
// fails loudly) rather than return wrong numbers. (No printf: its call costs registers.)
// The shape fields every kernel checks; check_shape adds the kernels' d_v threads (thread j: column j).
__device__ __forceinline__ void check_dims(const Args& A) {
  const bool ok = A.hk > 0 && A.hv > 0 && A.hv % A.hk == 0 && A.dk >= 1 && A.dk <= 128 && A.dv >= 1 && A.dv <= 256 && A.K >= 1 && A.maxK >= 1;
  if (!ok) __trap();
}
__device__ __forceinline__ void check_shape(const Args& A) {
  check_dims(A);
  if (nthreads() < A.dv) __trap();
}

// What a task reads from the step's tables for batch position b: its slot (< 0: padding), the
// pending rows of the slot, the committed length and the first row in qkvz.
struct TaskIn {
  int slot, nPend, P0, row0;
};
__device__ __forceinline__ TaskIn task_in(const Args& A, int b, int slot) {
  return {slot, slot >= 0 && A.pending ? (int)A.pending[slot] : 0, A.seqLens[b], A.rowStarts[b]};
}

// task_in of a decode step's batch position b (its row at rowStarts[b]): the tables that do not
// depend on the slot load with it, in one round (only pending[slot] waits for it); slot −1: padding.
__device__ __forceinline__ TaskIn decode_task_in(const Args& A, int b) {
  const int slot = A.slots[b], P0 = A.seqLens[b], row0 = A.rowStarts[b];
  return {slot, slot >= 0 && A.pending ? (int)A.pending[slot] : 0, P0, row0};
}

// Builds the task of (b, h) for a step of `nrows` new rows from I.row0 at position I.P0 (pending
// rows folded first when there are any). Returns false when this CTA has nothing to do (padding,
// or a non-leading CTA of a key head in group mode).
__device__ __forceinline__ bool task_of(const Args& A, const Geo& G, int h, const TaskIn& I, int nrows, bool commit, bool record, Task& T) {
  if (I.slot < 0) return false;
  T.slot = I.slot;
  T.g = h / G.r;
  T.nPend = I.nPend;
  T.P0 = I.P0;
  T.L = T.P0 - I.nPend;
  T.row0 = I.row0;
  T.nrows = nrows;
  T.commit = commit;
  T.record = record;
  T.recordConv = record && A.pending != nullptr;
  T.pendK = A.stash + (size_t)I.slot * G.stashSeq;
  T.nPendFold = I.nPend;
  // Commit: pending and new rows; carried verify: the pending rows only; write-on-accept verify: none.
  T.ringEnd = commit ? T.P0 + nrows : (T.recordConv ? T.P0 : T.L);
  // Only a commit of two or more rows that reads ring history races (see the top of this file);
  // a carried verify does not: the conv stash is a ring of 2·maxK rows by position.
  const int histLo = max(0, T.P0 - A.K + 1);
  const bool readsRing = T.L > histLo;
  const bool racy = G.r > 1 && commit && nrows >= 2 && readsRing;
  T.group = racy || G.r == 1;
  if (racy) {
    if (h % G.r != 0) return false;
    T.h0 = h;
    T.nh = G.r;
  } else {
    T.h0 = h;
    T.nh = 1;
  }
  T.m = T.h0 - T.g * G.r;
  return true;
}

// task_of with the tables read here (rows from row0).
__device__ __forceinline__ bool make_task(const Args& A, const Geo& G, int b, int h, int row0, int nrows, bool commit, bool record,
                                          Task& T) {
  const int slot = A.slots[b];
  if (slot < 0) return false;
  TaskIn I = task_in(A, b, slot);
  I.row0 = row0;
  return task_of(A, G, h, I, nrows, commit, record, T);
}

// The fold this CTA runs: batch position b, value head h, its slot and na accepted rows of k
// (false: none).
__device__ __forceinline__ bool fold_cta(const Args& A, const uint32_t* naTab, int batch, int k, int& b, int& h, int& slot, int& na) {
  cta_coords(batch, A.hv, b, h);
  if (b >= batch || h >= A.hv) return false;
  slot = A.slots[b];
  if (slot < 0) return false;
  na = (int)naTab[b];
  return na > 0 && na <= k && na <= A.maxK;
}

// The fold of batch position b's first na verify rows (of k) into slot's state and ring, head h.
__device__ __forceinline__ void fold_task(const Args& A, const Geo& G, int b, int h, int slot, int na, int k, Task& T) {
  T.slot = slot;
  T.g = h / G.r;
  T.h0 = h;
  T.nh = 1;
  T.m = h - T.g * G.r;
  T.group = G.r == 1;
  T.nPend = 0;
  T.P0 = A.seqLens[b];
  T.L = T.P0;
  T.row0 = b * k;
  T.nrows = 0;
  T.commit = true;
  T.record = false;
  T.recordConv = false;
  T.pendK = A.stash + (size_t)slot * G.stashSeq;
  T.nPendFold = na;
  T.ringEnd = T.P0 + na;
}


}  // namespace gdn
