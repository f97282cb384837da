// Programmatic dependent launch (LaunchConfig.earlyStart; sm_90), shared by the decode / verify
// kernels (gdn-common.cuh) and the prefill's (gdn-chunk.cu): a kernel launched with an early start
// waits here for the previous kernel on its stream before it reads what that kernel wrote; a
// kernel lets the next one start early from here. No-ops below sm_90, in the CPU emulator (tools/cuda-emu),
// and for a plain launch (the wait then returns at once).
#pragma once

namespace gdn_pdl {

__device__ __forceinline__ void wait_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void let_next_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace gdn_pdl
