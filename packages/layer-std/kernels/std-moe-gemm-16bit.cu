// The experts of a prefill step on tensor cores, for bf16 and f16 weights (src/moe-kernels.ts;
// reference src/moe.cpu.ts; KERNELS.md): the grouped GEMMs of a mixture-of-experts over the entries
// std_moe_group sorted by expert (FP8 weights take std-moe-gemm.cu):
//   std_moe_gemm_up    h[rj] = silu(gate_e x_r) ⊙ (up_e x_r) for every entry rj = r·topK + j of
//                      expert e (the same outputs as std_moe_experts_up)
//   std_moe_gemm_down  y[rj] = down_e h[rj] (the same outputs as std_moe_experts_down)
//   std_moe_gemm_up_few / std_moe_gemm_down_few  the same for decode and verify steps (few entries an
//                      expert): tiles of 64 entries, one warpgroup, a deeper stage ring
// Grid [tile slots, ⌈N / columns⌉], dynamic shared memory (expertsGemmLaunch). As in std-moe-gemm.cu
// the host launches an upper bound of tile slots, ⌈entries / BM⌉ + min(E, entries), and CTA x takes
// the x-th (expert, BM-entry tile) (find_tile); tiles are the fastest grid dimension, so the CTAs of
// one expert's weight columns run together and share them through L2. Entries whose id is outside
// the experts get zeros (CTAs of column x = 0).
//
// A CTA: BM entries (128, or 64 for _few) × 128 weight rows (up: 64 columns of I as gate and up
// rows both, so SiLU·mul is done in registers; down: 128 columns of D), k in steps of 32 through a
// 3-stage cp.async pipeline (rows gathered by entry: x by rj / topK, h by rj; rows past N or k past
// K are zero-filled, rows past the tile zeroed once), warps of 32 entries × 64 weight rows,
// mma.sync m16n8k16 (row-type inputs, f32 accumulators) on ldmatrix fragments. h and y are rounded
// to the row type where stored; the k order is fixed and there is no split-k, so a row's result
// depends on nothing else in the batch — and the _few kernels give an entry the same bits as the
// large ones: each warp (warpgroup on sm_90a) runs the same products over the same k order, only
// fewer of them share a CTA. Needs D and I multiples of 16 (the layer checks; else it takes
// std-moe.cu's grouped kernels).
#include "std-common.cuh"
#include "std-mma.cuh"
#include "std-moe-gemm-wg.cuh"
#include "std-moe-groups.cuh"

using namespace stdk;

namespace {

// Entries of a CTA's tile: the large kernels' and the _few ones'. Two threads an entry on mma.sync,
// one warpgroup per 64 entries on wgmma: 128 threads a 64-entry tile either way.
constexpr int kBM = 128, kFewBM = 64, kBW = kGemmBW, kBK = 32;
[[maybe_unused]] constexpr int kStages = 3;  // the mma.sync path (sm_80)
constexpr int kLds = kBK + 8;  // shared row stride in elements: 80 bytes, so ldmatrix's 8 rows fall on distinct banks
template <int BM>
constexpr int kThreadsOf = kGemmThreadsOf<BM>;
constexpr int kMaxExpertsGemm = 2048;

template <typename T, int BM>
struct Stage {
  T a[BM][kLds];   // gathered input rows
  T b[kBW][kLds];  // weight rows
};

template <typename T, int BM>
constexpr size_t smem_bytes() { return kStages * sizeof(Stage<T, BM>); }

/**
 * The grouped GEMM of one CTA. P = 2: gate and up (weights [E][2I][D], N = I, K = D, rows of x by
 * rj / topK, output h[rj] = silu(g) · u; 64 columns a CTA); P = 1: down (weights [E][D][I], N = D,
 * K = I, rows of h by rj, output y[rj]; 128 columns a CTA). BM entries a CTA, 2·BM threads.
 */
template <typename T, int P, int BM>
__device__ void grouped_gemm(unsigned char* smemRaw, const T* __restrict__ input, const int32_t* __restrict__ groups, const T* __restrict__ weights,
                             T* __restrict__ out, int N, int K, int experts, int rowDiv) {
  constexpr int NC = kBW / P;  // output columns of the CTA
  constexpr int kRowStep = BM / 2;  // rows apart of one thread's chunks (4 threads a 32-wide k row)
  constexpr int kBRows = kBW / kRowStep;  // weight rows a thread loads
  auto* st = reinterpret_cast<Stage<T, BM>*>(smemRaw);
  const Groups gr(groups, experts);
  const int n0 = blockIdx.y * NC;
  const int tid = threadIdx.x, lane = lane_id(), warp = warp_id(), g = lane >> 2, tig = lane & 3;

  int e, q0, q1;
  if (!start_gemm_tile<BM, NC>(gr, out, N, n0, e, q0, q1)) return;
  const T* we = weights + (size_t)e * P * N * K;

  // This thread's 16-byte chunks of each stage: rows tid / 4 + kRowStep·i, k offset (tid % 4) · 8.
  // Input rows past the tile are zeroed once and never loaded (their products are not stored).
  const int cc = (tid & 3) * 8;
  const T* arow[2];
  const T* brow[kBRows];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = (tid >> 2) + kRowStep * i;
    arow[i] = q0 + r < q1 ? input + (size_t)(gr.order[q0 + r] / rowDiv) * K : nullptr;
    if (!arow[i])
      for (int s = 0; s < kStages; s++) *reinterpret_cast<uint4*>(&st[s].a[r][cc]) = make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < kBRows; i++) {
    // Weight row r of the tile: up, rows 0..63 gate and 64..127 up of columns n0..n0 + 63; down, columns n0 + r.
    const int r = (tid >> 2) + kRowStep * i;
    const int n = P == 2 ? n0 + (r & 63) : n0 + r;
    brow[i] = n < N ? we + ((P == 2 && r >= 64) ? (size_t)N * K : 0) + (size_t)n * K : nullptr;
  }
  auto load_stage = [&](int s, int k0) {
    const bool kin = k0 + cc < K;
#pragma unroll
    for (int i = 0; i < 2; i++)
      if (arow[i]) cp_async16(&st[s].a[(tid >> 2) + kRowStep * i][cc], kin ? arow[i] + k0 + cc : input, kin);
#pragma unroll
    for (int i = 0; i < kBRows; i++)
      cp_async16(&st[s].b[(tid >> 2) + kRowStep * i][cc], brow[i] && kin ? brow[i] + k0 + cc : weights, brow[i] && kin);
  };

