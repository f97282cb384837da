// Shared device code of the layer-std kernels (std-rows.cu, std-moe.cu, std-attention.cu,
// std-sample.cu). Layouts and semantics: ../KERNELS.md; the reference is src/*.cpu.ts. Every kernel
// file includes this header and each .cu is its own fatbin (metrale-build-kernels), so everything
// here is static / inline.
//
// Conventions of every kernel: blockDim.x is a multiple of 32 (warp collectives use the full
// mask); row loops stride by gridDim.x, so a grid smaller than the row count still covers every
// row. Rows, caches and intermediates are of the row type T (f32, bf16 or f16: a template
// parameter, chosen by the kernel's symbol or by a dtype code once per launch); weights are f32 /
// bf16 / f16 or FP8 E4M3 codes with f32 block scales; everything else is f32 / i32. Arithmetic is
// f32 whatever the storage, rounded once where a kernel stores. Vector paths (4 elements per load:
// 16 bytes of f32, 8 of bf16 / f16, 4 of FP8) are taken only when the row length and the base
// pointers allow them.
#pragma once

// Under the CPU emulator (tools/cuda-emu, METRALE_CUDA_EMU; test/gpu/emu/device.mjs) the element
// types, their conversions and core's elements.cuh come from the emulator's header.
#ifndef METRALE_CUDA_EMU
#include <metrale/elements.cuh>
#endif

#include <metrale/batch-rows.cuh>

#include <cstdint>
#include <type_traits>

#define STD_SHARED(type, name, count) __shared__ __align__(16) type name[count]
#ifdef METRALE_CUDA_EMU
#define STD_DYNAMIC_SMEM(name) unsigned char* name = ::cuda_emu::dynamic_smem()
#else
#define STD_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace stdk {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ int lane_id() { return (int)(threadIdx.x & 31u); }
__device__ __forceinline__ int warp_id() { return (int)(threadIdx.x >> 5); }
__device__ __forceinline__ int num_warps() { return (int)(blockDim.x >> 5); }

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

/** Sum over the warp (float, double or unsigned long long), returned to every lane. */
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

/**
 * 32 warp sums at once: lane L gets Σ over the lanes of v[L]. Halving exchanges (31 shuffles, not
 * 160) that add the same pairs in the same tree as warp_sum's xor butterfly (bit 4 first, then 3 …
 * 0; a + b = b + a exactly), so each sum is bit-identical to warp_sum(v[i]). v is clobbered.
 * warp_halve is one exchange, on lane bit O: v[i] (i < O) becomes the sum of the pair that lane
 * keeps (v[i] or v[i + O], by that bit) and the one its partner sends (std-moe-route.cu halves
 * arrays of 8 and 16 too).
 */
template <int O, typename T, int V>
__device__ __forceinline__ void warp_halve(T (&v)[V], int lane) {
  static_assert(2 * O <= V, "warp_halve: v holds fewer than 2 * O values");
  const bool hi = (lane & O) != 0;
#pragma unroll
  for (int i = 0; i < O; i++) {
    const T keep = hi ? v[i + O] : v[i];
    const T send = hi ? v[i] : v[i + O];
    v[i] = keep + __shfl_xor_sync(kFull, send, O);
  }
}

template <typename T>
__device__ __forceinline__ T warp_sum_32(T (&v)[32]) {
  const int lane = lane_id();
  warp_halve<16>(v, lane);
  warp_halve<8>(v, lane);
  warp_halve<4>(v, lane);
  warp_halve<2>(v, lane);
  warp_halve<1>(v, lane);
  return v[0];
}

/**
 * Reduction over the CTA with `op` (warp shuffles, then the warp results in warp order, so the
 * result is deterministic), returned to every thread; `red` is 32 words of shared memory. Barriers
 * before and after: `red` may be reused at once.
 */
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, T* red, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  __syncthreads();
  if (lane_id() == 0) red[warp_id()] = v;
  __syncthreads();
  T total = red[0];
  for (int w = 1; w < num_warps(); w++) total = op(total, red[w]);
  return total;
}

