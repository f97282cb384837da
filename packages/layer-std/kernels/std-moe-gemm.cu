// The experts of a prefill step on tensor cores, for block-FP8 weights (src/moe-kernels.ts; reference
// src/moe.cpu.ts; KERNELS.md; bf16 and f16 weights take std-moe-gemm-16bit.cu): the grouped GEMMs of a mixture-of-experts over the entries std_moe_group sorted by
// expert, so each expert's weights multiply a tile of 64 of its (row, slot) entries at a time.
//   std_moe_gemm_up    h[rj] = silu(gate_e x_r) ⊙ (up_e x_r) for every entry rj = r·topK + j of
//                      expert e (the same outputs as std_moe_experts_up)
//   std_moe_gemm_down  y[rj] = down_e h[rj] (the same outputs as std_moe_experts_down)
// Grid [tile slots, ⌈N / columns⌉] (expertsGemmLaunch), 128 threads. The host does not know how
// the entries fall on the experts (they are on the device: no sync, graph-safe), so it launches an
// upper bound of tile slots, ⌈entries / 64⌉ + min(E, entries); CTA x takes the x-th (expert,
// 64-entry tile) in the order of the experts chosen, and those past the last tile return. Entries
// whose id is outside the experts get zeros (CTAs of column x = 0).
//
// sm_90a (compute capability 9.0): the 16-bit kernels' wgmma tiles over FP8 codes
// (std-moe-gemm-wg.cuh): 64 entries (one warpgroup) × 128 weight rows, the codes of each stage
// converted to the row type in shared memory; the _few pair (decode and verify steps, deeper
// stages) gives an entry the bits of the large one.
//
// Elsewhere a CTA: a 64-entry × 64-column tile of the output (for up: of the gate and the up
// product both), 4 warps of 32 × 32 (wmma 16 × 16 × 16 fragments, f32 accumulators), k in steps of
// 32 through shared memory, the next step's tiles loaded into registers while this one multiplies;
// the _few kernels are the same. x rows are gathered by entry (row rj / topK; h rows by rj).
// Weights: FP8 E4M3 codes converted to the row type (exact) with each 128-wide k block summed on
// its own and multiplied by its block scale in f32, as cuda-backend's gemm-fp8 does. Products are
// f32 sums of exact products (tensor cores), h and y rounded to the row type where stored, as the
// decode kernels round them; the order of the sums differs from theirs, so a prefill row's result
// is not bit-identical to a decode row's, but it depends on nothing else in the batch (no split-k,
// the k order fixed). Needs D and I multiples of 16 (the layer checks; else it takes std-moe.cu's
// grouped kernels).
#include "std-common.cuh"
#include "std-moe-gemm-wg.cuh"
#include "std-moe-groups.cuh"

#ifndef STD_WGMMA
#include <mma.h>
#endif

using namespace stdk;

namespace {

constexpr int kMaxExpertsGemm = 2048;

#ifndef STD_WGMMA

constexpr int kBM = 64, kBN = 64, kBK = 32;
constexpr int kLds = kBK + 8;  // shared row stride in elements: 80 bytes, fragment loads spread over the banks
constexpr int kThreads = 128;

/**
 * One weight matrix's tile rows [n0, n0 + 64) × k [k0, k0 + 32) in registers: T weights as 2
 * 16-byte vectors a thread (8 elements each), FP8 as 1 (16 codes). Rows past N and k past K are zeros.
 */
template <typename T, bool FP8>
struct WeightTile {
  static constexpr int kVecs = FP8 ? 1 : 2;
  uint4 v[kVecs];

