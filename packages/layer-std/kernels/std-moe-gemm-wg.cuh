// The grouped expert GEMM of one CTA on wgmma (sm_90a, or the emulator's sm_90 build), for
// std-moe-gemm-16bit.cu (bf16 / f16 weights) and std-moe-gemm.cu (block-FP8 weights): BM entries
// (one warpgroup per 64) × 128 weight rows (up: 64 columns of I as gate and up rows both, so
// SiLU·mul is done in registers; down: 128 columns of D), m64n128k16 with both operands K-major
// in shared memory under the 128-byte swizzle; k in steps of 64 through S stages filled by
// cp.async from every thread, S − 1 − F ahead, where F wgmma groups stay in flight across a step:
// the stage a load overwrites was read F + 1 steps back, which each warpgroup has waited for
// (wgmma.wait_group F) before the barrier the load follows.
//
// FP8 weights (E4M3 codes [n][k], f32 scales per 128 × 128 block): a stage holds the codes, each
// thread converts the 16 it copied into the one bf16 / f16 weight tile (exact) after they land,
// and the products of each 128-wide k block go to their own accumulators, multiplied by the
// block's scale in f32 and added when the block ends (as cuda-backend's gemm-fp8 and the wmma
// kernels of std-moe-gemm.cu). One converted tile, so F = 0: a step's products are done before
// the barrier after which the next step converts.
//
// Either way the k order is fixed and there is no split-k, so an entry's result depends on
// nothing else in the batch, and tiles of 64 or 128 entries give it the same bits.
#pragma once

#include "std-common.cuh"
#include "std-mma.cuh"
#include "std-moe-groups.cuh"