/** Sum over the CTA (float, double or unsigned long long), returned to every thread. */
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* red) {
  return block_reduce(v, red, [](T x, T y) { return x + y; });
}

/** Max over the CTA (NaN-ignoring, as fmaxf), returned to every thread. */
__device__ __forceinline__ float block_max(float v, float* red) {
  return block_reduce(v, red, [](float x, float y) { return fmaxf(x, y); });
}

/** SiLU in f32: x / (1 + e^−x) (0 for x → −∞, x for x → +∞). */
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/**
 * Element offset of (position, kv head) in a paged K or V cache [pages][pageSize][kvHeads][d], for a
 * slot whose block-table row is `table` (std-attention.cu, std-attention-prefill.cu).
 */
__device__ __forceinline__ size_t cache_offset(const int32_t* __restrict__ table, int pageSize, int kvHeads, int d, int pos, int h) {
  const int pg = pos / pageSize;
  const int page = table[pg];
  return (((size_t)page * pageSize + (pos - pg * pageSize)) * kvHeads + h) * d;
}

using metrale::batch_pos_of_row;

// ---- element types --------------------------------------------------------------------------------

// Row types, their rounding and typed loads / stores: core's <metrale/elements.cuh>.
using metrale::bf16;
using metrale::f16;
using metrale::load_value;
using metrale::round_to;
using metrale::store_value;
/** FP8 E4M3 weight codes (their values times a per-128 × 128-block f32 scale). */
using fp8 = __nv_fp8_e4m3;

template <typename T>
constexpr bool is_fp8 = std::is_same_v<T, fp8>;

/** The dtype code (FLOAT_DTYPE_CODE) of a row type. */
template <typename T>
constexpr int row_code = metrale::Element<T>::code;

/** Element i of a T array as f32, read-only path (FP8: the code's value, unscaled). */
template <typename T>
__device__ __forceinline__ float ldg_value(const T* p, size_t i) {
  if constexpr (std::is_same_v<T, float>) return __ldg(p + i);
  else if constexpr (std::is_same_v<T, bf16>) return __bfloat162float(__ldg(p + i));
  else if constexpr (std::is_same_v<T, f16>) return __half2float(__ldg(p + i));
  else return metrale::e4m3_value(__ldg(reinterpret_cast<const uint8_t*>(p) + i));
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float f16_lo(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu))); }
__device__ __forceinline__ float f16_hi(uint32_t w) { return __half2float(__ushort_as_half((unsigned short)(w >> 16))); }

template <typename T>
__device__ __forceinline__ float4 unpack4(uint2 u) {
  if constexpr (std::is_same_v<T, bf16>) return make_float4(bf16_lo(u.x), bf16_hi(u.x), bf16_lo(u.y), bf16_hi(u.y));
  else return make_float4(f16_lo(u.x), f16_hi(u.x), f16_lo(u.y), f16_hi(u.y));
}

/** Four E4M3 codes (little-endian in w) as their values. */
__device__ __forceinline__ float4 unpack_e4m3x4(uint32_t w) {
#ifdef METRALE_CUDA_EMU
  return make_float4(metrale::e4m3_value(w & 0xffu), metrale::e4m3_value((w >> 8) & 0xffu), metrale::e4m3_value((w >> 16) & 0xffu), metrale::e4m3_value(w >> 24));
#else
  const __half2 lo(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3));
  const __half2 hi(__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3));
  const float2 a = __half22float2(lo), b = __half22float2(hi);
  return make_float4(a.x, a.y, b.x, b.y);
#endif
}

/**
 * Elements 4q … 4q + 3 of a T array as a float4, read-only path: one 16-byte load of f32, 8 bytes
 * of bf16 / f16, 4 of FP8 codes (their values, unscaled). The caller checks alignment.
 */
