// Thread-block clusters (sm_90), shared by the packages' cluster kernels (layer-gdn's split decode,
// layer-std's one-row experts): the CTA's rank, the split cluster barrier, a store into another
// CTA's shared memory. PTX on the GPU; the CPU emulator's (tools/cuda-emu, METRALE_CUDA_EMU) in its
// cluster builds. `available()` is false elsewhere (sm_80 code, host passes, the emulator's
// no-cluster build), where the rest does nothing and a kernel that needs a cluster traps.
#pragma once
#include <stdint.h>

#if !defined(__CUDA_ARCH__) && defined(METRALE_CUDA_EMU)
#if CUDA_EMU_CLUSTERS
#define METRALE_CLUSTER_EMU 1
#endif
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define METRALE_CLUSTER_DEV 1
#endif

namespace metrale::cluster {

__device__ __forceinline__ bool available() {
#if defined(METRALE_CLUSTER_DEV) || defined(METRALE_CLUSTER_EMU)
  return true;
#else
  return false;
#endif
}

__device__ __forceinline__ unsigned rank() {
#if defined(METRALE_CLUSTER_DEV)
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
#elif defined(METRALE_CLUSTER_EMU)
  return (unsigned)cuda_emu::cluster_rank();
#else
  return 0;
#endif
}

// Arrive (release: this thread's earlier stores, to any CTA's shared memory of the cluster
// included, are visible to whoever waits on this phase), then wait (acquire). Every thread of every
// CTA of the cluster takes part, in the same order.
__device__ __forceinline__ void arrive() {
#if defined(METRALE_CLUSTER_DEV)
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#elif defined(METRALE_CLUSTER_EMU)
  cuda_emu::cluster_arrive();
#endif
}
__device__ __forceinline__ void wait() {
#if defined(METRALE_CLUSTER_DEV)
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#elif defined(METRALE_CLUSTER_EMU)
  cuda_emu::cluster_wait();
#endif
}

/** The shared-memory address of p (this CTA's), for st(). */
__device__ __forceinline__ uint32_t saddr(const void* p) {
#if defined(__CUDA_ARCH__)
  return (uint32_t)__cvta_generic_to_shared(p);
#elif defined(METRALE_CUDA_EMU)
  return cuda_emu::smem_addr(p);
#else
  return 0;
#endif
}

/** v into the shared memory of the cluster's CTA `rank`, at the offset `addr` has in this CTA's. */
__device__ __forceinline__ void st(uint32_t addr, unsigned rank, float v) {
#if defined(METRALE_CLUSTER_DEV)
  uint32_t ra;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(addr), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(ra), "f"(v) : "memory");
#elif defined(METRALE_CLUSTER_EMU)
  cuda_emu::cluster_store_f32(addr, rank, v);
#endif
}

}  // namespace metrale::cluster