  __device__ __forceinline__ void load(const void* w, int n0, int N, int k0, int K) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < kVecs; i++) {
      const int id = tid + i * kThreads;
      const int per = FP8 ? 2 : 4;  // vectors per row of 32
      const int r = id / per, c = (id % per) * (FP8 ? 16 : 8);
      const int n = n0 + r, k = k0 + c;
      v[i] = make_uint4(0, 0, 0, 0);
      if (n < N && k < K) {
        if constexpr (FP8) v[i] = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w) + (size_t)n * K + k));
        else v[i] = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(w) + (size_t)n * K + k));
      }
    }
  }

  __device__ __forceinline__ void store(T (*s)[kLds]) const {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < kVecs; i++) {
      const int id = tid + i * kThreads;
      if constexpr (FP8) {
        const int r = id / 2, c = (id % 2) * 16;
        uint4 lo, hi;
        e4m3x16_to<T>(v[i], lo, hi);
        *reinterpret_cast<uint4*>(&s[r][c]) = lo;
        *reinterpret_cast<uint4*>(&s[r][c + 8]) = hi;
      } else {
        const int r = id / 4, c = (id % 4) * 8;
        *reinterpret_cast<uint4*>(&s[r][c]) = v[i];
      }
    }
  }
};

/** The 64 gathered input rows × k [k0, k0 + 32): 2 vectors of 8 elements a thread; entries past the tile are zeros. */
template <typename T>
struct RowTile {
  const T* row[2];  // this thread's two rows (nullptr: past the tile's entries)
  uint4 v[2];

  __device__ __forceinline__ void load(int k0, int K) {
    const int c = (threadIdx.x % 4) * 8;
#pragma unroll
    for (int i = 0; i < 2; i++) v[i] = (row[i] && k0 + c < K) ? __ldg(reinterpret_cast<const uint4*>(row[i] + k0 + c)) : make_uint4(0, 0, 0, 0);
  }

  __device__ __forceinline__ void store(T (*s)[kLds]) const {
    const int c = (threadIdx.x % 4) * 8;
#pragma unroll
    for (int i = 0; i < 2; i++) *reinterpret_cast<uint4*>(&s[threadIdx.x / 4 + i * 32][c]) = v[i];
  }
};

/**
 * The shared tiles: input rows, P weight tiles (gate and up: 2; down: 1), and, reused after the k
 * loop, the f32 results.
 */
template <typename T, int P>
union GemmSmem {
  struct {
    T a[kBM][kLds];
    T b[P][kBN][kLds];
  } in;
  float out[P][kBM][kBN + 4];
};

/**
 * The grouped GEMM of one CTA. P = 2: gate and up (weights [E][2I][D], N = I, K = D, rows of x by
 * rj / topK, output h[rj] = silu(g) · u); P = 1: down (weights [E][D][I], N = D, K = I, rows of h
 * by rj, output y[rj]).
 */
template <typename T, bool FP8, int P>
__device__ void grouped_gemm(unsigned char* smemRaw, const T* __restrict__ input, const int32_t* __restrict__ groups, const void* __restrict__ weights,
                             const float* __restrict__ scales, T* __restrict__ out, int N, int K, int experts, int rowDiv) {
  using namespace nvcuda;
  auto& sm = *reinterpret_cast<GemmSmem<T, P>*>(smemRaw);
  const Groups gr(groups, experts);
  const int n0 = blockIdx.y * kBN;
  const int tid = threadIdx.x;

  int e, q0, q1;
  if (!start_gemm_tile<kBM, kBN>(gr, out, N, n0, e, q0, q1)) return;

  RowTile<T> rows;
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int q = q0 + tid / 4 + i * 32;
    rows.row[i] = q < q1 ? input + (size_t)(gr.order[q] / rowDiv) * K : nullptr;
  }
  const size_t elems = (size_t)P * N * K;  // one expert's stacked weights
  const void* we[P];
#pragma unroll
  for (int p = 0; p < P; p++) {
    const size_t off = (size_t)e * elems + (size_t)p * N * K;
    if constexpr (FP8) we[p] = static_cast<const uint8_t*>(weights) + off;
    else we[p] = static_cast<const T*>(weights) + off;
  }
  // FP8 block scales of the tile's rows: n0 is a multiple of 64, so one 128-row block.
  const int kBlocks = (K + metrale::kFp8Block - 1) / metrale::kFp8Block, nBlocks = (N + metrale::kFp8Block - 1) / metrale::kFp8Block;
  const float* srow[P];
