// The CPU stand-in for CUDA that tools/cuda-emu compiles a package's kernels/*.cu against with g++
// (device.mjs puts this header first in the translation unit; no kernel file includes it): every
// CUDA thread is a fiber (cuda-emu-main.h runs them), barriers block fibers (a thread that
// returns leaves its CTA's, warp's and cluster's barriers, as on the GPU), warp collectives
// (shuffle, ballot, ldmatrix, mma) exchange through the warp's buffer between two warp barriers,
// and a cp.async lands at the cp.async.wait_group that covers it, not before. Dynamic shared
// memory starts as 0xFF bytes (NaN in every float), so a read of what no thread wrote shows.
//
// It checks indexing, fragment layouts and synchronisation (a barrier that can never complete is
// reported as a deadlock, with who waits where) and the arithmetic; not the GPU's timing, nor the
// tensor cores' rounding inside a product (mma sums in double). Kernels reach the primitives that
// are PTX on the GPU through `cuda_emu::` under METRALE_CUDA_EMU (defined here); the rest of the
// CUDA C++ they use is defined below with host semantics. CUDA_EMU_CLUSTERS (default 1): thread-
// block clusters, as sm_90 has them; 0 for the sm_80 paths.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <type_traits>
#include <vector>

#define METRALE_CUDA_EMU 1
#ifndef CUDA_EMU_CLUSTERS
#define CUDA_EMU_CLUSTERS 1
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __maxnreg__(n)
#define __cluster_dims__(...)
#define __restrict__
#define __align__(n) __attribute__((aligned(n)))
// Static shared memory is one object for the CTAs that run together (a cluster's): kernels that
// run in clusters keep their shared memory dynamic (or per CTA through cuda_emu::static_smem).
#define __shared__ static

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct uint2 {
  uint32_t x, y;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }

