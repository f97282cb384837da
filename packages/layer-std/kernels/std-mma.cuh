// Tensor-core fragments shared by the mma.sync kernels (std-attention-prefill.cu,
// std-moe-gemm-16bit.cu): the m16n8k16 product of 16-bit inputs with f32 accumulators (core's
// <metrale/mma.cuh>) and the ldmatrix loads of its fragments (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"), and cp.async copies into shared memory. sm_80 and later; under the CPU emulator (METRALE_CUDA_EMU) its
// versions of the same. Where STD_WGMMA is defined (sm_90a, or the emulator's sm_90 build), the
// warpgroup products (wgmma) on shared-memory operands too.
#pragma once

#include "std-common.cuh"

#include <metrale/mma.cuh>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || (defined(METRALE_CUDA_EMU) && CUDA_EMU_CLUSTERS)
#define STD_WGMMA 1
#endif

namespace stdk {

// c += a · b, m16n8k16 (core's <metrale/mma.cuh>, shared with cuda-backend's FP8 GEMM).
using metrale::mma16816;

/** Four 8 × 8 b16 matrices from shared memory (lanes 8i … 8i + 7 give matrix i's row addresses). */
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
#ifdef METRALE_CUDA_EMU
  ::cuda_emu::ldmatrix_x4(r, ::cuda_emu::smem_addr(p), false);
#else
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}

/** The same, each matrix transposed. */
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
#ifdef METRALE_CUDA_EMU
  ::cuda_emu::ldmatrix_x4(r, ::cuda_emu::smem_addr(p), true);
#else
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#endif
}

/** 16 bytes global → shared without registers (zeros when !valid; `gmem` must still be a mapped address). */
#ifdef METRALE_CUDA_EMU
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  ::cuda_emu::cp_async(::cuda_emu::smem_addr(smem), gmem, 16, valid ? 16 : 0);
}
/** 8 bytes global → shared without registers (through L1: the other warps' copies read the same lines). */
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem) { ::cuda_emu::cp_async(::cuda_emu::smem_addr(smem), gmem, 8, 8); }
__device__ __forceinline__ void cp_async_commit() { ::cuda_emu::cp_async_commit(); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { ::cuda_emu::cp_async_wait(N); }
__device__ __forceinline__ unsigned dynamic_smem_bytes() { return ::cuda_emu::dynamic_smem_bytes(); }
#else
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
/** 8 bytes global → shared without registers (through L1: the other warps' copies read the same lines). */
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/** Waits until at most N of this thread's committed groups are still in flight. */
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/** The size of the launch's dynamic shared memory. */
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
  unsigned n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  return n;
}
#endif

#ifdef STD_WGMMA
// ---- wgmma: one warpgroup's m64nNk16, 128-byte-swizzled shared operands (K-major; B MN-major too), A from registers too ----

/** The shared-memory address of p, as descriptors and bulk copies take it. */
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
#ifdef METRALE_CUDA_EMU
  return ::cuda_emu::smem_addr(p);
#else
  return (uint32_t)__cvta_generic_to_shared(p);
#endif
}

/**
 * The descriptor of a K-major tile at shared address `addr` (1024-byte aligned at its row 0, plus a
 * k offset below 128 bytes) whose rows are 128 bytes (64 16-bit elements), swizzled by 128 bytes,
 * 8-row groups 1024 bytes apart.
 */
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/**
 * The descriptor of an MN-major tile (a B operand taken with imm-trans-b) at `addr` (1024-byte
 * aligned): 128-byte rows of 64 MN-contiguous elements, one row per k, swizzled by 128 bytes; 8 k
 * rows an atom, atoms 1024 bytes apart along k and `mnBlockBytes` apart along MN.
 */
__device__ __forceinline__ uint64_t smem_desc_sw128_mn(uint32_t addr, uint32_t mnBlockBytes) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((mnBlockBytes >> 4) & 0x3FFFu) << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/** Byte offset of 16-byte chunk c (0…7) of row r in a 128-byte-swizzled tile of 128-byte rows. */
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) { return (uint32_t)r * 128u + (uint32_t)((c ^ (r & 7)) << 4); }

