// The chunked prefill's device primitives: bf16 packing, ldmatrix, mma.sync, cp.async, the
// cluster operations and the fragment addresses — PTX on the GPU, the CPU emulator's
// (tools/cuda-emu) under GDNP_EMU. Kept apart so the kernels read as math, not as PTX.
#pragma once
#include "gdn-chunk-base.cuh"

namespace gdnp {

// ---- device primitives (PTX on the GPU; the CPU emulator's under GDNP_EMU) ----

__device__ __forceinline__ unsigned char* dyn_smem() {
#if defined(GDNP_DEV)
  extern __shared__ __align__(128) unsigned char gdnp_smem[];
  return gdnp_smem;
#elif defined(GDNP_EMU)
  return cuda_emu::dynamic_smem();
#else
  return nullptr;
#endif
}

__device__ __forceinline__ uint32_t saddr(const void* p) { return gdn_cluster::saddr(p); }

// bf16 round to nearest even; two floats into one bf16x2 word, `lo` in the low half.
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
#if defined(GDNP_DEV)
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
#else
  auto one = [](float x) -> uint32_t {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return (u >> 16) | ((u & 0xffffu) ? 0x40u : 0u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
  };
  return one(lo) | (one(hi) << 16);
#endif
}
__device__ __forceinline__ float bf_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float bf2f(bf16_t h) { return __uint_as_float((uint32_t)h << 16); }

// x ≈ hi + lo: hi = bf16(x), lo = bf16(x − hi) (both packed in pairs).
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = pack2(x0, x1);
  lo = pack2(x0 - bf_lo(hi), x1 - bf_hi(hi));
}

template <int P>
__device__ __forceinline__ void to_planes(float x0, float x1, uint32_t (&pl)[2]) {
  if (P == 1) {
    pl[0] = pack2(x0, x1);
    pl[1] = 0;
  } else {
    split2(x0, x1, pl[0], pl[1]);
  }
}

// An mma's A operand (m16k16) from two accumulator tiles (an m16n8 product's outputs as the next
// product's A), their even and odd columns scaled by ca / cb (t0) and da / db (t1); 1 for none
// (the product is then folded away). P = 1: bf16 in ah (al untouched); P = 2: hi in ah, lo in al.
template <int P>
__device__ __forceinline__ void a_operand(const float (&t0)[4], const float (&t1)[4], uint32_t (&ah)[4], uint32_t (&al)[4], float ca = 1.f,
                                          float cb = 1.f, float da = 1.f, float db = 1.f) {
  if (P == 1) {
    ah[0] = pack2(t0[0] * ca, t0[1] * cb);
    ah[1] = pack2(t0[2] * ca, t0[3] * cb);
    ah[2] = pack2(t1[0] * da, t1[1] * db);
    ah[3] = pack2(t1[2] * da, t1[3] * db);
  } else {
    split2(t0[0] * ca, t0[1] * cb, ah[0], al[0]);
    split2(t0[2] * ca, t0[3] * cb, ah[1], al[1]);
    split2(t1[0] * da, t1[1] * db, ah[2], al[2]);
    split2(t1[2] * da, t1[3] * db, ah[3], al[3]);
  }
}

__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
#if defined(GDNP_DEV)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
#elif defined(GDNP_EMU)
  cuda_emu::ldmatrix_x4(r, addr, false);
#endif
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t addr) {
#if defined(GDNP_DEV)
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
#elif defined(GDNP_EMU)
  cuda_emu::ldmatrix_x4(r, addr, true);
#endif
}

// d += a · b (m16n8k16, bf16 operands, f32 accumulators).
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(GDNP_DEV)
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(GDNP_EMU)
  cuda_emu::mma_bf16_m16n8k16(d, a, b0, b1);
#endif
}

// P passes: d += ahi·bhi (+ ahi·blo + alo·bhi).
template <int P>
__device__ __forceinline__ void mmaP(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4], uint32_t bh0, uint32_t bh1,
                                     uint32_t bl0, uint32_t bl1) {
  mma(d, ah, bh0, bh1);
  if (P == 2) {
    mma(d, ah, bl0, bl1);
    mma(d, al, bh0, bh1);
  }
}

// cp.async of 16 bytes; src_bytes = 0 writes zeros (src is not read).
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, int srcBytes) {
#if defined(GDNP_DEV)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(srcBytes) : "memory");
#elif defined(GDNP_EMU)
  cuda_emu::cp_async(dst, src, 16, srcBytes);
#endif
}
// The same with compile-time offsets added to both addresses (one address pair serves a run of copies).
template <int SOFF, int GOFF>
__device__ __forceinline__ void cp16i(uint32_t dst, const void* src, int srcBytes) {
#if defined(GDNP_DEV)
  asm volatile("cp.async.cg.shared.global [%0+%3], [%1+%4], 16, %2;" ::"r"(dst), "l"(src), "r"(srcBytes), "n"(SOFF), "n"(GOFF) : "memory");
#elif defined(GDNP_EMU)
  cuda_emu::cp_async(dst + SOFF, srcBytes ? static_cast<const unsigned char*>(src) + GOFF : src, 16, srcBytes);
#endif
}
__device__ __forceinline__ void cp_commit() {
#if defined(GDNP_DEV)
  asm volatile("cp.async.commit_group;" ::: "memory");
#elif defined(GDNP_EMU)
  cuda_emu::cp_async_commit();
#endif
}
template <int N>
__device__ __forceinline__ void cp_wait() {
#if defined(GDNP_DEV)
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#elif defined(GDNP_EMU)
  cuda_emu::cp_async_wait(N);
#endif
}

// Cluster (sm_90): rank, split barrier, a store into another CTA's shared memory (gdn-cluster.cuh).
__device__ __forceinline__ unsigned cluster_rank() { return gdn_cluster::rank(); }
__device__ __forceinline__ void cluster_arrive() { gdn_cluster::arrive(); }
__device__ __forceinline__ void cluster_wait() { gdn_cluster::wait(); }
__device__ __forceinline__ void st_cluster(uint32_t addr, unsigned rank, float v) { gdn_cluster::st(addr, rank, v); }
__device__ __forceinline__ bool has_clusters() { return gdn_cluster::available(); }

// Fragment addresses. Tiles are row-major bf16 with `stride` elements per row.
// A operand (16 × 16 at row r0, col k0) / B operand stored [n][k] (two n-tiles at n0, k0..k0+15):
// ldmatrix x4, lane l reads row (l & 7) of matrix l >> 3.
__device__ __forceinline__ uint32_t a_addr(uint32_t base, int stride, int r0, int k0, int lane) {
  const int mi = lane >> 3, rr = lane & 7;
  return base + 2u * (uint32_t)((r0 + rr + ((mi & 1) << 3)) * stride + k0 + ((mi >> 1) << 3));
}
__device__ __forceinline__ uint32_t bnk_addr(uint32_t base, int stride, int n0, int k0, int lane) {
  const int mi = lane >> 3, rr = lane & 7;
  return base + 2u * (uint32_t)((n0 + rr + ((mi >> 1) << 3)) * stride + k0 + ((mi & 1) << 3));
}
// B operand stored [k][n] (two n-tiles at n0, rows k0..k0+15), ldmatrix .trans.
__device__ __forceinline__ uint32_t bkn_addr(uint32_t base, int stride, int k0, int n0, int lane) {
  const int mi = lane >> 3, rr = lane & 7;
  return base + 2u * (uint32_t)((k0 + rr + ((mi & 1) << 3)) * stride + n0 + ((mi >> 1) << 3));
}

}  // namespace gdnp
