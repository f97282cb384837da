// Shared device code of the DSA kernels (dsa-append.cu, dsa-index.cu, dsa-topk.cu, dsa-attn.cu).
// Layouts and semantics: ../KERNELS.md. Every kernel file includes this header; each .cu is its
// own fatbin (metrale-build-kernels), so everything here is static / inline.
//
// The device-specific primitives (inline PTX, CUDA's bf16 / fp8 conversions, clusters) are the
// only code that differs under METRALE_CUDA_EMU, where the CPU emulator (tools/cuda-emu, which the
// GPU lane can run on: test/gpu/emu/device.mjs) supplies host versions of them, so these very
// kernels run on the CPU (a development aid; the GPU lane runs the real ones).
#pragma once

#include <cstdint>

#include <metrale/batch-rows.cuh>

#ifdef METRALE_CUDA_EMU
#define DSA_HAS_CLUSTER CUDA_EMU_CLUSTERS
#define DSA_CLUSTER_DIMS(n)
#define DSA_DYNAMIC_SMEM(name) uint8_t* name = ::cuda_emu::dynamic_smem()
#define DSA_SHARED(type, name, count) type* name = ::cuda_emu::static_smem<type>((count), __LINE__)
#else
#include <cuda_bf16.h>
#include <cuda_fp8.h>
// Rows and row-typed scratch (qr, qb, olat) in the precision's type: FLOAT_DTYPE_CODE, read and
// written through metrale::load_element / store_element (the emulator has host versions).
#include <metrale/elements.cuh>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && !defined(DSA_NO_CLUSTER)
#define DSA_HAS_CLUSTER 1
#include <cooperative_groups.h>
#else
#define DSA_HAS_CLUSTER 0
#endif

// A kernel launched in clusters of N CTAs along x where the architecture has clusters (sm_90+),
// as plain CTAs elsewhere. The launch grid's x is a multiple of N either way.
#if DSA_HAS_CLUSTER
#define DSA_CLUSTER_DIMS(n) __cluster_dims__(n, 1, 1)
#else
#define DSA_CLUSTER_DIMS(n)
#endif
#define DSA_DYNAMIC_SMEM(name) extern __shared__ __align__(128) uint8_t name[]
#define DSA_SHARED(type, name, count) __shared__ type name[count]
#endif

namespace dsa {

// Element codes of the caches (KERNELS.md): the MLA cache 0 f32 / 1 bf16, the indexer's 0 / 1 /
// 2 fp8. Row-typed buffers take core's FLOAT_DTYPE_CODE instead (metrale::kF32, kBF16, kF16).
constexpr int kF32 = 0;
constexpr int kBF16 = 1;
constexpr int kFP8 = 2;

/**
 * Row of entry t (a token position, or a pool index) of `slot` in a paged cache of `pageRows` rows
 * per page: the block table (i32 [maxSeqs][pagesPerSeq], the model's shared page pool) names the
 * page that holds each of the slot's blocks.
 */
__device__ __forceinline__ size_t paged_row(const int32_t* __restrict__ blockTable, int pagesPerSeq, int pageRows, int slot, int t) {
  return (size_t)blockTable[(size_t)slot * pagesPerSeq + t / pageRows] * (size_t)pageRows + (size_t)(t % pageRows);
}

using ::metrale::batch_pos_of_row;

#ifndef METRALE_CUDA_EMU
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

/** f32 → E4M3 (fn), round to nearest even, saturating to ±448. */
__device__ __forceinline__ uint8_t f32_to_e4m3(float x) { return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }

/** E4M3 (fn) → f32 (exact). */
__device__ __forceinline__ float e4m3_to_f32(uint32_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)code, __NV_E4M3);
  return __half2float(__half(h));
}

/** Two f32 → one bf16x2 register (lo in the low half), round to nearest even. */
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

/** Lane-wise bf16x2 product (round to nearest even; subnormal inputs kept). */
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  __nv_bfloat162 x = *reinterpret_cast<__nv_bfloat162*>(&a);
  const __nv_bfloat162 y = *reinterpret_cast<__nv_bfloat162*>(&b);
  x = __hmul2(x, y);
  return *reinterpret_cast<uint32_t*>(&x);
}
#else
inline uint16_t f32_to_bf16_bits(float x) { return cuda_emu::bf16_bits(x); }
inline uint8_t f32_to_e4m3(float x) { return cuda_emu::e4m3_code(x); }
inline float e4m3_to_f32(uint32_t code) { return cuda_emu::e4m3_value(code); }
inline uint32_t pack_bf16x2(float lo, float hi) { return (uint32_t)f32_to_bf16_bits(lo) | ((uint32_t)f32_to_bf16_bits(hi) << 16); }
// The product of two bf16 is exact in f32; rounding it once is __hmul2's result.
inline uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  using cuda_emu::bf16_value;
  return pack_bf16x2(bf16_value(a) * bf16_value(b), bf16_value(a >> 16) * bf16_value(b >> 16));
}
#endif

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t b) { return __uint_as_float(b << 16); }

/**
 * Four E4M3 codes (bytes of x, b0 lowest) → four bf16 values, exactly: the code's exponent and
 * mantissa bits are placed into the low bits of a bf16 (sign kept), which is the value · 2^−120
 * (subnormal codes become bf16 subnormals), then one bf16x2 multiply by 2^120 (exact; bf16 fma
 * and mul keep subnormal inputs). out.x = (b0, b1), out.y = (b2, b3).
 */