#pragma unroll
  for (int p = 0; p < P; p++) srow[p] = FP8 ? scales + ((size_t)(P * e + p) * nBlocks + n0 / metrale::kFp8Block) * kBlocks : nullptr;

  const int warp = warp_id(), wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[P][2][2];
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> part[FP8 ? P : 1][2][2];
#pragma unroll
  for (int p = 0; p < P; p++)
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int j = 0; j < 2; j++) {
        wmma::fill_fragment(acc[p][i][j], 0.f);
        if constexpr (FP8) wmma::fill_fragment(part[p][i][j], 0.f);
      }

  WeightTile<T, FP8> wt[P];
  rows.load(0, K);
#pragma unroll
  for (int p = 0; p < P; p++) wt[p].load(we[p], n0, N, 0, K);
  for (int k0 = 0; k0 < K; k0 += kBK) {
    rows.store(sm.in.a);
#pragma unroll
    for (int p = 0; p < P; p++) wt[p].store(sm.in.b[p]);
    __syncthreads();
    if (k0 + kBK < K) {
      rows.load(k0 + kBK, K);
#pragma unroll
      for (int p = 0; p < P; p++) wt[p].load(we[p], n0, N, k0 + kBK, K);
    }
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
#pragma unroll
      for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], &sm.in.a[wm + 16 * i][kk], kLds);
#pragma unroll
      for (int p = 0; p < P; p++) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb[2];
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], &sm.in.b[p][wn + 16 * j][kk], kLds);
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
          for (int j = 0; j < 2; j++) {
            if constexpr (FP8) wmma::mma_sync(part[p][i][j], fa[i], fb[j], part[p][i][j]);
            else wmma::mma_sync(acc[p][i][j], fa[i], fb[j], acc[p][i][j]);
          }
      }
    }
    if constexpr (FP8) {
      // The end of a 128-wide k block (or of k): scale its sum into the accumulators.
      if ((k0 + kBK) % metrale::kFp8Block == 0 || k0 + kBK >= K) {
        const int kb = k0 / metrale::kFp8Block;
#pragma unroll
        for (int p = 0; p < P; p++) {
          const float s = n0 < N ? __ldg(srow[p] + kb) : 0.f;
#pragma unroll
          for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
#pragma unroll
              for (int t = 0; t < acc[p][i][j].num_elements; t++) acc[p][i][j].x[t] = fmaf(s, part[p][i][j].x[t], acc[p][i][j].x[t]);
              wmma::fill_fragment(part[p][i][j], 0.f);
            }
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int p = 0; p < P; p++)
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int j = 0; j < 2; j++) wmma::store_matrix_sync(&sm.out[p][wm + 16 * i][wn + 16 * j], acc[p][i][j], kBN + 4, wmma::mem_row_major);
  __syncthreads();
  for (int idx = tid; idx < kBM * kBN; idx += kThreads) {
    const int m = idx / kBN, c = idx % kBN;
    const int q = q0 + m, n = n0 + c;
    if (q >= q1 || n >= N) continue;
    const float v = P == 2 ? silu(sm.out[0][m][c]) * sm.out[P - 1][m][c] : sm.out[0][m][c];
    store_value(out, (size_t)gr.order[q] * N + n, v);
  }
}

template <typename T>
constexpr size_t smem_bytes() {
  return sizeof(GemmSmem<T, 2>);
}
#endif  // !STD_WGMMA