  // Warp (wm, wn): entries wm·32 … + 31; weight rows of its 8 n8 tiles (up: gate wn·32 … + 31 then
  // the same columns' up rows, 64 + wn·32 …; down: wn·64 … + 63).
  const int wm = (warp >> 1) * 32, wn = warp & 1;
  auto tile_row = [&](int j) { return P == 2 ? (j < 4 ? wn * 32 + j * 8 : 64 + wn * 32 + (j - 4) * 8) : wn * 64 + j * 8; };
  float acc[2][8][4];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

  const int kTiles = (K + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; s++) {
    if (s < kTiles) load_stage(s, s * kBK);
    cp_async_commit();
  }
  for (int kt = 0; kt < kTiles; kt++) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt has landed for every thread, and stage kt - 1 is free
    const int next = kt + kStages - 1;
    if (next < kTiles) load_stage(next % kStages, next * kBK);
    cp_async_commit();
    const Stage<T, BM>& sm = st[kt % kStages];
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[2][4];
#pragma unroll
      for (int i = 0; i < 2; i++) ldmatrix_x4(af[i], &sm.a[wm + i * 16 + (lane & 15)][kk + (lane >> 4) * 8]);
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        uint32_t bf[4];
        ldmatrix_x4(bf, &sm.b[tile_row(j) + (lane & 7) + ((lane >> 4) << 3)][kk + ((lane >> 3) & 1) * 8]);
#pragma unroll
        for (int i = 0; i < 2; i++) {
          mma16816<T>(acc[i][j], af[i], bf[0], bf[1]);
          mma16816<T>(acc[i][j + 1], af[i], bf[2], bf[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Accumulator (i, j): entries wm + 16i + g (+ 8 for elements 2, 3), columns of tile j + 2·tig, + 1.
#pragma unroll
  for (int i = 0; i < 2; i++) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const int q = q0 + wm + i * 16 + g + half * 8;
      if (q >= q1) continue;
      T* orow = out + (size_t)gr.order[q] * N;
#pragma unroll
      for (int j = 0; j < (P == 2 ? 4 : 8); j++) {
        const int n = n0 + (P == 2 ? wn * 32 : wn * 64) + j * 8 + 2 * tig;
        if (n >= N) continue;
        float v0 = acc[i][j][2 * half], v1 = acc[i][j][2 * half + 1];
        if constexpr (P == 2) v0 = silu(v0) * acc[i][j + 4][2 * half], v1 = silu(v1) * acc[i][j + 4][2 * half + 1];
        *reinterpret_cast<uint32_t*>(orow + n) = pack2<T>(v0, v1);
      }
    }
  }
}

#ifdef STD_WGMMA
// sm_90a: the same CTA tiles on wgmma (std-moe-gemm-wg.cuh). The large kernels: two warpgroups,
// 3 stages, F = 0, two CTAs an SM, so one's prologue, barriers and epilogue overlap the other's
// products. The _few kernels: one warpgroup, whose products are few, so the weight bytes in flight
// set the speed: 8 stages for up (one CTA an SM), 4 for down (two). Stages of (large up, large
// down, few up, few down), and CTAs an SM of each:
constexpr int kStagesOf(int BM, int P) { return BM == kBM ? 3 : P == 2 ? 8 : 4; }
constexpr int kBlocksOf(int BM, int P) { return BM == kBM ? 2 : P == 2 ? 1 : 2; }
template <typename T, int P, int BM>
constexpr unsigned kSmemBytes = kWgSmemBytes<BM, kStagesOf(BM, P), false>;
template <typename T, int P, int BM>
__device__ __forceinline__ void gemm_wg(unsigned char* smem, const T* __restrict__ input, const int32_t* __restrict__ groups, const T* __restrict__ weights,
                                        T* __restrict__ out, int N, int K, int experts, int rowDiv) {
  grouped_gemm_wg<T, false, P, BM, kStagesOf(BM, P), 0>(smem, input, groups, weights, nullptr, out, N, K, experts, rowDiv);
}
#define STD_MOE_GEMM(T, P, BM) gemm_wg<T, P, BM>
#else
constexpr int kBlocksOf(int BM, int P) { return 2; }
template <typename T, int P, int BM>
constexpr unsigned kSmemBytes = (unsigned)smem_bytes<T, BM>();
#define STD_MOE_GEMM(T, P, BM) grouped_gemm<T, P, BM>
#endif  // STD_WGMMA

/** Traps on arguments or a launch the kernels do not take (the layer never makes one). */
template <typename T, int P, int BM>
__device__ __forceinline__ void check_launch(int wDtype, int rowDtype, int experts, int hidden, int inter) {
  if (wDtype != row_code<T> || rowDtype != row_code<T> || experts > kMaxExpertsGemm || dynamic_smem_bytes() < kSmemBytes<T, P, BM> ||
      blockDim.x != kThreadsOf<BM> || (hidden & 15) || (inter & 15))
    __trap();
}

}  // namespace

