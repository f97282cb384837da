// A CPU stand-in for the CUDA features the DSA kernels use, so kernels/*.cu can be compiled with
// g++ (-DDSA_EMU) and run on the host: every CUDA thread is a fiber, barriers (CTA, named, warp,
// cluster) block fibers, warp collectives (shuffle, ballot, ldmatrix, mma) exchange through the
// warp's slots between two warp barriers. Development aid only: it checks indexing, fragment
// layouts, synchronisation (a missing barrier partner is reported as a deadlock) and the
// arithmetic, not the GPU's timing or its exact rounding inside the tensor cores (products are
// summed in double). Used by emu-device.mjs (how to run it: its header).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#ifndef DSA_EMU_CLUSTER
#define DSA_EMU_CLUSTER 1
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct uint2 { uint32_t x, y; };
struct alignas(16) uint4 { uint32_t x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

namespace emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
struct Fiber;
struct Cta;

struct Barrier {
  int count = 0;
  int arrived = 0;
  std::vector<Fiber*> waiters;
};

struct Warp {
  uint64_t slot[32];
  uint32_t addr[32];
  uint32_t a[32][4];
  uint32_t b[32][2];
  float c[32][4];
  Barrier bar;
};

struct Group;

struct Cta {
  Dim3 idx;
  int rank = 0;                // rank in its cluster
  std::vector<uint8_t> smem;   // dynamic shared memory
  std::map<int, std::vector<uint8_t>> statics;
  Barrier sync;
  std::map<int, Barrier> named;
  std::vector<Warp> warps;
  Group* group = nullptr;
};

struct Group {
  std::vector<Cta*> ctas;
  Barrier cluster;
};

struct Fiber {
  Dim3 tid;
  int linear = 0;
  Cta* cta = nullptr;
  bool done = false;
  void* ctx = nullptr;  // ucontext_t, in emu-main.cpp
};

// Provided by emu-main.cpp.
extern Fiber* g_cur;
extern Dim3 g_blockDim, g_gridDim;
void wait(Barrier& b);
[[noreturn]] void fail(const char* what);

inline Cta& cta() { return *g_cur->cta; }
inline int lane() { return g_cur->linear & 31; }
inline Warp& warp() { return cta().warps[g_cur->linear >> 5]; }
inline void warp_sync() { wait(warp().bar); }

inline uint8_t* dynamic_smem() { return cta().smem.data(); }
inline uint32_t dynamic_smem_bytes() { return (uint32_t)cta().smem.size(); }
template <typename T>
inline T* static_smem(int count, int id) {
  auto& v = cta().statics[id];
  if (v.empty()) v.assign(sizeof(T) * (size_t)count + 16, 0xFF);
  return reinterpret_cast<T*>(v.data());
}

inline uint32_t smem_u32(const void* p) {
  const uint8_t* b = cta().smem.data();
  const uint8_t* q = static_cast<const uint8_t*>(p);
  if (q < b || q > b + cta().smem.size()) fail("smem_u32 of a pointer outside the CTA's dynamic shared memory");
  return (uint32_t)(q - b);
}
inline uint8_t* smem_at(uint32_t off, uint32_t bytes) {
  if ((size_t)off + bytes > cta().smem.size()) fail("shared memory access out of range");
  return cta().smem.data() + off;
}

inline void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  if (dst % 16) fail("cp.async 16: misaligned shared address");
  uint8_t* d = smem_at(dst, 16);
  if (src_bytes == 16) {
    if (reinterpret_cast<uintptr_t>(src) % 16) fail("cp.async 16: misaligned global address");
    std::memcpy(d, src, 16);
  } else if (src_bytes == 0) {
    std::memset(d, 0, 16);
  } else {
    fail("cp.async 16: src bytes must be 0 or 16 here");
  }
}
inline void cp_async4(uint32_t dst, const void* src, int src_bytes) {
  if (dst % 4) fail("cp.async 4: misaligned shared address");
  uint8_t* d = smem_at(dst, 4);
  if (src_bytes == 4) std::memcpy(d, src, 4);
  else std::memset(d, 0, 4);
}
inline void cp_async_commit() {}
template <int N>
inline void cp_async_wait() {}

