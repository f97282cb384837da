// Gated DeltaNet two-kernel decode, first kernel (gdn_decode_prep): per (batch position, key head)
// of a decode step, everything its rows need but the state — the conv and SiLU of the key head's
// channels, the gates, the L2 norms of q and k — written to the prep buffer as one record per value
// head, and the conv ring committed. Layouts: ../KERNELS.md ("Two-kernel decode").
//
// Why a kernel of its own: a decode CTA that holds its head's state while its prologue runs
// keeps 64 KiB of registers or shared memory waiting on that prologue's chain of small loads
// (tables, then conv inputs), and under a saturated memory system every trip of the chain
// queues behind the state's own loads (docs/benchmarks.md: the state kernel without a prologue
// reaches 89 % of the copy rate at batch 256, with it 60 %). Why a CTA per key head: a CTA per
// (position, value head) ran pipe's prologue, a chain of dependent trips with little in flight
// (79 µs at batch 256, 12 % of the DRAM bandwidth); one per position had too few CTAs (40 µs).
// Here each thread's conv inputs for kCh channels load together, q and k are normalised once per
// key head, and the CTA owns its key head's channels (no ring race to reason about).
//
// Launch: grid [batch, H_k], kPrepThreads threads, the dynamic shared memory of prep_smem_floats()
// (gdn-decode-launch.ts computes the same). Per real position b and value head h of key head g it
// writes prep[(b·H_v + h)·stride ..]: k̂ [d_kp] (zero past d_k), q̂ [d_kp] (with 1/√d_k), v [d_vp]
// (zero past d_v), then β, α = e^g, k̂·q̂, 0 (stride = 2·d_kp + d_vp + 4). In carried mode the
// pending rows' conv inputs go to the ring here too; their state fold is gdn_decode_state's.
#pragma once
#include "gdn-common.cuh"
#include "gdn-fast.cuh"