// A pair of kernels per tile height (NAME _few: 64 entries) and row type, the weights of the same
// type: _bf16, _f16. Parameters as the grouped kernels std_moe_experts_up / _down, so the layer
// launches any of them with the same arguments.
#define STD_MOE_GEMM_KERNELS(NAME, BM, SUFFIX, T)                                                                                                    \
  extern "C" __global__ void __launch_bounds__(kThreadsOf<BM>, kBlocksOf(BM, 2)) std_moe_gemm_up##NAME##SUFFIX(                                      \
      const T* __restrict__ input, const int32_t* __restrict__ ids, const int32_t* __restrict__ groups, const void* __restrict__ gateUp,            \
      const float* __restrict__ gateUpScales, T* __restrict__ h, int rows, int hidden, int inter, int experts, int topK, int wDtype, int rowDtype) { \
    (void)ids, (void)rows, (void)gateUpScales;                                                                                                    \
    STD_DYNAMIC_SMEM(smem);                                                                                                                       \
    early_start();                                                                                                                                \
    check_launch<T, 2, BM>(wDtype, rowDtype, experts, hidden, inter);                                                                             \
    STD_MOE_GEMM(T, 2, BM)(smem, input, groups, static_cast<const T*>(gateUp), h, inter, hidden, experts, topK);                                  \
  }                                                                                                                                               \
  extern "C" __global__ void __launch_bounds__(kThreadsOf<BM>, kBlocksOf(BM, 1)) std_moe_gemm_down##NAME##SUFFIX(                                    \
      const T* __restrict__ h, const int32_t* __restrict__ ids, const int32_t* __restrict__ groups, const void* __restrict__ down,                  \
      const float* __restrict__ downScales, T* __restrict__ y, int rows, int hidden, int inter, int experts, int topK, int wDtype, int rowDtype) {  \
    (void)ids, (void)rows, (void)topK, (void)downScales;                                                                                          \
    STD_DYNAMIC_SMEM(smem);                                                                                                                       \
    early_start();                                                                                                                                \
    check_launch<T, 1, BM>(wDtype, rowDtype, experts, hidden, inter);                                                                             \
    STD_MOE_GEMM(T, 1, BM)(smem, h, groups, static_cast<const T*>(down), y, hidden, inter, experts, 1);                                           \
  }

STD_MOE_GEMM_KERNELS(, kBM, _bf16, bf16)
STD_MOE_GEMM_KERNELS(, kBM, _f16, f16)
STD_MOE_GEMM_KERNELS(_few, kFewBM, _bf16, bf16)
STD_MOE_GEMM_KERNELS(_few, kFewBM, _f16, f16)

#undef STD_MOE_GEMM_KERNELS
#undef STD_MOE_GEMM
