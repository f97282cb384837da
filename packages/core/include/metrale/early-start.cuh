// Programmatic dependent launch (LaunchConfig.earlyStart; sm_90) for the packages' kernels that
// declare earlyStart 'wait-first' (cuda-backend's gemm-fp8.cu, layer-std's router GEMV): what such a
// kernel may do before its wait, and the wait.
//
// prefetch_l2 asks L2 for bytes a kernel will read (cp.async.bulk.prefetch.L2: the copy engine
// fetches them, no registers held, nothing to wait for). It has no effect a kernel can see: L2 is
// where the device's writes meet, so a line fetched before the kernel ahead writes it is updated by
// that write. A kernel launched early can thus set its weight bytes moving while the kernel ahead
// still runs, then wait.
//
// No-ops below sm_90, in the CPU emulator (tools/cuda-emu, METRALE_CUDA_EMU), and, for the wait,
// on a plain launch (it returns at once).
#pragma once

namespace metrale {

/** Asks L2 for bytes [p, p + bytes): p 16-byte aligned, bytes a multiple of 16. */
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(METRALE_CUDA_EMU)
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p, (void)bytes;
#endif
}

/**
 * Lets the next kernel's CTAs be scheduled once all of this one's have been, then waits until the
 * kernel ahead on the stream has finished and its writes are visible. The next kernel may thus be
 * launched while the kernel ahead still runs: it asks L2 for its weights, then waits in its turn
 * for this one, which has waited for the one ahead, so none reads what it needs before it is there.
 */
__device__ __forceinline__ void let_next_start_then_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(METRALE_CUDA_EMU)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace metrale