namespace cuda_emu {

struct Fiber;

/** A barrier of `count` participants; a participant that exits leaves it (count − 1). */
struct Barrier {
  int count = 0;
  int arrived = 0;
  std::vector<Fiber*> waiters;
};

/** A cluster's split barrier: arrive records the phase, wait blocks until the phase has moved on. */
struct PhaseBarrier {
  int count = 0;
  int arrived = 0;
  long long phase = 0;
  std::vector<Fiber*> waiters;
};

struct Warp {
  uint32_t x[32][8];  // per lane: what a collective exchanges
  Barrier bar;
};

struct Group;

struct Cta {
  dim3 idx;
  int rank = 0;                // rank in its cluster
  size_t smemBytes = 0;        // the launch's dynamic shared memory (smem holds a poisoned guard past it)
  std::vector<uint8_t> smem;
  std::map<int, std::vector<uint8_t>> statics;
  Barrier sync;
  std::map<int, Barrier> named;
  std::vector<Warp> warps;
  Group* group = nullptr;
};

struct Group {
  std::vector<Cta*> ctas;
  PhaseBarrier cluster;
};

struct PendingCopy {
  uint32_t dst;
  const void* src;
  int bytes, srcBytes;
};

struct Fiber {
  dim3 tid;
  int linear = 0;
  Cta* cta = nullptr;
  bool done = false;
  void* ctx = nullptr;  // ucontext_t, in cuda-emu-main.h
  long long clusterToken = -1;  // the phase this thread arrived at, until it waits
  std::vector<PendingCopy> uncommitted;
  std::vector<std::vector<PendingCopy>> groups;
};

// Provided by cuda-emu-main.h.
extern Fiber* g_cur;
extern dim3 g_blockDim, g_gridDim;
void wait(Barrier& b);
void arrive(PhaseBarrier& b);
void wait_phase(PhaseBarrier& b);
[[noreturn]] void fail(const char* what);

inline Fiber& current() { return *g_cur; }
inline Cta& cta() { return *g_cur->cta; }
inline int lane() { return g_cur->linear & 31; }
inline Warp& warp() { return cta().warps[g_cur->linear >> 5]; }
inline void warp_sync() { wait(warp().bar); }

// ---- shared memory -------------------------------------------------------------------------------

inline uint8_t* dynamic_smem() { return cta().smem.data(); }
inline uint32_t dynamic_smem_bytes() { return (uint32_t)cta().smemBytes; }
/** Static shared memory of this CTA, one object per `id` (a source line), 0xFF-filled. */
template <typename T>
inline T* static_smem(int count, int id) {
  auto& v = cta().statics[id];
  if (v.empty()) v.assign(sizeof(T) * (size_t)count + 16, 0xFF);
  return reinterpret_cast<T*>(v.data());
}
/** The shared-memory address of p: its offset in this CTA's dynamic shared memory. */
inline uint32_t smem_addr(const void* p) {
  const uint8_t* b = cta().smem.data();
  const uint8_t* q = static_cast<const uint8_t*>(p);
  if (q < b || q > b + cta().smemBytes) fail("shared address of a pointer outside the CTA's dynamic shared memory");
  return (uint32_t)(q - b);
}
/** `bytes` at shared address `addr` of CTA `c` (this one by default), bounds-checked. */
inline uint8_t* smem_at(uint32_t addr, size_t bytes, Cta* c = nullptr) {
  Cta& t = c ? *c : cta();
  if ((size_t)addr + bytes > t.smemBytes) fail("shared memory access out of range");
  return t.smem.data() + addr;
}

// ---- cp.async: lands at the wait_group that covers its commit group --------------------------

inline void cp_async(uint32_t dst, const void* src, int bytes, int srcBytes) {
  if (bytes != 4 && bytes != 8 && bytes != 16) fail("cp.async of other than 4, 8 or 16 bytes");
  if (dst % (uint32_t)bytes) fail("cp.async: misaligned shared address");
  if (srcBytes < 0 || srcBytes > bytes) fail("cp.async: source bytes out of range");
  if (srcBytes && reinterpret_cast<uintptr_t>(src) % (uintptr_t)bytes) fail("cp.async: misaligned global address");
  smem_at(dst, (size_t)bytes);
  current().uncommitted.push_back({dst, src, bytes, srcBytes});
}
inline void cp_async_commit() {
  Fiber& f = current();
  f.groups.push_back(std::move(f.uncommitted));
  f.uncommitted.clear();
}
/** Until at most n of this thread's commit groups are in flight: the older ones land now. */
inline void cp_async_wait(int n) {
  Fiber& f = current();
  while ((int)f.groups.size() > n) {
    for (const PendingCopy& c : f.groups.front()) {
      uint8_t* d = smem_at(c.dst, (size_t)c.bytes);
      std::memset(d, 0, (size_t)c.bytes);
      if (c.srcBytes) std::memcpy(d, c.src, (size_t)c.srcBytes);
    }
    f.groups.erase(f.groups.begin());
  }
}

// ---- warp collectives ------------------------------------------------------------------------------

template <typename T>
inline T shfl(T v, int src) {
  static_assert(sizeof(T) <= 8, "a shuffle of more than 8 bytes");
  Warp& w = warp();
  std::memcpy(w.x[lane()], &v, sizeof(T));
  warp_sync();
  T r;
  std::memcpy(&r, w.x[src & 31], sizeof(T));
  warp_sync();
  return r;
}

inline unsigned ballot(bool p) {
  Warp& w = warp();
  w.x[lane()][0] = p ? 1u : 0u;
  warp_sync();
  unsigned m = 0;
  for (int i = 0; i < 32; i++) m |= (w.x[i][0] ? 1u : 0u) << i;
  warp_sync();
  return m;
}

/** ldmatrix .x4 (.trans): lane l gives the row address of row l & 7 of matrix l >> 3. */
inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr, bool trans) {
  Warp& w = warp();
  const int l = lane();
  if (addr % 16) fail("ldmatrix: row address not 16-byte aligned");
  w.x[l][0] = addr;
  warp_sync();
  uint32_t out[4];
  for (int j = 0; j < 4; j++) {
    uint16_t e[2];
    for (int h = 0; h < 2; h++) {
      const int row = trans ? 2 * (l & 3) + h : l >> 2;
      const int col = trans ? l >> 2 : 2 * (l & 3) + h;
      std::memcpy(&e[h], smem_at(w.x[8 * j + row][0] + 2 * col, 2), 2);
    }
    out[j] = (uint32_t)e[0] | ((uint32_t)e[1] << 16);
  }
  warp_sync();
  for (int j = 0; j < 4; j++) r[j] = out[j];
}

