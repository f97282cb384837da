// L2 requests ahead for the register-held state kernels (gdn_decode_state, gdn_fold_state): each
// CTA, once its own state loads are out, asks L2 for the head that a CTA a little later in launch
// order will read (cp.async.bulk.prefetch.L2: the copy engine fetches it, no registers held, no
// completion to wait for).
//
// Why: such a CTA holds its head between its loads and its stores — the dot products, their sum
// across warps, u, the barriers — and at 2 CTAs per SM the SM then asks DRAM for nothing.
// bench/rmw-ceiling.cu measured that shape of work (`head-dots-2cta`) slower than the bare
// read-modify-write, and close to it with each CTA asking for the head of the CTA a quarter of the
// resident CTAs after it (`head-dots-pf66`); half of them or more lost (the heads arrive long
// before they are read). In the layer's kernels (gdn-ab, the H200) decode and the register fold
// got faster at batch 256 with 3/8 of the resident CTAs ahead. The streaming verify state pass (no
// head held, 4 CTAs per SM) got slower with it, and so did the same requests for the preps' and
// the prefill WY kernel's inputs: those use none (docs/benchmarks.md, GDN decode).
//
// No-op below sm_90 and in the CPU emulator (tools/cuda-emu): the loads alone are correct, these
// requests only move bytes into L2 earlier.
#pragma once

namespace gdn_ahead {

// How far ahead, in eighths of the CTAs resident on the device (SMs × ctasPerSm); 0: no requests.
#ifndef GDN_STATE_AHEAD_EIGHTHS
#define GDN_STATE_AHEAD_EIGHTHS 3
#endif

// The number of CTAs ahead: %nsmid (the SM id bound, the SM count on the H100 / H200) × ctasPerSm ×
// eighths / 8; 0 off the GPU.
__device__ __forceinline__ int ahead_ctas(int ctasPerSm, int eighths) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned nsm;
  asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
  return (int)nsm * ctasPerSm * eighths / 8;
#else
  (void)ctasPerSm, (void)eighths;
  return 0;
#endif
}

// Asks L2 for bytes [p, p + bytes): p 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p, (void)bytes;
#endif
}

// Part t of [p, p + bytes) cut into `parts` pieces of a multiple of 16 bytes (the last one shorter).
__device__ __forceinline__ void prefetch_l2_part(const void* p, unsigned bytes, int t, int parts) {
  const unsigned piece = (bytes / (unsigned)parts + 15u) & ~15u, off = (unsigned)t * piece;
  if (t < parts && off < bytes) prefetch_l2(static_cast<const char*>(p) + off, bytes - off < piece ? bytes - off : piece);
}

}  // namespace gdn_ahead