template <typename T>
inline T shfl_generic(T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffle of a wide type");
  Warp& w = warp();
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  w.slot[lane()] = bits;
  warp_sync();
  const uint64_t got = w.slot[src & 31];
  warp_sync();
  T r;
  std::memcpy(&r, &got, sizeof(T));
  return r;
}

inline void ldmatrix_impl(uint32_t addr, uint32_t (&r)[4], bool trans) {
  Warp& w = warp();
  const int l = lane();
  if (addr % 16) fail("ldmatrix: row address not 16-byte aligned");
  w.addr[l] = addr;
  warp_sync();
  for (int j = 0; j < 4; j++) {
    uint16_t e[2];
    for (int h = 0; h < 2; h++) {
      int row, col;
      if (!trans) {
        row = l >> 2;
        col = 2 * (l & 3) + h;
      } else {
        row = 2 * (l & 3) + h;
        col = l >> 2;
      }
      std::memcpy(&e[h], smem_at(w.addr[8 * j + row] + 2 * col, 2), 2);
    }
    r[j] = (uint32_t)e[0] | ((uint32_t)e[1] << 16);
  }
  warp_sync();
}
inline void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  uint32_t r[4];
  ldmatrix_impl(addr, r, false);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
inline void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  uint32_t r[4];
  ldmatrix_impl(addr, r, true);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

inline float bf16f(uint32_t bits16) {
  const uint32_t u = (bits16 & 0xFFFFu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  Warp& w = warp();
  const int l = lane();
  w.a[l][0] = a0, w.a[l][1] = a1, w.a[l][2] = a2, w.a[l][3] = a3;
  w.b[l][0] = b0, w.b[l][1] = b1;
  for (int i = 0; i < 4; i++) w.c[l][i] = d[i];
  warp_sync();
  float A[16][16], B[16][8];
  for (int ln = 0; ln < 32; ln++) {
    const int g = ln >> 2, t = ln & 3;
    const uint32_t* a = w.a[ln];
    A[g][2 * t] = bf16f(a[0]), A[g][2 * t + 1] = bf16f(a[0] >> 16);
    A[g + 8][2 * t] = bf16f(a[1]), A[g + 8][2 * t + 1] = bf16f(a[1] >> 16);
    A[g][2 * t + 8] = bf16f(a[2]), A[g][2 * t + 9] = bf16f(a[2] >> 16);
    A[g + 8][2 * t + 8] = bf16f(a[3]), A[g + 8][2 * t + 9] = bf16f(a[3] >> 16);
    B[2 * t][g] = bf16f(w.b[ln][0]), B[2 * t + 1][g] = bf16f(w.b[ln][0] >> 16);
    B[2 * t + 8][g] = bf16f(w.b[ln][1]), B[2 * t + 9][g] = bf16f(w.b[ln][1] >> 16);
  }
  const int g = l >> 2, t = l & 3;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  float out[4];
  for (int i = 0; i < 4; i++) {
    double s = w.c[l][i];
    for (int k = 0; k < 16; k++) s += (double)A[rows[i]][k] * (double)B[k][cols[i]];
    out[i] = (float)s;
  }
  warp_sync();
  for (int i = 0; i < 4; i++) d[i] = out[i];
}

inline void named_barrier(int id, int threads) {
  Barrier& b = cta().named[id];
  if (b.count == 0) b.count = threads;
  if (b.count != threads) fail("named barrier used with two thread counts");
  wait(b);
}

struct Coop {
#if DSA_EMU_CLUSTER
  static int rank() { return cta().rank; }
  static int size() { return (int)cta().group->ctas.size(); }
  static void sync() { wait(cta().group->cluster); }
  template <typename T>
  static T* map(T* p, int r) {
    Group* gr = cta().group;
    if (r < 0 || r >= (int)gr->ctas.size()) fail("map_shared_rank: rank out of range");
    const uint32_t off = smem_u32(p);
    return reinterpret_cast<T*>(gr->ctas[r]->smem.data() + off);
  }
#else
  static int rank() { return 0; }
  static int size() { return 1; }
  static void sync();
  template <typename T>
  static T* map(T* p, int) { return p; }
#endif
};

void syncthreads();

}  // namespace emu

