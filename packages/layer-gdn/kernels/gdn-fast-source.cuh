// Where S lives between its load and the passes (SmemSrc): the copy of a head's state into shared
// memory by the copy engine, and its waits (sm_90, sm_80, the emulator). Its own file: the copy's
// PTX and barriers are apart from the math.
#pragma once
#include "gdn-common.cuh"
#include "gdn-fast-layout.cuh"

namespace gdn {
namespace fast {

// ---- where S lives ------------------------------------------------------------------------------

// Shared-memory copy of the head's state. Copy modes: 0 cp.async.bulk + mbarrier (sm_90), 1 cp.async
// 16-byte (sm_80 and later), 2 plain loads at issue time (unaligned shapes, emulation).
struct SmemSrc {
  float* S;
  uint64_t* bars;
  int mode;
  uint32_t phase;
  int cr;  // rows per chunk (a multiple of 4)

  __device__ __forceinline__ void init(uint64_t* b, float* sbuf) {
    bars = b;
    S = sbuf;
    phase = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GDN_SMEM_CPASYNC)
    if (tid_lin() == 0) {
      for (int c = 0; c < kNChunk; ++c) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(&bars[c])), "r"(1));
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
#endif
  }

  // Starts the copy of a head's state g ([dk][dv] floats, contiguous) into S. Before the first
  // wait() the CTA must pass a __syncthreads (the prologue does); plain mode copies here.
  __device__ __forceinline__ void issue(const float* g, int dk, int dv) {
    cr = pad4((dk + kNChunk - 1) / kNChunk);
    const bool aligned = (dv % 4 == 0) && ((reinterpret_cast<uintptr_t>(g) & 15) == 0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GDN_SMEM_CPASYNC)
    mode = aligned ? 0 : 2;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    mode = aligned ? 1 : 2;
#else
    mode = 2;
    (void)aligned;
#endif
    const int tid = tid_lin(), nt = nthreads();
    if (mode == 2) {
      const int n = dk * dv;
      for (int e = tid; e < n; e += nt) S[e] = g[e];
      return;
    }
#ifdef __CUDA_ARCH__
    if (mode == 0) {
#if __CUDA_ARCH__ >= 900
      if (tid == 0) {
        for (int c = 0; c < kNChunk; ++c) {
          const int r0 = c * cr, r1 = min(dk, r0 + cr);
          if (r1 <= r0) continue;
          const uint32_t bytes = (uint32_t)((r1 - r0) * dv * 4);
          const uint32_t bar = smem_addr(&bars[c]);
          asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(S + (size_t)r0 * dv)),
                       "l"(g + (size_t)r0 * dv), "r"(bytes), "r"(bar)
                       : "memory");
        }
      }
#endif
    } else {
      // 16-byte cp.async, one commit group per chunk.
      for (int c = 0; c < kNChunk; ++c) {
        const int r0 = c * cr, r1 = min(dk, r0 + cr);
        const int n4 = r1 > r0 ? (r1 - r0) * dv / 4 : 0;
        const float* src = g + (size_t)r0 * dv;
        float* dst = S + (size_t)r0 * dv;
        for (int e = tid; e < n4; e += nt) cp_async16(dst + 4 * e, src + 4 * e);
        asm volatile("cp.async.commit_group;" ::: "memory");
      }
    }
#endif
  }

  // Chunk c of the copy has landed (visible to every thread of the CTA).
  __device__ __forceinline__ void wait(int c) {
#ifdef __CUDA_ARCH__
    if (mode == 0) {
#if __CUDA_ARCH__ >= 900
      const uint32_t bar = smem_addr(&bars[c]);
      uint32_t done = 0;
      while (!done) {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(phase)
            : "memory");
      }
#endif
    } else if (mode == 1) {
      static_assert(kNChunk == 4 || kNChunk == 2 || kNChunk == 1, "cp.async waits written for 1, 2 or 4 chunks");
      const int left = kNChunk - 1 - c;
      if (left >= 3) asm volatile("cp.async.wait_group 3;" ::: "memory");
      else if (left == 2) asm volatile("cp.async.wait_group 2;" ::: "memory");
      else if (left == 1) asm volatile("cp.async.wait_group 1;" ::: "memory");
      else asm volatile("cp.async.wait_group 0;" ::: "memory");
      __syncthreads();
    }
#else
    (void)c;
#endif
  }

  // The head is done: the next issue() may overwrite S (every thread calls this).
  __device__ __forceinline__ void release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our stores to S before the next bulk copy's
#endif
    __syncthreads();
    phase ^= 1u;
  }
};

}  // namespace fast
}  // namespace gdn
