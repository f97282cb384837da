// The chunked prefill (gdn-chunk.cu), what every part of it shares: the launch arguments, the
// shape-derived sizes, the prefill scratch layout and the small scalar helpers. Host-visible where
// src/gdn-prefill-launch.ts mirrors a size.
#pragma once
#include <stdint.h>
#include "gdn-cluster.cuh"
#include "gdn-pdl.cuh"
#include "gdn-step.cuh"

#if defined(__CUDA_ARCH__)
#define GDNP_DEV 1
#elif defined(METRALE_CUDA_EMU)
#define GDNP_EMU 1  // the CPU emulator (tools/cuda-emu)
#endif

namespace gdnp {

constexpr int C = 64;          // rows per chunk
constexpr int DK = 128;        // d_k of the tiles (zero-padded; d_k ≤ 128)
constexpr int DKT = DK + 8;    // smem row stride (bf16) of d_k-wide tiles: 272 bytes, ldmatrix conflict-free
constexpr int CT = C + 8;      // smem row stride (bf16) of 64-wide tiles
constexpr int FT = C + 4;      // smem row stride (f32) of 64 × 64 f32 tiles
constexpr int MAXDV = 256;
constexpr int WY_THREADS = 256;
constexpr int SEG = 8;         // conv rows per work item (its 8 + 3 inputs in flight together)
constexpr int KMAX4 = 4;       // the vectorised conv takes K ≤ 4

typedef unsigned short bf16_t;

struct Args : gdn_step::Buffers<const float> {
  unsigned char* scratch;
  int batch, rows;
  int hk, hv, dk, dv, K, maxK;
  float eps;
  int fuseNorm;
  int chunk0, chunkEnd;  // this launch's chunks of each sequence: [chunk0, min(chunkEnd, its chunks))
  // o: the unfused scan's raw O rows (f32, [rows][H_v·d_v]), which gdn_prefill_norm reads; y takes
  // the gated norm in the row type yDtype (gdn_step::store_y). With an f32 y, o may be y (in place).
  float* o;
  int yDtype;
};

using gdn_step::store_y;

// ---- small helpers ---------------------------------------------------------------------------

// Programmatic dependent launch (gdn-pdl.cuh): a pipelined prefill's scan lets the next piece's WY
// kernel start at once (launchPrefill).
using gdn_pdl::let_next_kernel_start;
using gdn_pdl::wait_previous_kernel;

__host__ __device__ __forceinline__ int round_up(int x, int m) { return (x + m - 1) / m * m; }
// f(integral constant 0), …, f(N − 1): compile-time indices for offsets that must be immediates.
template <int V>
struct Int {
  static constexpr int value = V;
};
template <int I, int N, typename F>
__device__ __forceinline__ void static_for_from(F&& f) {
  if constexpr (I < N) {
    f(Int<I>{});
    static_for_from<I + 1, N>(f);
  }
}
template <int N, typename F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_from<0, N>(f);
}
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
// e^x and 1/x by the flush-to-zero approximations (ex2.approx.ftz, rcp.approx.ftz: ≈ 2 ulp):
// __expf without ftz adds a range test and two predicated multiplies per call to keep denormal
// results; a product of gates, norms and keys loses nothing it keeps when a factor below 1.2e-38
// becomes 0 (and SiLU's 1 + e^{−x} is ≥ 1).
__device__ __forceinline__ float exp_ftz(float x) {
#if defined(GDNP_DEV)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
#else
  return expf(x);
#endif
}
__device__ __forceinline__ float rcp_ftz(float x) {
#if defined(GDNP_DEV)
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.0f / x;
#endif
}
// SiLU through the fast exponential and reciprocal (≈ 1e-6 relative; x ≪ 0 gives −0): the conv
// computes 4 of them per output element, and the IEEE division's slow path cost issue slots.
__device__ __forceinline__ float siluf_(float x) { return x * rcp_ftz(1.0f + exp_ftz(-x)); }
__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Shape-derived sizes shared by the prefill's kernels (and mirrored in src/gdn-launch.ts): the
// step's (gdn_step::geo_of, gdn-step.cuh) and the tiles'. A struct of its own rather than
// one derived from gdn_step::Geo: with that layout the compiled prefill kernels changed.
struct Geo {
  int r, grp, width, keyDim, convDim, stashRow, baCol;
  int dks, dvs, dvp;      // d_k, d_v rounded up to 8 (scratch rows), d_v rounded up to 16 (tiles)
  long long stashSeq;
  int csRows;             // conv stash rows per slot (a ring by position: 2·maxK)
};

__device__ __forceinline__ Geo geo_of(const Args& A) {
  const gdn_step::Geo S = gdn_step::geo_of(A);
  Geo G;
  G.r = S.r, G.grp = S.grp, G.width = S.width, G.keyDim = S.keyDim, G.convDim = S.convDim, G.stashRow = S.stashRow, G.baCol = S.baCol;
  G.stashSeq = S.stashSeq;
  G.dks = round_up(A.dk, 8);
  G.dvs = round_up(A.dv, 8);
  G.dvp = round_up(A.dv, 16);
  G.csRows = 2 * A.maxK;
  return G;
}

// The qkvz column of z_0 of value head h (key head h / r; its group: q, k, r × v, r × z).
__device__ __forceinline__ int z_col(const Args& A, const Geo& G, int h) {
  const int kg = h / G.r;
  return kg * G.grp + 2 * A.dk + (G.r + h - kg * G.r) * A.dv;
}

// The prefill scratch (bytes from A.scratch), for a step of R = A.rows rows and P bf16 planes
// (plane 1: lo parts). Every matrix is [plane][head][row][cols], row = the step's row index:
//   qr, kr  [P][H_k][R][dks]   raw (conv + SiLU) q and k
//   w       [P][H_v][R][dks]   W = T diag(β e^γ f_k) K_raw
//   u       [P][H_v][R][dvs]   U = T diag(β) V
//   aqk     [P][H_v][R][64]    A_qk (row i of the chunk: its 64 entries, zero above the diagonal)
//   sc      f32 [H_v][R][4]    (f_q e^{γ_i}, f_k e^{γ_last − γ_i}, γ_i, 0)
struct Scratch {
  bf16_t *qr, *kr, *w, *u, *aqk;
  float* sc;
  long long qrPlane, wPlane, uPlane, aqkPlane;  // elements per plane
};

template <int P>
__device__ __forceinline__ Scratch scratch_of(const Args& A, const Geo& G) {
  Scratch S;
  const long long R = A.rows;
  S.qrPlane = (long long)A.hk * R * G.dks;
  S.wPlane = (long long)A.hv * R * G.dks;
  S.uPlane = (long long)A.hv * R * G.dvs;
  S.aqkPlane = (long long)A.hv * R * C;
  bf16_t* p = reinterpret_cast<bf16_t*>(A.scratch);
  S.qr = p;
  p += P * S.qrPlane;
  S.kr = p;
  p += P * S.qrPlane;
  S.w = p;
  p += P * S.wPlane;
  S.u = p;
  p += P * S.uPlane;
  S.aqk = p;
  p += P * S.aqkPlane;
  S.sc = reinterpret_cast<float*>(p);
  return S;
}

}  // namespace gdnp