#ifdef METRALE_CUDA_EMU
__device__ __forceinline__ void wgmma_fence() {}
__device__ __forceinline__ void wgmma_commit() {}
template <int N>
__device__ __forceinline__ void wgmma_wait() {}
/** Orders this thread's generic-proxy writes to shared memory (cp.async, stores) before async-proxy reads (wgmma). */
__device__ __forceinline__ void fence_proxy_async() {}
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t a, uint64_t b) {
  if constexpr (std::is_same_v<T, bf16>) ::cuda_emu::wgmma_m64k16(d, 128, a, b, [](uint16_t x) { return ::cuda_emu::bf16_value(x); });
  else ::cuda_emu::wgmma_m64k16(d, 128, a, b, [](uint16_t x) { return ::cuda_emu::f16_value(x); });
}
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t a, uint64_t b) {
  if constexpr (std::is_same_v<T, bf16>) ::cuda_emu::wgmma_m64k16(d, 64, a, b, [](uint16_t x) { return ::cuda_emu::bf16_value(x); });
  else ::cuda_emu::wgmma_m64k16(d, 64, a, b, [](uint16_t x) { return ::cuda_emu::f16_value(x); });
}
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_rs_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (std::is_same_v<T, bf16>) ::cuda_emu::wgmma_m64k16_rs(d, 128, a, b, true, [](uint16_t x) { return ::cuda_emu::bf16_value(x); });
  else ::cuda_emu::wgmma_m64k16_rs(d, 128, a, b, true, [](uint16_t x) { return ::cuda_emu::f16_value(x); });
}
#else
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/** Until at most N of this warpgroup's committed wgmma groups are in flight. */
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The accumulator operands: d[0 … 31], and d[32 … 63] for n128.
#define STD_WGMMA_ACC32 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), \
  "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), \
  "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
  "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define STD_WGMMA_ACC64 STD_WGMMA_ACC32, \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
  "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), \
  "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), \
  "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define STD_WGMMA_REGS64 \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
  "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"

#define STD_WGMMA_N128(TYPE)                                                                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " \
               STD_WGMMA_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                    \
               : STD_WGMMA_ACC64                                                                                         \
               : "l"(a), "l"(b))

#define STD_WGMMA_N64(TYPE)                                                                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " "  \
               "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,"   \
               "%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                              \
               : STD_WGMMA_ACC32                                                                                         \
               : "l"(a), "l"(b))

// A from registers (mma.sync's A fragment per warp), B transposed (MN-major): imm-trans-b = 1.
#define STD_WGMMA_N128_RS_TB(TYPE)                                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " \
               STD_WGMMA_REGS64 ", {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"                                        \
               : STD_WGMMA_ACC64                                                                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b))

/** d += A · Bᵀ: A 64 × 16 and B 128 × 16 from their descriptors, f32 accumulators in mma.sync's n8-tile order. */
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t a, uint64_t b) {
  if constexpr (std::is_same_v<T, bf16>) STD_WGMMA_N128("bf16");
  else STD_WGMMA_N128("f16");
}
/** The same for B 64 × 16: 32 accumulators. */
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t a, uint64_t b) {
  if constexpr (std::is_same_v<T, bf16>) STD_WGMMA_N64("bf16");
  else STD_WGMMA_N64("f16");
}
/** d += A · B: A 64 × 16 from registers (warp w's rows 16w … as mma.sync's A fragment), B 16 × 128 MN-major (smem_desc_sw128_mn). */
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_rs_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  if constexpr (std::is_same_v<T, bf16>) STD_WGMMA_N128_RS_TB("bf16");
  else STD_WGMMA_N128_RS_TB("f16");
}
#undef STD_WGMMA_N128
#undef STD_WGMMA_N64
#undef STD_WGMMA_N128_RS_TB
#undef STD_WGMMA_REGS64
#undef STD_WGMMA_ACC64
#undef STD_WGMMA_ACC32
#endif
#endif  // STD_WGMMA

}  // namespace stdk