namespace gdn {
namespace decode {

constexpr int kPrepThreads = 128;  // 4 warps: each warp runs the CTA's setup once (256 threads: 1 050 instructions per warp, 0.78 issued per scheduler cycle)
constexpr int kCh = 4;  // channels per thread per trip (their loads issue together)
constexpr int kPrepCtasPerSm = 8;  // 64 registers: the CTAs are latency-bound, so as many as fit

__host__ __device__ __forceinline__ int prep_stride(int dk, int dv) { return 2 * fast::pad4(dk) + fast::pad4(dv) + 4; }

// Dynamic shared memory, in floats: the key head's conv outputs [2·d_k + r·d_v], the warps' sums
// [3][kPrepThreads / 32], its value heads' β, α [2·r].
__host__ __device__ __forceinline__ int prep_smem_floats(int dk, int dv, int r) { return fast::pad4(2 * dk + r * dv) + 3 * (kPrepThreads / 32) + 2 * r; }

__device__ __forceinline__ void check_prep(const Args& A, const Geo& G) {
  const bool ok = A.K <= fast::kMaxConv && A.maxK <= fast::kMaxRows && nthreads() == kPrepThreads && gridDim.z == 1 &&
                  gridDim.y == (unsigned)A.hk && fast::dyn_smem_bytes() >= 4u * (unsigned)prep_smem_floats(A.dk, A.dv, G.r);
  if (!ok) __trap();
}

// Where the conv input of tap t (position P0 − K + 1 + t) comes from: nothing (a negative
// position), the row itself, the conv stash (a pending row) or the ring. The same for every channel.
struct Taps {
  const float* base[fast::kMaxConv];  // row start (qkvz: the row; conv stash / ring: position's row)
  int kind[fast::kMaxConv];           // 0 zero, 1 qkvz, 2 conv stash, 3 ring
  float* ringRow[fast::kMaxConv];     // the ring row tap t's position commits to (pending and the row), else null
};

// Conv channel of channel l of key head g (its q, k, then the v of its r value heads); its qkvz
// column is g·grp + l (a key head's q, k and v are contiguous in its group of the row).
__device__ __forceinline__ int key_head_channel(const Args& A, const Geo& G, int g, int l) {
  return l < A.dk ? g * A.dk + l : l < 2 * A.dk ? G.keyDim + g * A.dk + l - A.dk : 2 * G.keyDim + g * G.r * A.dv + l - 2 * A.dk;
}

// Ring and conv stash rows by position, walked from p0 = P0 − K + 1 with one division each: p0 mod K
// is (P0 + 1) mod K, p0 mod R is (P0 + 2R − K + 1) mod R (R = 2·maxK ≥ 2, K ≤ 4: non-negative).
// The rule is gdn-common.cuh conv_source's (p ≥ P0: the row; p ≥ P0 − n: the conv stash; else the
// ring); walked here rather than called per tap, as measured (docs/benchmarks.md, fifth round).
__device__ __forceinline__ Taps taps_of(const Args& A, const Geo& G, int slot, int P0, int n, int row0) {
  Taps T;
  const int R = conv_stash_rows(A);
  const int p0 = P0 - A.K + 1;
  int rk = (P0 + 1) % A.K, rr = (P0 + 2 * R - A.K + 1) % R;
#pragma unroll
  for (int t = 0; t < fast::kMaxConv; ++t, rk = rk + 1 == A.K ? 0 : rk + 1, rr = rr + 1 == R ? 0 : rr + 1) {
    const int p = p0 + t;
    T.kind[t] = 0, T.base[t] = nullptr, T.ringRow[t] = nullptr;
    if (t >= A.K || p < 0) continue;
    float* ring = A.convRing + ((size_t)slot * A.K + rk) * G.convDim;
    if (p == P0) T.kind[t] = 1, T.base[t] = A.qkvz + (size_t)row0 * G.width, T.ringRow[t] = ring;
    else if (p >= P0 - n) T.kind[t] = 2, T.base[t] = A.convStash + ((size_t)slot * R + rr) * G.convDim, T.ringRow[t] = ring;
    else T.kind[t] = 3, T.base[t] = ring;
  }
  return T;
}

__device__ __forceinline__ void prep_entry(const Args& A, float* prep, int batch) {
  const Geo G = geo_of(A);
  check_prep(A, G);
  const int b = blockIdx.x, g = blockIdx.y;
  if (b >= batch || g >= A.hk) return;
  const TaskIn I = decode_task_in(A, b);
  if (I.slot < 0) return;
  if (I.nPend > A.maxK || I.nPend > I.P0) __trap();
  const int nch = 2 * A.dk + G.r * A.dv;  // the key head's channels: q, k, v of its r value heads
  float* mixed = fast::dyn_smem();        // [nch] in that order
  float* red = mixed + fast::pad4(nch);   // [3][kPrepThreads / 32] warp sums
  float* gates = red + 3 * (kPrepThreads / 32);  // [r][2]: β, α
  const int tid = tid_lin(), lane = tid & 31, warp = tid >> 5;
  const Taps T = taps_of(A, G, I.slot, I.P0, I.nPend, I.row0);
  // The gates' inputs load with the conv inputs.
  float bRaw = 0.0f, aRaw = 0.0f, aLogH = 0.0f, dtB = 0.0f;
  if (tid < G.r) {
    const float* bar = A.ba + (size_t)I.row0 * 2 * A.hv + g * 2 * G.r;
    bRaw = bar[tid], aRaw = bar[G.r + tid], aLogH = A.aLog[g * G.r + tid], dtB = A.dtBias[g * G.r + tid];
  }
  // Conv + SiLU of kCh channels per trip: all their inputs and weights load first; the ring takes
  // the inputs of the pending rows and of the row (positions P0 − n .. P0; a ring of K rows by
  // position, so the entries written are not among those read).
  // Channel l of the key head: conv channel c (q, k, then v of its value heads), qkvz column
  // g·grp + l (a key head's q, k and v are contiguous in its group of the row).
  for (int l0 = tid; l0 < nch; l0 += kCh * kPrepThreads) {
    float x[kCh][fast::kMaxConv], w[kCh][fast::kMaxConv];
    int cs[kCh];
#pragma unroll
    for (int e = 0; e < kCh; ++e) {
      const int l = l0 + e * kPrepThreads;
      const bool in = l < nch;
      const int c = key_head_channel(A, G, g, l);
      cs[e] = c;
      const int col = g * G.grp + l;
#pragma unroll
      for (int t = 0; t < fast::kMaxConv; ++t) {
        const int kd = T.kind[t];
        x[e][t] = (in && kd) ? T.base[t][kd == 1 ? col : c] : 0.0f;
        w[e][t] = (in && t < A.K) ? A.convWeight[(size_t)c * A.K + t] : 0.0f;
      }
    }
#pragma unroll
    for (int e = 0; e < kCh; ++e) {
      const int l = l0 + e * kPrepThreads;
      if (l >= nch) continue;
      float acc = 0.0f;
#pragma unroll
      for (int t = 0; t < fast::kMaxConv; ++t) {
        acc = fmaf(w[e][t], x[e][t], acc);
        if (T.ringRow[t]) T.ringRow[t][cs[e]] = x[e][t];
      }
      mixed[l] = siluf_(acc);
    }
  }
  if (tid < G.r) {
    gates[2 * tid] = sigmoidf_(bRaw);
    gates[2 * tid + 1] = expf(-expf(aLogH) * softplusf_(aRaw + dtB));
  }
  __syncthreads();
  // Σq², Σk², k·q of the key head: per thread, per warp (tree), then the warps in order.
  float sq = 0.0f, sk = 0.0f, kq = 0.0f;
  for (int i = tid; i < A.dk; i += kPrepThreads) {
    const float q = mixed[i], k = mixed[A.dk + i];
    sq = fmaf(q, q, sq), sk = fmaf(k, k, sk), kq = fmaf(k, q, kq);
  }
  constexpr int kWarpsP = kPrepThreads / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    sq += __shfl_xor_sync(0xffffffffu, sq, o);
    sk += __shfl_xor_sync(0xffffffffu, sk, o);
    kq += __shfl_xor_sync(0xffffffffu, kq, o);
  }
  if (lane == 0) red[warp] = sq, red[kWarpsP + warp] = sk, red[2 * kWarpsP + warp] = kq;
  __syncthreads();
  float SQ = 0.0f, SK = 0.0f, KQ = 0.0f;
#pragma unroll
  for (int v = 0; v < kWarpsP; ++v) SQ += red[v], SK += red[kWarpsP + v], KQ += red[2 * kWarpsP + v];
  const float fk = 1.0f / sqrtf(SK + 1e-6f);
  const float fq = (1.0f / sqrtf((float)A.dk)) / sqrtf(SQ + 1e-6f);
  // The records of the key head's r value heads, written in order (coalesced).
  const int dkp = fast::pad4(A.dk), dvp = fast::pad4(A.dv), stride = prep_stride(A.dk, A.dv);
  // (k̂ and q̂ are the same for the key head's r records; each part is its own loop, no per-element branches.)
  for (int m = 0; m < G.r; ++m) {
    float* out = prep + ((size_t)b * A.hv + g * G.r + m) * stride;
    for (int i = tid; i < dkp; i += kPrepThreads) {
      out[i] = i < A.dk ? mixed[A.dk + i] * fk : 0.0f;
      out[dkp + i] = i < A.dk ? mixed[i] * fq : 0.0f;
    }
    for (int j = tid; j < dvp; j += kPrepThreads) out[2 * dkp + j] = j < A.dv ? mixed[2 * A.dk + m * A.dv + j] : 0.0f;
    if (tid < 4) out[2 * dkp + dvp + tid] = tid < 2 ? gates[2 * m + tid] : tid == 2 ? fk * fq * KQ : 0.0f;
  }
}

}  // namespace decode
}  // namespace gdn
