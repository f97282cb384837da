// Element types of rows, caches and weights, as every package's kernels read and write them. A
// kernel takes a dtype code (FLOAT_DTYPE_CODE in @metrale/core: 0 f32, 1 bf16, 2 f16) and loads
// through these helpers, so one kernel serves the f32 reference path and the bf16 / f16 data path.
// FP8 E4M3 weights come with f32 scales per 128 × 128 block. metrale-build-kernels puts this
// directory on nvcc's include path: `#include <metrale/elements.cuh>`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "by-row-type.h"

namespace metrale {

enum ElementCode : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

/** Rows and columns of one scaled block of an FP8 weight. */
constexpr int kFp8Block = 128;

__device__ __forceinline__ int element_bytes(int code) { return code == kF32 ? 4 : 2; }

/** Element i of an array of element type `code`, as f32. */
__device__ __forceinline__ float load_element(const void* base, size_t i, int code) {
  if (code == kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  if (code == kF16) return __half2float(static_cast<const __half*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

/** Stores v as element i (rounded to nearest even for bf16 and f16). */
__device__ __forceinline__ void store_element(void* base, size_t i, float v, int code) {
  if (code == kBF16) static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
  else if (code == kF16) static_cast<__half*>(base)[i] = __float2half_rn(v);
  else static_cast<float*>(base)[i] = v;
}

/** The value of an FP8 E4M3 (fn) code. */
__device__ __forceinline__ float e4m3_value(uint8_t code) {
  __nv_fp8_e4m3 v;
  v.__x = code;
  return static_cast<float>(v);
}

/** Typed loads for kernels compiled per element type. */
template <typename T>
struct Element;

template <>
struct Element<float> {
  static constexpr int code = kF32;
  __device__ __forceinline__ static float load(const float* p, size_t i) { return p[i]; }
  __device__ __forceinline__ static void store(float* p, size_t i, float v) { p[i] = v; }
};

template <>
struct Element<__nv_bfloat16> {
  static constexpr int code = kBF16;
  __device__ __forceinline__ static float load(const __nv_bfloat16* p, size_t i) { return __bfloat162float(p[i]); }
  __device__ __forceinline__ static void store(__nv_bfloat16* p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }
};

template <>
struct Element<__half> {
  static constexpr int code = kF16;
  __device__ __forceinline__ static float load(const __half* p, size_t i) { return __half2float(p[i]); }
  __device__ __forceinline__ static void store(__half* p, size_t i, float v) { p[i] = __float2half_rn(v); }
};

/** The 16-bit row types by their short names. */
using bf16 = __nv_bfloat16;
using f16 = __half;

/**
 * v as stored in T (f32, bf16 or f16) and read back: the rounding a kernel applies where it stores
 * to T, or where Hugging Face holds a value in T.
 */
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, bf16>) return __bfloat162float(__float2bfloat16_rn(v));
  else return __half2float(__float2half_rn(v));
}

/** Element i of a T array as f32 (coherent path: the launch may also write the buffer). */
template <typename T>
__device__ __forceinline__ float load_value(const T* p, size_t i) {
  return Element<T>::load(p, i);
}

/** Stores v as element i of a T array (rounded to nearest even for bf16 and f16). */
template <typename T>
__device__ __forceinline__ void store_value(T* p, size_t i, float v) {
  Element<T>::store(p, i, v);
}

}  // namespace metrale