#ifdef STD_WGMMA
// sm_90a: FP8 weights on wgmma (std-moe-gemm-wg.cuh): tiles of 64 entries (one warpgroup) × 128
// weight rows, codes converted in shared memory. The large pair: 3 stages, two CTAs an SM; the
// _few pair (decode and verify): 8 stages for up (one CTA an SM), 4 for down (two), so more weight
// bytes are in flight. Both give an entry the same bits.
constexpr int kWgEntries = 64;
constexpr int kStagesOf(bool few, int P) { return !few ? 3 : P == 2 ? 8 : 4; }
constexpr int kBlocksOf(bool few, int P) { return few && P == 2 ? 1 : 2; }
constexpr int kThreadsOf(bool) { return kGemmThreadsOf<kWgEntries>; }
template <typename T, bool FEW, int P>
__device__ __forceinline__ void gemm_fp8(const T* __restrict__ input, const int32_t* __restrict__ groups, const void* __restrict__ weights,
                                         const float* __restrict__ scales, T* __restrict__ out, int N, int K, int experts, int rowDiv) {
  STD_DYNAMIC_SMEM(smem);
  if (dynamic_smem_bytes() < kWgSmemBytes<kWgEntries, kStagesOf(FEW, P), true>) __trap();
  grouped_gemm_wg<T, true, P, kWgEntries, kStagesOf(FEW, P), 0>(smem, input, groups, static_cast<const uint8_t*>(weights), scales, out, N, K, experts, rowDiv);
}
#else
// sm_80: the wmma tiles above, the _few pair the same kernels.
constexpr int kBlocksOf(bool, int) { return 1; }
constexpr int kThreadsOf(bool) { return kThreads; }
template <typename T, bool FEW, int P>
__device__ __forceinline__ void gemm_fp8(const T* __restrict__ input, const int32_t* __restrict__ groups, const void* __restrict__ weights,
                                         const float* __restrict__ scales, T* __restrict__ out, int N, int K, int experts, int rowDiv) {
  __shared__ __align__(128) unsigned char smem[smem_bytes<T>()];
  grouped_gemm<T, true, P>(smem, input, groups, weights, scales, out, N, K, experts, rowDiv);
}
#endif  // STD_WGMMA

}  // namespace

// A pair of kernels per tile form (NAME _few: decode and verify) and row type over FP8 weights:
// _fp8_bf16, _fp8_f16 (f32 rows stay on std-moe.cu's CUDA-core kernels; bf16 / f16 weights take
// std-moe-gemm-16bit.cu). Parameters as the grouped kernels std_moe_experts_up / _down, so the layer
// launches either with the same arguments.
#define STD_MOE_GEMM_KERNELS(NAME, FEW, SUFFIX, T)                                                                                                   \
  extern "C" __global__ void __launch_bounds__(kThreadsOf(FEW), kBlocksOf(FEW, 2)) std_moe_gemm_up##NAME##SUFFIX(                                    \
      const T* __restrict__ input, const int32_t* __restrict__ ids, const int32_t* __restrict__ groups, const void* __restrict__ gateUp,            \
      const float* __restrict__ gateUpScales, T* __restrict__ h, int rows, int hidden, int inter, int experts, int topK, int wDtype, int rowDtype) { \
    (void)ids;                                                                                                                                    \
    (void)rows;                                                                                                                                   \
    if (wDtype != 3 || rowDtype != row_code<T> || experts > kMaxExpertsGemm || blockDim.x != kThreadsOf(FEW)) __trap();                           \
    gemm_fp8<T, FEW, 2>(input, groups, gateUp, gateUpScales, h, inter, hidden, experts, topK);                                                    \
  }                                                                                                                                               \
  extern "C" __global__ void __launch_bounds__(kThreadsOf(FEW), kBlocksOf(FEW, 1)) std_moe_gemm_down##NAME##SUFFIX(                                  \
      const T* __restrict__ h, const int32_t* __restrict__ ids, const int32_t* __restrict__ groups, const void* __restrict__ down,                  \
      const float* __restrict__ downScales, T* __restrict__ y, int rows, int hidden, int inter, int experts, int topK, int wDtype, int rowDtype) {  \
    (void)ids;                                                                                                                                    \
    (void)rows;                                                                                                                                   \
    (void)topK;                                                                                                                                   \
    if (wDtype != 3 || rowDtype != row_code<T> || experts > kMaxExpertsGemm || blockDim.x != kThreadsOf(FEW)) __trap();                           \
    gemm_fp8<T, FEW, 1>(h, groups, down, downScales, y, hidden, inter, experts, 1);                                                               \
  }

STD_MOE_GEMM_KERNELS(, false, _fp8_bf16, bf16)
STD_MOE_GEMM_KERNELS(, false, _fp8_f16, f16)
STD_MOE_GEMM_KERNELS(_few, true, _fp8_bf16, bf16)
STD_MOE_GEMM_KERNELS(_few, true, _fp8_f16, f16)

#undef STD_MOE_GEMM_KERNELS
