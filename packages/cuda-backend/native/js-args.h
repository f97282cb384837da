// Reading the addon's arguments: JavaScript has validated them (src/cuda-backend.ts); these
// conversions still refuse what would be undefined behaviour in C++.
#pragma once

#include <napi.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "driver.h"

namespace metrale {

inline uint32_t u32(const Napi::CallbackInfo& info, size_t i) { return info[i].As<Napi::Number>().Uint32Value(); }

/** A byte count or offset: JavaScript checked it is a safe non-negative integer. */
inline size_t count(const Napi::CallbackInfo& info, size_t i) {
  const double value = info[i].As<Napi::Number>().DoubleValue();
  if (!(value >= 0) || value != std::floor(value) || value > 9007199254740991.0) {
    throwCallError(info.Env(), "argument", "expected a non-negative integer, got " + std::to_string(value));
  }
  return static_cast<size_t>(value);
}

inline CUdeviceptr pointer(const Napi::CallbackInfo& info, size_t i) {
  bool lossless = true;
  const uint64_t value = info[i].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) throwCallError(info.Env(), "argument", "device pointer out of the 64-bit range");
  return value;
}

/** The bytes of a Uint8Array (which may view a SharedArrayBuffer). */
inline std::pair<uint8_t*, size_t> bytesOf(const Napi::CallbackInfo& info, size_t i) {
  napi_typedarray_type type;
  size_t length = 0;
  void* data = nullptr;
  if (napi_get_typedarray_info(info.Env(), info[i], &type, &length, &data, nullptr, nullptr) != napi_ok ||
      type != napi_uint8_array) {
    throwCallError(info.Env(), "argument", "expected a Uint8Array");
  }
  return {static_cast<uint8_t*>(data), length};
}

inline std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

/** Largest power of two, up to 256, that divides the address (what cuBLASLt may assume). */
inline uint32_t alignmentOf(CUdeviceptr ptr) {
  uint32_t alignment = 256;
  while (alignment > 1 && ptr % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace metrale