inline float bf16_value(uint32_t bits16) {
  const uint32_t u = (bits16 & 0xFFFFu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/** The 16 × 16 A operand of an m16n8k16 product from the warp's exchanged fragments (x[lane][0 … 3]). */
template <typename Value>
inline void a_fragment(const Warp& w, float (&A)[16][16], Value value) {
  for (int ln = 0; ln < 32; ln++) {
    const int g = ln >> 2, t = ln & 3;
    const uint32_t* v = w.x[ln];
    for (int h = 0; h < 2; h++) {
      const int sh = 16 * h;
      A[g][2 * t + h] = value((uint16_t)(v[0] >> sh));
      A[g + 8][2 * t + h] = value((uint16_t)(v[1] >> sh));
      A[g][2 * t + 8 + h] = value((uint16_t)(v[2] >> sh));
      A[g + 8][2 * t + 8 + h] = value((uint16_t)(v[3] >> sh));
    }
  }
}

/**
 * d += A·B, m16n8k16: A (row-major 16 × 16) and B (col-major 16 × 8) of 16-bit elements that
 * `value` decodes, f32 accumulators (products summed in double).
 */
template <typename Value>
inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, Value value) {
  Warp& w = warp();
  const int l = lane();
  for (int i = 0; i < 4; i++) w.x[l][i] = a[i];
  w.x[l][4] = b0, w.x[l][5] = b1;
  warp_sync();
  float A[16][16], B[16][8];
  a_fragment(w, A, value);
  for (int ln = 0; ln < 32; ln++) {
    const int g = ln >> 2, t = ln & 3;
    const uint32_t* v = w.x[ln];
    for (int h = 0; h < 2; h++) {
      B[2 * t + h][g] = value((uint16_t)(v[4] >> (16 * h)));
      B[2 * t + 8 + h][g] = value((uint16_t)(v[5] >> (16 * h)));
    }
  }
  warp_sync();
  const int g = l >> 2, t = l & 3;
  for (int e = 0; e < 4; e++) {
    const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    double sum = d[e];
    for (int k = 0; k < 16; k++) sum += (double)A[row][k] * (double)B[k][col];
    d[e] = (float)sum;
  }
}

/** d += A·B, m16n8k16, bf16 inputs. */
inline void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_m16n8k16(d, a, b0, b1, [](uint16_t x) { return bf16_value(x); });
}

/** d += A·B, m16n8k16 as mma_bf16_m16n8k16, f16 inputs. */
inline void mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

// ---- wgmma (sm_90a): a warpgroup's m64nNk16 product from shared-memory descriptors -------------------
//
// Computed at the instruction (the emulator does not model its asynchrony: a kernel that overwrites an
// operand before wgmma.wait_group passes here and fails on the GPU). Shared-memory operands use the
// 128-byte swizzle (descriptor layout 1): K-major, 8-row core groups `stride byte offset` (SBO) apart;
// or MN-major (a B operand with imm-trans-b = 1), 64 MN-contiguous elements a 128-byte row, 8 k rows
// an atom, atoms SBO apart along k and `leading byte offset` (LBO) apart along MN. Byte address a of
// the tile reads at a ^ ((a >> 7) & 7) << 4, as the GPU's swizzle of a 1024-byte-aligned tile.

/** Element (row, k) of a 128-byte-swizzled operand that `desc` describes (16-bit elements); `mnMajor`: row runs along the 128-byte rows. */
inline uint16_t wgmma_operand(uint64_t desc, int row, int k, bool mnMajor = false) {
  const uint32_t start = (uint32_t)(desc & 0x3FFFu) << 4;
  const uint32_t lbo = (uint32_t)((desc >> 16) & 0x3FFFu) << 4;
  const uint32_t sbo = (uint32_t)((desc >> 32) & 0x3FFFu) << 4;
  if ((desc >> 62) != 1) fail("wgmma: only the 128-byte swizzled layouts are emulated");
  const uint32_t logical = mnMajor ? start + (uint32_t)(row / 64) * lbo + (uint32_t)(k / 8) * sbo + (uint32_t)(k % 8) * 128u + (uint32_t)(row % 64) * 2u
                                   : start + (uint32_t)(row / 8) * sbo + (uint32_t)(row % 8) * 128u + (uint32_t)k * 2u;
  const uint32_t phys = logical ^ (((logical >> 7) & 7u) << 4);
  uint16_t e;
  std::memcpy(&e, smem_at(phys, 2), 2);
  return e;
}

