// Tensor-core fragments shared by the mma.sync kernels (std-attention-prefill.cu,
// std-moe-gemm-16bit.cu): the m16n8k16 product of 16-bit inputs with f32 accumulators and the
// ldmatrix loads of its fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), and cp.async
// copies into shared memory. sm_80 and later; under the CPU emulator (METRALE_CUDA_EMU) its
// versions of the same.
#pragma once

#include "std-common.cuh"

namespace stdk {

/** c += a · b: one m16n8k16 tensor-core product, inputs of type T (bf16 or f16), f32 accumulators. */
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef METRALE_CUDA_EMU
  if constexpr (std::is_same_v<T, bf16>) ::cuda_emu::mma_bf16_m16n8k16(c, a, b0, b1);
  else ::cuda_emu::mma_f16_m16n8k16(c, a, b0, b1);
#else
  if constexpr (std::is_same_v<T, bf16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

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
__device__ __forceinline__ void cp_async_commit() { ::cuda_emu::cp_async_commit(); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { ::cuda_emu::cp_async_wait(N); }
__device__ __forceinline__ unsigned dynamic_smem_bytes() { return ::cuda_emu::dynamic_smem_bytes(); }
#else
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
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

}  // namespace stdk
