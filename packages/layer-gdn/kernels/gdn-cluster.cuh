// Thread-block clusters (sm_90): the CTA's rank, the split cluster barrier, a store into another
// CTA's shared memory. PTX on the GPU; the CPU emulator's (tools/cuda-emu, METRALE_CUDA_EMU) in
// its cluster builds; elsewhere (sm_80, host passes) `available()` is false and the rest does
// nothing — kernels that need a cluster trap on that.
#pragma once
#include <stdint.h>

#if !defined(__CUDA_ARCH__) && defined(METRALE_CUDA_EMU)
#if CUDA_EMU_CLUSTERS
#define GDN_CLUSTER_EMU 1
#endif
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GDN_CLUSTER_DEV 1
#endif

namespace gdn_cluster {

__device__ __forceinline__ bool available() {
#if defined(GDN_CLUSTER_DEV) || defined(GDN_CLUSTER_EMU)
  return true;
#else
  return false;
#endif
}

__device__ __forceinline__ unsigned rank() {
#if defined(GDN_CLUSTER_DEV)
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
#elif defined(GDN_CLUSTER_EMU)
  return (unsigned)cuda_emu::cluster_rank();
#else
  return 0;
#endif
}

// Arrive (release: this thread's earlier shared-memory stores, remote ones included, are visible
// to whoever waits on this phase), then wait (acquire). Every thread of every CTA of the cluster
// takes part, in the same order.
__device__ __forceinline__ void arrive() {
#if defined(GDN_CLUSTER_DEV)
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#elif defined(GDN_CLUSTER_EMU)
  cuda_emu::cluster_arrive();
#endif
}
__device__ __forceinline__ void wait() {
#if defined(GDN_CLUSTER_DEV)
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#elif defined(GDN_CLUSTER_EMU)
  cuda_emu::cluster_wait();
#endif
}

// The shared-memory address of p (this CTA's), for st().
__device__ __forceinline__ uint32_t saddr(const void* p) {
#if defined(__CUDA_ARCH__)
  return (uint32_t)__cvta_generic_to_shared(p);
#elif defined(METRALE_CUDA_EMU)
  return cuda_emu::smem_addr(p);
#else
  return 0;
#endif
}

// v into the shared memory of the cluster's CTA `rank`, at the offset `addr` has in this CTA's.
__device__ __forceinline__ void st(uint32_t addr, unsigned rank, float v) {
#if defined(GDN_CLUSTER_DEV)
  uint32_t ra;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(addr), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(ra), "f"(v) : "memory");
#elif defined(GDN_CLUSTER_EMU)
  cuda_emu::cluster_store_f32(addr, rank, v);
#endif
}

}  // namespace gdn_cluster