/**
 * d += A·Bᵀ for this thread's part of a warpgroup's m64nNk16 (A 64 × 16, B N × 16, both K-major):
 * warp w of the warpgroup holds rows 16w + g (+ 8), columns 8j + 2t (+ 1) at d[4j + …], as mma.sync's
 * accumulators per n8 tile.
 */
template <typename Value>
inline void wgmma_m64k16(float* d, int n, uint64_t descA, uint64_t descB, Value value) {
  if (g_blockDim.x % 128) fail("wgmma in a CTA whose threads are not whole warpgroups");
  const int t = current().linear % 128, w = t >> 5, l = t & 31, g = l >> 2, tig = l & 3;
  for (int j = 0; j < n / 8; j++)
    for (int e = 0; e < 4; e++) {
      const int row = 16 * w + g + 8 * (e >> 1), col = 8 * j + 2 * tig + (e & 1);
      double sum = d[4 * j + e];
      for (int k = 0; k < 16; k++) sum += (double)value(wgmma_operand(descA, row, k)) * (double)value(wgmma_operand(descB, col, k));
      d[4 * j + e] = (float)sum;
    }
}

/**
 * The same with A from registers: warp w's 16 rows of A as mma.sync m16n8k16's A fragment (a[0]: row
 * g, k 2t, 2t + 1; a[1]: row g + 8; a[2], a[3]: k + 8); B from its descriptor, MN-major when transB.
 */
template <typename Value>
inline void wgmma_m64k16_rs(float* d, int n, const uint32_t (&a)[4], uint64_t descB, bool transB, Value value) {
  if (g_blockDim.x % 128) fail("wgmma in a CTA whose threads are not whole warpgroups");
  Warp& w = warp();
  const int l = lane();
  for (int i = 0; i < 4; i++) w.x[l][i] = a[i];
  warp_sync();
  float A[16][16];
  a_fragment(w, A, value);
  warp_sync();
  const int g = l >> 2, tig = l & 3;
  for (int j = 0; j < n / 8; j++)
    for (int e = 0; e < 4; e++) {
      const int row = g + 8 * (e >> 1), col = 8 * j + 2 * tig + (e & 1);
      double sum = d[4 * j + e];
      for (int k = 0; k < 16; k++) sum += (double)A[row][k] * (double)value(wgmma_operand(descB, col, k, transB));
      d[4 * j + e] = (float)sum;
    }
}

// ---- barriers and clusters ---------------------------------------------------------------------------

void syncthreads();

/** bar.sync id, threads: a barrier of `threads` threads of the CTA. */
inline void named_barrier(int id, int threads) {
  Barrier& b = cta().named[id];
  if (b.count == 0) b.count = threads;
  if (b.count != threads) fail("a named barrier used with two thread counts");
  wait(b);
}

inline int cluster_rank() { return CUDA_EMU_CLUSTERS ? cta().rank : 0; }
inline int cluster_size() { return CUDA_EMU_CLUSTERS ? (int)cta().group->ctas.size() : 1; }
inline void cluster_arrive() {
  if (!CUDA_EMU_CLUSTERS) fail("a cluster barrier where the build has no clusters");
  arrive(cta().group->cluster);
}
inline void cluster_wait() {
  if (!CUDA_EMU_CLUSTERS) fail("a cluster barrier where the build has no clusters");
  wait_phase(cta().group->cluster);
}
inline void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}
/** p (in this CTA's dynamic shared memory) in the cluster's CTA `rank` (mapa). */
template <typename T>
inline T* cluster_map(T* p, int rank) {
  Group* g = cta().group;
  if (rank < 0 || rank >= (int)g->ctas.size()) fail("cluster rank out of range");
  return reinterpret_cast<T*>(g->ctas[rank]->smem.data() + smem_addr(p));
}
/** v into CTA `rank`'s shared memory at the address `addr` has in this CTA's (st.shared::cluster). */
inline void cluster_store_f32(uint32_t addr, unsigned rank, float v) {
  Group* g = cta().group;
  if ((int)rank >= (int)g->ctas.size()) fail("cluster rank out of range");
  std::memcpy(smem_at(addr, 4, g->ctas[rank]), &v, 4);
}

