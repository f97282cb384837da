// The m16n8k16 tensor-core product of 16-bit inputs with f32 accumulators (PTX ISA, "Matrix
// Fragments for mma.m16n8k16"), shared by the packages' mma.sync kernels (cuda-backend's
// gemm-fp8.cu, layer-std's std-mma.cuh). sm_80 and later; under the CPU emulator (tools/cuda-emu,
// METRALE_CUDA_EMU) the emulator's product, whose header the build includes first.
#pragma once

#ifndef METRALE_CUDA_EMU
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include <cstdint>
#include <type_traits>

namespace metrale {

/** c += a · b: one m16n8k16 tensor-core product, inputs of type T (__nv_bfloat16 or __half), f32 accumulators. */
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef METRALE_CUDA_EMU
  if constexpr (std::is_same_v<T, __nv_bfloat16>) ::cuda_emu::mma_bf16_m16n8k16(c, a, b0, b1);
  else ::cuda_emu::mma_f16_m16n8k16(c, a, b0, b1);
#else
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
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

}  // namespace metrale