__device__ __forceinline__ uint2 e4m3x4_to_bf16x4(uint32_t x) {
  uint32_t lo = __byte_perm(x, 0u, 0x1404u);  // (b1 << 24) | (b0 << 8)
  uint32_t hi = __byte_perm(x, 0u, 0x3424u);  // (b3 << 24) | (b2 << 8)
  lo = (lo & 0x80008000u) | ((lo & 0x7F007F00u) >> 4);
  hi = (hi & 0x80008000u) | ((hi & 0x7F007F00u) >> 4);
  const uint32_t k = 0x7B807B80u;  // 2^120 in both halves
  return make_uint2(bf16x2_mul(lo, k), bf16x2_mul(hi, k));
}

/** Order-preserving u32 key of an f32 score (larger score → larger key; −0 and +0 equal). */
__device__ __forceinline__ uint32_t ordered_key(float f) {
  uint32_t b = __float_as_uint(f);
  if ((b << 1) == 0u) b = 0u;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// ---- block reductions (any block size that is a multiple of 32, ≤ 1024) ----------------------

/** `op` over a warp's lanes by an xor butterfly: every lane gets the result. */
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/** `op` over the block: each warp's result, then the warps' from `init` in warp order, the same in every thread. `scratch` holds ≥ 32 values. */
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, T* scratch, T init, Op op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T s = init;
  for (int i = 0; i < nw; i++) s = op(s, scratch[i]);
  return s;
}

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

__device__ __forceinline__ double warp_sum_d(double v) { return warp_reduce(v, SumOp{}); }
__device__ __forceinline__ float warp_sum_f(float v) { return warp_reduce(v, SumOp{}); }
__device__ __forceinline__ float warp_max_f(float v) { return warp_reduce(v, MaxOp{}); }
/** Sums and the max over the block; every thread gets the result. `scratch` holds ≥ 32 values. */
__device__ __forceinline__ double block_sum_d(double v, double* scratch) { return block_reduce(v, scratch, 0.0, SumOp{}); }
__device__ __forceinline__ float block_sum_f(float v, float* scratch) { return block_reduce(v, scratch, 0.f, SumOp{}); }
__device__ __forceinline__ float block_max_f(float v, float* scratch) { return block_reduce(v, scratch, -INFINITY, MaxOp{}); }

// ---- shared memory, async copies, tensor-core fragments, clusters ------------------------------

#ifndef METRALE_CUDA_EMU
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ uint32_t dynamic_smem_bytes() {
  uint32_t v;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
}

/** 16-byte global → shared copy; src_bytes 0 fills zeros (src is not read). */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

/** D += A·B, m16n8k16, bf16 inputs, f32 accumulators (A row-major 16×16, B col-major 16×8). */
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/** Barrier `id` (1–15) among `threads` threads of the CTA (a multiple of 32). */
__device__ __forceinline__ void named_barrier(int id, int threads) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }

/** The CTAs that cooperate on one item: a cluster where there are clusters, else one CTA. */
struct Coop {
#if DSA_HAS_CLUSTER
  __device__ __forceinline__ static int rank() { return (int)cooperative_groups::this_cluster().block_rank(); }
  __device__ __forceinline__ static int size() { return (int)cooperative_groups::this_cluster().num_blocks(); }
  __device__ __forceinline__ static void sync() { cooperative_groups::this_cluster().sync(); }
  template <typename T>
  __device__ __forceinline__ static T* map(T* p, int r) {
    return cooperative_groups::this_cluster().map_shared_rank(p, (unsigned)r);
  }
#else
  __device__ __forceinline__ static int rank() { return 0; }
  __device__ __forceinline__ static int size() { return 1; }
  __device__ __forceinline__ static void sync() { __syncthreads(); }
  template <typename T>
  __device__ __forceinline__ static T* map(T* p, int) { return p; }
#endif
};
#else
inline uint32_t smem_u32(const void* p) { return cuda_emu::smem_addr(p); }
using ::cuda_emu::dynamic_smem_bytes;
inline void cp_async16(uint32_t dst, const void* src, int src_bytes) { cuda_emu::cp_async(dst, src, 16, src_bytes); }
inline void cp_async4(uint32_t dst, const void* src, int src_bytes) { cuda_emu::cp_async(dst, src, 4, src_bytes); }
using ::cuda_emu::cp_async_commit;
template <int N>
inline void cp_async_wait() { cuda_emu::cp_async_wait(N); }
inline void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  uint32_t r[4];
  cuda_emu::ldmatrix_x4(r, addr, false);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
inline void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  uint32_t r[4];
  cuda_emu::ldmatrix_x4(r, addr, true);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
inline void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  const uint32_t a[4] = {a0, a1, a2, a3};
  cuda_emu::mma_bf16_m16n8k16(d, a, b0, b1);
}
using ::cuda_emu::named_barrier;
struct Coop {
  static int rank() { return cuda_emu::cluster_rank(); }
  static int size() { return cuda_emu::cluster_size(); }
  static void sync() {
    if (DSA_HAS_CLUSTER) cuda_emu::cluster_sync();
    else __syncthreads();
  }
  template <typename T>
  static T* map(T* p, int r) {
    return DSA_HAS_CLUSTER ? cuda_emu::cluster_map(p, r) : p;
  }
};
#endif

}  // namespace dsa