// ---- element conversions (round to nearest even) -----------------------------------------------

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t bf16_bits(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
inline float f16_value(uint16_t h) {
  const int s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) v = std::ldexp((float)m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(1.f + m / 1024.f, e - 15);
  return s ? -v : v;
}
/** f32 → f16 bits, overflow to ±Inf (as __float2half_rn). */
inline uint16_t f16_bits(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const int exp = (int)((u >> 23) & 0xFF);
  const uint32_t frac = u & 0x7FFFFFu;
  if (exp == 0xFF) return sign | 0x7C00u | (frac ? 0x200u : 0u);
  const int e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7C00u;
  if (e <= 0) {
    if (e < -10) return sign;
    const uint32_t m = frac | 0x800000u;
    const int shift = 14 - e;
    const uint32_t half = 1u << (shift - 1), rest = m & ((1u << shift) - 1);
    uint32_t v = m >> shift;
    if (rest > half || (rest == half && (v & 1u))) v++;
    return (uint16_t)(sign | v);
  }
  uint32_t v = ((uint32_t)e << 10) | (frac >> 13);
  const uint32_t rest = frac & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) v++;
  return (uint16_t)(sign | v);
}
/** E4M3 (fn) → f32, exactly. */
inline float e4m3_value(uint32_t code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  float v;
  if (e == 15 && m == 7) v = NAN;
  else if (e == 0) v = std::ldexp((float)m, -9);
  else v = std::ldexp(1.f + m / 8.f, e - 7);
  return s ? -v : v;
}
/** f32 → E4M3 (fn), saturating to ±448 (by search over the codes: exact and simple). */
inline uint8_t e4m3_code(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs((double)x);
  if (a >= 448.0) return sign | 0x7E;
  int best = 0;
  double bestErr = INFINITY;
  for (int c = 0; c <= 0x7E; c++) {
    const double err = std::fabs((double)e4m3_value((uint32_t)c) - a);
    if (err < bestErr || (err == bestErr && (c & 1) == 0)) {
      best = c;
      bestErr = err;
    }
  }
  return sign | (uint8_t)best;
}

}  // namespace cuda_emu

// Host versions of core's <metrale/elements.cuh> (FLOAT_DTYPE_CODE: 0 f32, 1 bf16, 2 f16).
namespace metrale {

enum ElementCode : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline float load_element(const void* base, size_t i, int code) {
  if (code == kBF16) return cuda_emu::bf16_value(static_cast<const uint16_t*>(base)[i]);
  if (code == kF16) return cuda_emu::f16_value(static_cast<const uint16_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

inline void store_element(void* base, size_t i, float v, int code) {
  if (code == kBF16) static_cast<uint16_t*>(base)[i] = cuda_emu::bf16_bits(v);
  else if (code == kF16) static_cast<uint16_t*>(base)[i] = cuda_emu::f16_bits(v);
  else static_cast<float*>(base)[i] = v;
}

}  // namespace metrale

// CUDA's 16- and 8-bit element types and their conversions (cuda_bf16.h, cuda_fp16.h, cuda_fp8.h),
// as kernels that template on the element type use them: the bits, converted by the functions above.
struct __nv_bfloat16 {
  uint16_t __x;
};
struct __half {
  uint16_t __x;
};
struct __nv_fp8_e4m3 {
  uint8_t __x;
  explicit operator float() const { return cuda_emu::e4m3_value(__x); }
};
inline float __bfloat162float(__nv_bfloat16 v) { return cuda_emu::bf16_value(v.__x); }
inline __nv_bfloat16 __float2bfloat16_rn(float v) { return {cuda_emu::bf16_bits(v)}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 v) { return v.__x; }
inline float __half2float(__half v) { return cuda_emu::f16_value(v.__x); }
inline __half __float2half_rn(float v) { return {cuda_emu::f16_bits(v)}; }
inline unsigned short __half_as_ushort(__half v) { return v.__x; }
inline __half __ushort_as_half(unsigned short x) { return {x}; }
template <typename T>
inline T __ldg(const T* p) { return *p; }

// The typed half of core's <metrale/elements.cuh>.
namespace metrale {

constexpr int kFp8Block = 128;

inline float e4m3_value(uint8_t code) { return cuda_emu::e4m3_value(code); }

template <typename T>
struct Element;
template <>
struct Element<float> {
  static constexpr int code = kF32;
  static float load(const float* p, size_t i) { return p[i]; }
  static void store(float* p, size_t i, float v) { p[i] = v; }
};
template <>
struct Element<__nv_bfloat16> {
  static constexpr int code = kBF16;
  static float load(const __nv_bfloat16* p, size_t i) { return __bfloat162float(p[i]); }
  static void store(__nv_bfloat16* p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }
};
template <>
struct Element<__half> {
  static constexpr int code = kF16;
  static float load(const __half* p, size_t i) { return __half2float(p[i]); }
  static void store(__half* p, size_t i, float v) { p[i] = __float2half_rn(v); }
};

using bf16 = __nv_bfloat16;
using f16 = __half;

template <typename T>
inline float round_to(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, bf16>) return __bfloat162float(__float2bfloat16_rn(v));
  else return __half2float(__float2half_rn(v));
}
template <typename T>
inline float load_value(const T* p, size_t i) {
  return Element<T>::load(p, i);
}
template <typename T>
inline void store_value(T* p, size_t i, float v) {
  Element<T>::store(p, i, v);
}

}  // namespace metrale

#include "../../packages/core/include/metrale/by-row-type.h"

/** d += A·B, m16n8k16, f16 inputs. */
inline void cuda_emu::mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_m16n8k16(d, a, b0, b1, [](uint16_t x) { return f16_value(x); });
}