namespace stdk {

/** Weight rows of a CTA's tile. */
constexpr int kGemmBW = 128;
/** Threads of a tile of BM entries: two an entry (a warpgroup per 64 on wgmma). */
template <int BM>
constexpr int kGemmThreadsOf = 2 * BM;

#ifdef STD_WGMMA
constexpr int kWgBK = 64;
/** A stage: BM input rows, then the weight tile's 128 rows (16-bit: 128 bytes each, swizzled; FP8: 64 codes each, plain). */
template <int BM, bool FP8>
constexpr int kWgStageBytes = BM * 128 + kGemmBW * (FP8 ? kWgBK : 128);
/** S stages, FP8's converted weight tile, and the 1024-byte alignment of the swizzle. */
template <int BM, int S, bool FP8>
constexpr unsigned kWgSmemBytes = S * kWgStageBytes<BM, FP8> + (FP8 ? kGemmBW * 128 : 0) + 1024;

/** A weight element: an FP8 code, or a value of the row type. */
template <typename T, bool FP8>
using WeightOf = std::conditional_t<FP8, uint8_t, T>;

/**
 * The grouped GEMM of one CTA. P = 2: gate and up (weights [E][2I][D], N = I, K = D, rows of x by
 * rj / topK, output h[rj] = silu(g) · u); P = 1: down (weights [E][D][I], N = D, K = I, rows of h
 * by rj, output y[rj]). Weights of T, or FP8 codes with `scales` [E][P][⌈N / 128⌉][⌈K / 128⌉].
 */
template <typename T, bool FP8, int P, int BM, int S, int F>
__device__ void grouped_gemm_wg(unsigned char* smemRaw, const T* __restrict__ input, const int32_t* __restrict__ groups, const WeightOf<T, FP8>* __restrict__ weights,
                                const float* __restrict__ scales, T* __restrict__ out, int N, int K, int experts, int rowDiv) {
  static_assert(!FP8 || F == 0, "FP8 weights: one converted tile, whose products end before the next step converts");
  constexpr int NC = kGemmBW / P;
  constexpr int kThreads = kGemmThreadsOf<BM>;
  constexpr int kRowStep = kThreads / 8;  // rows apart of one thread's chunks (8 threads a 128-byte row)
  constexpr int kARows = BM / kRowStep, kBRows = kGemmBW / kRowStep;
  constexpr int kCodeStep = kThreads / 4, kCodeRows = kGemmBW / kCodeStep;  // FP8: 4 threads a row of 64 codes
  constexpr int kATileBytes = BM * 128;
  constexpr int kStage = kWgStageBytes<BM, FP8>;
  const Groups gr(groups, experts);
  const int n0 = blockIdx.y * NC;
  const int tid = threadIdx.x;
  int e, q0, q1;
  if (!start_gemm_tile<BM, NC>(gr, out, N, n0, e, q0, q1)) return;
  using W = WeightOf<T, FP8>;
  const W* we = weights + (size_t)e * P * N * K;
  unsigned char* smem = smemRaw + ((1024u - (smem_u32(smemRaw) & 1023u)) & 1023u);
  const uint32_t base = smem_u32(smem);
  unsigned char* converted = smem + S * kStage;  // FP8: the weight tile in T

  // This thread's 16-byte chunk c of rows tid / 8 + kRowStep·i of each stage's A tile (and of the
  // 16-bit weight tile); FP8: 16 codes cc … cc + 15 of weight rows tid / 4 + kCodeStep·i. Input rows
  // past the tile are zeroed once and never loaded (their products are not stored).
  const int c = tid & 7, cc = (tid & 3) * 16;
  const T* arow[kARows];
  const W* brow[FP8 ? kCodeRows : kBRows];
#pragma unroll
  for (int i = 0; i < kARows; i++) {
    const int r = (tid >> 3) + kRowStep * i;
    arow[i] = q0 + r < q1 ? input + (size_t)(gr.order[q0 + r] / rowDiv) * K : nullptr;
    if (!arow[i])
      for (int s = 0; s < S; s++) *reinterpret_cast<uint4*>(smem + s * kStage + sw128_offset(r, c)) = make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < (FP8 ? kCodeRows : kBRows); i++) {
    // Weight row r of the tile: up, rows 0..63 gate and 64..127 up of columns n0..n0 + 63; down, columns n0 + r.
    const int r = FP8 ? (tid >> 2) + kCodeStep * i : (tid >> 3) + kRowStep * i;
    const int n = P == 2 ? n0 + (r & 63) : n0 + r;
    brow[i] = n < N ? we + ((P == 2 && r >= 64) ? (size_t)N * K : 0) + (size_t)n * K : nullptr;
  }
  auto load_stage = [&](int s, int k0) {
    unsigned char* st = smem + s * kStage;
    const bool kin = k0 + c * 8 < K;
#pragma unroll
    for (int i = 0; i < kARows; i++)
      if (arow[i]) cp_async16(st + sw128_offset((tid >> 3) + kRowStep * i, c), kin ? arow[i] + k0 + c * 8 : input, kin);
    if constexpr (FP8) {
      const bool cin = k0 + cc < K;
#pragma unroll
      for (int i = 0; i < kCodeRows; i++)
        cp_async16(st + kATileBytes + ((tid >> 2) + kCodeStep * i) * kWgBK + cc, brow[i] && cin ? brow[i] + k0 + cc : weights, brow[i] && cin);
    } else {
#pragma unroll
      for (int i = 0; i < kBRows; i++)
        cp_async16(st + kATileBytes + sw128_offset((tid >> 3) + kRowStep * i, c), brow[i] && kin ? brow[i] + k0 + c * 8 : weights, brow[i] && kin);
    }
  };
  // FP8: this thread's codes of stage s (landed) into the weight tile, 8 values a 16-byte chunk.
  auto convert_stage = [&](int s) {
    const unsigned char* st = smem + s * kStage + kATileBytes;
#pragma unroll
    for (int i = 0; i < kCodeRows; i++) {
      const int r = (tid >> 2) + kCodeStep * i;
      uint4 lo, hi;
      e4m3x16_to<T>(*reinterpret_cast<const uint4*>(st + r * kWgBK + cc), lo, hi);
      *reinterpret_cast<uint4*>(converted + sw128_offset(r, cc / 8)) = lo;
      *reinterpret_cast<uint4*>(converted + sw128_offset(r, cc / 8 + 1)) = hi;
    }
  };
  // FP8 block scales of the tile's rows: the gate rows' block and the up rows' (one 128-row block each: n0 is a multiple of NC).
  const float* sFirst = nullptr;
  const float* sSecond = nullptr;
  if constexpr (FP8) {
    const int kBlocks = (K + metrale::kFp8Block - 1) / metrale::kFp8Block, nBlocks = (N + metrale::kFp8Block - 1) / metrale::kFp8Block;
    sFirst = scales + ((size_t)P * e * nBlocks + n0 / metrale::kFp8Block) * kBlocks;
    sSecond = P == 2 ? sFirst + (size_t)nBlocks * kBlocks : sFirst;
  }

  const int wg = tid >> 7;
  float acc[64];
  float part[FP8 ? 64 : 1];  // FP8: the current k block's sums
#pragma unroll
  for (int i = 0; i < 64; i++) acc[i] = 0.f;
  if constexpr (FP8) {
#pragma unroll
    for (int i = 0; i < 64; i++) part[i] = 0.f;
  }
  const int kTiles = (K + kWgBK - 1) / kWgBK;
  constexpr int ahead = S - 1 - F;
  static_assert(ahead >= 1, "no stage left to load ahead");
#pragma unroll
  for (int s = 0; s < ahead; s++) {
    if (s < kTiles) load_stage(s, s * kWgBK);
    cp_async_commit();
  }
  for (int kt = 0; kt < kTiles; kt++) {
    cp_async_wait<ahead - 1>();  // this thread's copies of stage kt have landed
    fence_proxy_async();         // and are visible to the tensor cores' reads, as are the zeroed rows
    __syncthreads();             // every thread's, and every warpgroup is past step kt − 1 − F's products
    const int next = kt + ahead;
    if (next < kTiles) load_stage(next % S, next * kWgBK);
    cp_async_commit();
    const uint32_t st = base + (uint32_t)((kt % S) * kStage);
    if constexpr (FP8) {
      convert_stage(kt % S);
      fence_proxy_async();
      __syncthreads();  // the whole converted tile
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kWgBK / 16; kk++) {
      const uint64_t da = smem_desc_sw128(st + (uint32_t)(wg * 64 * 128 + kk * 32));
      if constexpr (FP8) wgmma_m64n128k16<T>(part, da, smem_desc_sw128(base + (uint32_t)(S * kStage + kk * 32)));  // the converted tile
      else wgmma_m64n128k16<T>(acc, da, smem_desc_sw128(st + (uint32_t)(kATileBytes + kk * 32)));
    }
    wgmma_commit();
    wgmma_wait<F>();
    if constexpr (FP8) {
      // The end of a 128-wide k block (or of k): its sums times its scale, into the accumulators.
      if ((kt & 1) || kt + 1 == kTiles) {
        const int kb = kt / 2;
        const float s0 = __ldg(sFirst + kb), s1 = __ldg(sSecond + kb);
#pragma unroll
        for (int i = 0; i < 64; i++) {
          // Accumulator 4j + e holds weight row 8j + 2·tig (+ 1): rows 64 … 127 (j ≥ 8) are the up rows.
          acc[i] = fmaf(P == 2 && i >= 32 ? s1 : s0, part[i], acc[i]);
          part[i] = 0.f;
        }
      }
    }
  }
  wgmma_wait<0>();
  cp_async_wait<0>();

  // Accumulator 4j + e: entry wg·64 + 16·(warp % 4) + g (+ 8 for e ≥ 2), weight row 8j + 2·tig (+ 1 for odd e).
  const int lane = lane_id(), g = lane >> 2, tig = lane & 3, wr = wg * 64 + (warp_id() & 3) * 16 + g;
#pragma unroll
  for (int half = 0; half < 2; half++) {
    const int q = q0 + wr + half * 8;
    if (q >= q1) continue;
    T* orow = out + (size_t)gr.order[q] * N;
#pragma unroll
    for (int j = 0; j < (P == 2 ? 8 : 16); j++) {
      const int n = n0 + j * 8 + 2 * tig;
      if (n >= N) continue;
      float v0 = acc[4 * j + 2 * half], v1 = acc[4 * j + 2 * half + 1];
      if constexpr (P == 2) v0 = silu(v0) * acc[4 * (j + 8) + 2 * half], v1 = silu(v1) * acc[4 * (j + 8) + 2 * half + 1];
      *reinterpret_cast<uint32_t*>(orow + n) = pack2<T>(v0, v1);
    }
  }
}
#endif  // STD_WGMMA

}  // namespace stdk
