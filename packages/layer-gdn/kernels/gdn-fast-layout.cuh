// The smem kernels' (gdn-fast.cuh) sizes and dynamic shared memory layout: the row and conv limits,
// the row block's scalar slots, Lay and fast_smem_floats (kept in step with gdn-launch.ts), and the
// float4 and copy helpers. Its own file: every other part of the fast kernels builds on it, and so
// do the pipe and decode kernels (gdn-pipe.cuh, gdn-decode-state.cuh).
#pragma once
#include "gdn-common.cuh"

#ifndef GDN_FAST_NCHUNK
#define GDN_FAST_NCHUNK 1  // one bulk copy per head's state: faster than 4 on the H200 (docs/benchmarks.md, GDN decode)
#endif

namespace gdn {
namespace fast {

constexpr int kMaxRows = 8;   // maxK ≤ 8: verify rows, pending rows
constexpr int kBlockRows = 4; // rows per row block (a verify of more replays the earlier blocks)
constexpr int kMaxConv = 4;   // conv kernel K ≤ 4
constexpr int kNChunk = GDN_FAST_NCHUNK;

// Scalars of a row block in shared memory (floats from the small region's start).
enum : int {
  kBeta = 0,     // [8] β_t (0 past the block's rows)
  kGraw = 8,     // [8] g_t
  kSQ = 16,      // [8] Σ q_t²  (raw q)
  kSK = 24,      // [8] Σ k_t²
  kCQ = 32,      // [8][8] raw k_s·q_t (s ≤ t), then e^{Γ_t−Γ_s} (k̂_s·q̂_t)
  kCK = 96,      // [8][8] raw k_s·k_t (s < t), then e^{Γ_t−Γ_s} (k̂_s·k̂_t)
  kFK = 160,     // [8] 1/‖k_t‖
  kGam = 168,    // [8] Γ_t
  kCA = 176,     // [8] A_t · fk_t (a_t from the raw dot product)
  kCB = 184,     // [8] A_t · fq_t
  kUB = 192,     // [8] fk_t · e^{Γ_{T−1}−Γ_t} (the commit pass)
  kCLast = 200,  // A_{T−1}
  kRed = 208,    // [8][32] warp partials of Σ_j o_t²
  kPos = 464,    // [16] (int) per conv input position of the block: source (0 zero, 1 qkvz, 2 conv stash, 3 ring)
  kPosOff = 480, // [16] (int) its row's element offset in that buffer
  kSmallFloats = 496,
};

__host__ __device__ __forceinline__ int pad4(int x) { return (x + 3) & ~3; }
// Row capacity of the compile-time instantiations (1, 4 or 8 rows).
__host__ __device__ __forceinline__ int rows_inst(int n) { return n <= 1 ? 1 : n <= 4 ? 4 : 8; }

// Dynamic shared memory layout, in floats. Keep fast_smem_floats in step with gdn-launch.ts.
struct Lay {
  float* S;   // [d_k][d_v] (smem source only)
  float* kd;  // [tbAlloc][dkp] raw k of the block's rows, zero past d_k and past the block
  float* qd;  // [tbAlloc][dkp] raw q
  float* kf;  // [mbAlloc][dkp] keys of the pending rows (normalised, from the stash)
  float* sc;  // kSmallFloats scalars
  int dkp;
};

__host__ __device__ __forceinline__ int fast_tb_alloc(int maxK) { return rows_inst(min(kBlockRows, maxK)); }
__host__ __device__ __forceinline__ int fast_mb_alloc(int maxK) { return maxK <= 4 ? 4 : 8; }
__host__ __device__ __forceinline__ int fast_smem_floats(int dk, int dv, int maxK) {
  return pad4(dk * dv) + (2 * fast_tb_alloc(maxK) + fast_mb_alloc(maxK)) * pad4(dk) + kSmallFloats;
}

__device__ __forceinline__ float* dyn_smem() {
#ifdef METRALE_CUDA_EMU
  return reinterpret_cast<float*>(cuda_emu::dynamic_smem());
#else
  extern __shared__ __align__(128) float gdn_dyn_smem_[];
  return gdn_dyn_smem_;
#endif
}

__device__ __forceinline__ unsigned dyn_smem_bytes() {
#ifdef METRALE_CUDA_EMU
  return cuda_emu::dynamic_smem_bytes();
#else
  unsigned v;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
#endif
}

__device__ __forceinline__ Lay lay_of(const Args& A) {
  Lay L;
  float* base = dyn_smem();
  L.dkp = pad4(A.dk);
  const int sN = pad4(A.dk * A.dv);
  const int tb = fast_tb_alloc(A.maxK), mb = fast_mb_alloc(A.maxK);
  L.S = base;
  L.kd = base + sN;
  L.qd = L.kd + tb * L.dkp;
  L.kf = L.qd + tb * L.dkp;
  L.sc = L.kf + mb * L.dkp;
  return L;
}

__device__ __forceinline__ float4 ld4s(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 f4(float v) { return make_float4(v, v, v, v); }
__device__ __forceinline__ float4 scale4(float c, const float4& x) { return make_float4(c * x.x, c * x.y, c * x.z, c * x.w); }
__device__ __forceinline__ void fma4(float c, const float4& x, float4& acc) {
  acc = make_float4(fmaf(c, x.x, acc.x), fmaf(c, x.y, acc.y), fmaf(c, x.z, acc.z), fmaf(c, x.w, acc.w));
}


__device__ __forceinline__ uint32_t smem_addr(const void* p) {
#ifdef __CUDA_ARCH__
  return (uint32_t)__cvta_generic_to_shared(p);
#else
  return 0;
#endif
}

// One 16-byte copy global → shared memory: cp.async on sm_80+ (the caller commits and waits), a
// plain copy before (and in the CPU emulator, tools/cuda-emu).
__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
#else
  dst[0] = src[0], dst[1] = src[1], dst[2] = src[2], dst[3] = src[3];
#endif
}

}  // namespace fast
}  // namespace gdn