template <typename T>
__device__ __forceinline__ float4 ldg4(const T* p, size_t q) {
  if constexpr (std::is_same_v<T, float>) return __ldg(reinterpret_cast<const float4*>(p) + q);
  else if constexpr (is_fp8<T>) return unpack_e4m3x4(__ldg(reinterpret_cast<const unsigned int*>(p) + q));
  else return unpack4<T>(__ldg(reinterpret_cast<const uint2*>(p) + q));
}

/** ldg4 through the coherent path (a buffer the launch may also write). */
template <typename T>
__device__ __forceinline__ float4 load4(const T* p, size_t q) {
  if constexpr (std::is_same_v<T, float>) return reinterpret_cast<const float4*>(p)[q];
  else return unpack4<T>(reinterpret_cast<const uint2*>(p)[q]);
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  if constexpr (std::is_same_v<T, bf16>) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(a)) | ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(b)) << 16);
  } else {
    return (uint32_t)__half_as_ushort(__float2half_rn(a)) | ((uint32_t)__half_as_ushort(__float2half_rn(b)) << 16);
  }
}

/** 16 E4M3 codes to 16 values of T (exact), as two 16-byte vectors. */
template <typename T>
__device__ __forceinline__ void e4m3x16_to(const uint4 codes, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float4 f = unpack_e4m3x4(w[i]);
    out[2 * i] = pack2<T>(f.x, f.y);
    out[2 * i + 1] = pack2<T>(f.z, f.w);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

/** Stores v as elements 4q … 4q + 3 of a T array (each rounded to nearest even). */
template <typename T>
__device__ __forceinline__ void store4(T* p, size_t q, float4 v) {
  if constexpr (std::is_same_v<T, float>) reinterpret_cast<float4*>(p)[q] = v;
  else reinterpret_cast<uint2*>(p)[q] = make_uint2(pack2<T>(v.x, v.y), pack2<T>(v.z, v.w));
}

/**
 * RMSNorm's output element as Hugging Face rounds it in the row type, from x̂ = x · rsqrt(mean(x²) +
 * eps) in f32: with `roundNormalized` (Llama, GLM: `w · x̂.to(dtype)`) x̂ is rounded first; without
 * (Qwen3-Next: `(x̂ · (1 + w)).to(dtype)`, Gemma 3n: `(x̂ · w).type_as(x)`) the product is f32.
 * Either way the result is stored in T after. In f32 both are x̂ · (offset + w).
 */
template <typename T>
__device__ __forceinline__ float rms_out(float xh, float w, float offset, int roundNormalized) {
  return (roundNormalized ? round_to<T>(xh) : xh) * (offset + w);
}

/**
 * A ticket: whether this CTA is the last of `ctas` to get here on `counter` (zero before the
 * launch). Each thread's global writes before it are visible to that CTA, which resets the counter
 * for the next launch (or a graph's replay). `flag`: a shared int, rewritten by the next call.
 */
__device__ __forceinline__ bool last_to_arrive(unsigned* counter, int ctas, int& flag) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned done = ::atomicAdd(counter, 1u);
    flag = done == (unsigned)ctas - 1;
    if (flag) *counter = 0;
  }
  __syncthreads();
  const bool last = flag;
  if (last) __threadfence();
  __syncthreads();
  return last;
}

/**
 * Programmatic dependent launch (LaunchConfig.earlyStart; sm_90): the first statement of a kernel the
 * layers launch with an early start (KERNELS.md lists them). It waits until the previous kernel on
 * the stream has finished and its writes are visible, before this kernel reads or writes anything,
 * then lets the next kernel's CTAs be scheduled once all of this one's have been: a launch overlaps
 * the previous kernel's drain instead of following it. No-op below sm_90, in the CPU emulator, and
 * for a plain launch (the wait returns at once).
 */
__device__ __forceinline__ void early_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(METRALE_CUDA_EMU)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace stdk
