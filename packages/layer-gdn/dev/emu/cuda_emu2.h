// Dev-only CUDA execution emulator (dev/emu): one std::thread per CUDA thread; the CTAs of a
// cluster run together (cluster barrier, distributed shared memory), clusters one after another.
// Dynamic shared memory per CTA is filled with 0xFF first (NaN in every float, so a read of what no one wrote shows).
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>
using std::max;
using std::min;
struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct uint4 { uint32_t x, y, z, w; };
struct uint2 { uint32_t x, y; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float __expf(float x) { return expf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __maxnreg__(n)
#define __restrict__

namespace emu {
struct Cta {
  std::vector<unsigned char> smem;
  std::unique_ptr<std::barrier<>> bar;
  std::vector<std::unique_ptr<std::barrier<>>> warpBar;
  std::vector<std::vector<uint32_t>> xch;  // per warp: 32 lanes × 32 words
};
struct Cluster {
  std::vector<Cta> ctas;
  std::unique_ptr<std::barrier<>> bar;
};
inline Cluster* cur;
inline thread_local int tid, rank;
inline thread_local std::optional<std::barrier<>::arrival_token> ctoken;
inline Cta& cta() { return cur->ctas[rank]; }
inline uint32_t* xbuf() { return cta().xch[tid >> 5].data(); }
inline void wsync() { cta().warpBar[tid >> 5]->arrive_and_wait(); }
}  // namespace emu

inline void __syncthreads() { emu::cta().bar->arrive_and_wait(); }
inline unsigned __activemask() { return 0xffffffffu; }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::wsync(); }
template <typename T>
inline T emu_shfl(T v, int src) {
  uint32_t* x = emu::xbuf();
  const int l = emu::tid & 31;
  uint32_t u;
  memcpy(&u, &v, 4);
  x[l * 32] = u;
  emu::wsync();
  uint32_t r = x[(src & 31) * 32];
  emu::wsync();
  T out;
  memcpy(&out, &r, 4);
  return out;
}
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int m) { return emu_shfl(v, (emu::tid & 31) ^ m); }
template <typename T> inline T __shfl_sync(unsigned, T v, int s) { return emu_shfl(v, s); }
template <typename T> inline T __shfl_up_sync(unsigned, T v, int d) { int l = emu::tid & 31; T r = emu_shfl(v, l >= d ? l - d : l); return r; }
template <typename T> inline T __shfl_down_sync(unsigned, T v, int d) { int l = emu::tid & 31; T r = emu_shfl(v, l + d < 32 ? l + d : l); return r; }
// The kernels' store of y in a 16-bit row type (gdn-step.cuh store_y; <metrale/elements.cuh>
// on CUDA): bf16 (code 1) and f16 (code 2), rounded to nearest even.
inline void store_y_emulated(void* base, size_t i, float v, int code) {
  uint16_t bits;
  if (code == 1) {
    const uint32_t u = __float_as_uint(v);
    bits = (u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu) ? (uint16_t)((u >> 16) | 0x40) : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
  } else {
    const _Float16 h = (_Float16)v;
    memcpy(&bits, &h, 2);
  }
  static_cast<uint16_t*>(base)[i] = bits;
}
inline void __trap() { fprintf(stderr, "emu: __trap (block %u %u %u thread %u)\n", blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x); std::abort(); }

template <typename F>
void emu_launch(dim3 grid, dim3 block, size_t smemBytes, int clusterX, F&& body) {
  gridDim = grid;
  blockDim = block;
  const int nt = block.x * block.y * block.z;
  if (grid.x % clusterX) { fprintf(stderr, "emu: grid.x %u not a multiple of the cluster %d\n", grid.x, clusterX); exit(4); }
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx0 = 0; bx0 < grid.x; bx0 += clusterX) {
        emu::Cluster cl;
        cl.ctas.resize(clusterX);
        for (auto& c : cl.ctas) {
          c.smem.assign(smemBytes + 64, 0xFF);
          c.bar.reset(new std::barrier<>(nt));
          for (int w = 0; w * 32 < nt; ++w) {
            c.warpBar.emplace_back(new std::barrier<>(std::min(32, nt - w * 32)));
            c.xch.emplace_back(32 * 32, 0u);
          }
        }
        cl.bar.reset(new std::barrier<>(nt * clusterX));
        emu::cur = &cl;
        std::vector<std::thread> th;
        for (int rk = 0; rk < clusterX; ++rk)
          for (int t = 0; t < nt; ++t)
            th.emplace_back([&, t, rk] {
              emu::tid = t;
              emu::rank = rk;
              threadIdx = dim3{(unsigned)(t % block.x), (unsigned)((t / block.x) % block.y), (unsigned)(t / (block.x * block.y))};
              blockIdx = dim3{bx0 + rk, by, bz};
              body();
              emu::cta().warpBar[t >> 5]->arrive_and_drop();
              emu::cta().bar->arrive_and_drop();
              emu::cur->bar->arrive_and_drop();
            });
        for (auto& x : th) x.join();
      }
}