// ---- the CUDA C++ the kernels use outside PTX ------------------------------------------------------

#define threadIdx (::cuda_emu::g_cur->tid)
#define blockIdx (::cuda_emu::g_cur->cta->idx)
#define blockDim (::cuda_emu::g_blockDim)
#define gridDim (::cuda_emu::g_gridDim)

inline void __syncthreads() { cuda_emu::syncthreads(); }
// One thread runs at a time and memory has no caches here: a fence orders nothing more, and an
// L2-only load (a value another CTA of the launch wrote) is a plain load.
inline void __threadfence() {}
template <typename T>
inline T __ldcg(const T* p) { return *p; }
inline void __syncwarp(unsigned = 0xFFFFFFFFu) { cuda_emu::warp_sync(); }
inline unsigned __activemask() { return 0xFFFFFFFFu; }
[[noreturn]] inline void __trap() { cuda_emu::fail("__trap()"); }

template <typename T>
inline T __shfl_sync(unsigned, T v, int src) { return cuda_emu::shfl(v, src); }
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int m) { return cuda_emu::shfl(v, cuda_emu::lane() ^ m); }
template <typename T>
inline T __shfl_up_sync(unsigned, T v, int d) {
  const int l = cuda_emu::lane();
  return cuda_emu::shfl(v, l >= d ? l - d : l);
}
template <typename T>
inline T __shfl_down_sync(unsigned, T v, int d) {
  const int l = cuda_emu::lane();
  return cuda_emu::shfl(v, l + d < 32 ? l + d : l);
}
inline unsigned __ballot_sync(unsigned, bool p) { return cuda_emu::ballot(p); }
/** The lanes of the warp whose `v` equals this lane's (every lane takes part). */
inline unsigned __match_any_sync(unsigned, int v) {
  unsigned m = 0;
  for (int src = 0; src < 32; src++) m |= (cuda_emu::shfl(v, src) == v ? 1u : 0u) << src;
  return m;
}

using std::max;
using std::min;
using std::isfinite;
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int atomicMax(int* p, int v) {
  const int old = *p;
  if (v > old) *p = v;
  return old;
}
inline int atomicMin(int* p, int v) {
  const int old = *p;
  if (v < old) *p = v;
  return old;
}
// One thread runs at a time, so plain read-modify-writes are atomic.
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old + v;
  return old;
}
inline int atomicAdd(int* p, int v) {
  const int old = *p;
  *p = old + v;
  return old;
}
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}

inline float __uint_as_float(uint32_t u) { return cuda_emu::bits_float(u); }
inline uint32_t __float_as_uint(float f) { return cuda_emu::float_bits(f); }
inline float __int_as_float(int i) { return cuda_emu::bits_float((uint32_t)i); }
inline int __float_as_int(float f) { return (int)cuda_emu::float_bits(f); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline void sincospi(double x, double* s, double* c) {
  const long double a = 3.141592653589793238462643383279503L * (long double)x;
  *s = (double)sinl(a);
  *c = (double)cosl(a);
}
inline double __hiloint2double(int hi, int lo) {
  const uint64_t u = ((uint64_t)(uint32_t)hi << 32) | (uint32_t)lo;
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t v = ((uint64_t)y << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; i++) {
    const uint32_t sel = (s >> (4 * i)) & 7u;
    r |= (uint32_t)((v >> (8 * sel)) & 0xFFu) << (8 * i);
  }
  return r;
}