#if !DSA_EMU_CLUSTER
inline void emu::Coop::sync() { emu::syncthreads(); }
#endif

#define threadIdx (::emu::g_cur->tid)
#define blockIdx (::emu::g_cur->cta->idx)
#define blockDim (::emu::g_blockDim)
#define gridDim (::emu::g_gridDim)

inline void __syncthreads() { emu::syncthreads(); }
[[noreturn]] inline void __trap() { emu::fail("__trap()"); }

template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int o) { return emu::shfl_generic(v, emu::lane() ^ o); }
template <typename T>
inline T __shfl_down_sync(unsigned, T v, int o) {
  const int src = emu::lane() + o;
  const T r = emu::shfl_generic(v, src < 32 ? src : emu::lane());
  return r;
}
inline unsigned __ballot_sync(unsigned, bool p) {
  emu::Warp& w = emu::warp();
  w.slot[emu::lane()] = p ? 1 : 0;
  emu::warp_sync();
  unsigned m = 0;
  for (int i = 0; i < 32; i++) m |= (w.slot[i] ? 1u : 0u) << i;
  emu::warp_sync();
  return m;
}
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old + v;
  return old;
}

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
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
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
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
using std::exp2;
inline float exp2f(float x) { return std::exp2(x); }
inline float expf(float x) { return std::exp(x); }

namespace dsa {

inline uint16_t f32_to_bf16_bits(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
inline uint32_t pack_bf16x2(float lo, float hi) { return (uint32_t)f32_to_bf16_bits(lo) | ((uint32_t)f32_to_bf16_bits(hi) << 16); }
inline uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  return pack_bf16x2(emu::bf16f(a) * emu::bf16f(b), emu::bf16f(a >> 16) * emu::bf16f(b >> 16));
}
inline float e4m3_to_f32(uint32_t code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  float v;
  if (e == 15 && m == 7) v = NAN;
  else if (e == 0) v = std::ldexp((float)m, -9);
  else v = std::ldexp(1.f + m / 8.f, e - 7);
  return s ? -v : v;
}
/** RNE, saturating to ±448 (the encoder of every E4M3 value, by search: exact and simple). */
inline uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs((double)x);
  if (a >= 448.0) return sign | 0x7E;
  int best = 0;
  double bestErr = INFINITY;
  for (int c = 0; c <= 0x7E; c++) {
    const double v = e4m3_to_f32((uint32_t)c);
    const double err = std::fabs(v - a);
    if (err < bestErr || (err == bestErr && (c & 1) == 0)) {
      best = c;
      bestErr = err;
    }
  }
  return sign | (uint8_t)best;
}

}  // namespace dsa

// Host versions of core's <metrale/elements.cuh> (FLOAT_DTYPE_CODE: 0 f32, 1 bf16, 2 f16; round to
// nearest even on store), for the row-typed buffers.
namespace metrale {

enum ElementCode : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline float f16_bits_to_f32(uint16_t h) {
  const int s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0) v = std::ldexp((float)m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(1.f + m / 1024.f, e - 15);
  return s ? -v : v;
}

/** f32 → f16 bits, round to nearest even, overflow to ±Inf (as __float2half_rn). */
inline uint16_t f32_to_f16_bits(float x) {
  const uint32_t u = __float_as_uint(x);
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

inline float load_element(const void* base, size_t i, int code) {
  if (code == kBF16) return emu::bf16f(static_cast<const uint16_t*>(base)[i]);
  if (code == kF16) return f16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

inline void store_element(void* base, size_t i, float v, int code) {
  if (code == kBF16) static_cast<uint16_t*>(base)[i] = dsa::f32_to_bf16_bits(v);
  else if (code == kF16) static_cast<uint16_t*>(base)[i] = f32_to_f16_bits(v);
  else static_cast<float*>(base)[i] = v;
}

}  // namespace metrale
