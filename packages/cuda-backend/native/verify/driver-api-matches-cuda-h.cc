// Compile-only check (never linked into the addon): every value and signature declared in
// native/cuda-driver-api.h must match the real cuda.h. The test suite compiles this file with
// `c++ -std=c++17 -fsyntax-only -I<cuda>/include` wherever a CUDA toolkit is installed.
#include <cuda.h>

#include <cstddef>
#include <type_traits>

#include "../cuda-driver-api.h"

namespace ours = metrale::cuda;

namespace {

// Two parameter (or return) types are interchangeable across the C ABI: same size, same
// floating-ness, pointers to interchangeable pointees with the same constness. Opaque handle
// structs (CUstream_st, ...) are ours or cuda.h's own and only need to both be structs; enums
// must be int-sized (ours are plain int).
template <class A, class B>
constexpr bool compatible() {
  if constexpr (std::is_pointer_v<A> || std::is_pointer_v<B>) {
    if constexpr (std::is_pointer_v<A> && std::is_pointer_v<B>) {
      using PA = std::remove_pointer_t<A>;
      using PB = std::remove_pointer_t<B>;
      return std::is_const_v<PA> == std::is_const_v<PB> && compatible<std::remove_cv_t<PA>, std::remove_cv_t<PB>>();
    } else {
      return false;
    }
  } else if constexpr (std::is_void_v<A> || std::is_void_v<B>) {
    return std::is_void_v<A> && std::is_void_v<B>;
  } else if constexpr (std::is_class_v<A> || std::is_class_v<B>) {
    return std::is_class_v<A> && std::is_class_v<B>;
  } else {
    return sizeof(A) == sizeof(B) && std::is_floating_point_v<A> == std::is_floating_point_v<B> &&
           (std::is_enum_v<A> || std::is_enum_v<B> || std::is_signed_v<A> == std::is_signed_v<B>);
  }
}

template <class F, class G>
struct SameSignature : std::false_type {};
template <class R1, class... A1, class R2, class... A2>
struct SameSignature<R1 (*)(A1...), R2 (CUDAAPI*)(A2...)> {
  static constexpr bool arity = sizeof...(A1) == sizeof...(A2);
  static constexpr bool check() {
    if constexpr (arity) {
      return compatible<R1, R2>() && (compatible<A1, A2>() && ...);
    } else {
      return false;
    }
  }
  static constexpr bool value = check();
};

#define METRALE_CHECK_SIGNATURE(name, ret, params)                                          \
  static_assert(SameSignature<ours::PFN_##name, decltype(&::name)>::value,                  \
                #name ": signature differs from cuda.h");
METRALE_CUDA_DRIVER_FUNCTIONS(METRALE_CHECK_SIGNATURE)
METRALE_CUDA_DRIVER_OPTIONAL_FUNCTIONS(METRALE_CHECK_SIGNATURE)
#undef METRALE_CHECK_SIGNATURE

#define METRALE_CHECK_VALUE(name) static_assert(static_cast<long long>(ours::name) == static_cast<long long>(::name), #name);
METRALE_CHECK_VALUE(CUDA_SUCCESS)
METRALE_CHECK_VALUE(CUDA_ERROR_INVALID_VALUE)
METRALE_CHECK_VALUE(CUDA_ERROR_OUT_OF_MEMORY)
METRALE_CHECK_VALUE(CUDA_ERROR_NOT_INITIALIZED)
METRALE_CHECK_VALUE(CUDA_ERROR_NO_DEVICE)
METRALE_CHECK_VALUE(CUDA_ERROR_INVALID_HANDLE)
METRALE_CHECK_VALUE(CUDA_ERROR_NOT_FOUND)
METRALE_CHECK_VALUE(CUDA_ERROR_NOT_READY)
METRALE_CHECK_VALUE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
METRALE_CHECK_VALUE(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
METRALE_CHECK_VALUE(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
METRALE_CHECK_VALUE(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
METRALE_CHECK_VALUE(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
METRALE_CHECK_VALUE(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
METRALE_CHECK_VALUE(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
METRALE_CHECK_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
METRALE_CHECK_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
METRALE_CHECK_VALUE(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
METRALE_CHECK_VALUE(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
METRALE_CHECK_VALUE(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
METRALE_CHECK_VALUE(CU_FUNC_ATTRIBUTE_NUM_REGS)
METRALE_CHECK_VALUE(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
METRALE_CHECK_VALUE(CU_STREAM_NON_BLOCKING)
METRALE_CHECK_VALUE(CU_EVENT_DEFAULT)
static_assert(ours::MEMHOSTALLOC_PORTABLE == CU_MEMHOSTALLOC_PORTABLE, "CU_MEMHOSTALLOC_PORTABLE");
METRALE_CHECK_VALUE(CU_STREAM_CAPTURE_MODE_GLOBAL)
METRALE_CHECK_VALUE(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
METRALE_CHECK_VALUE(CU_STREAM_CAPTURE_MODE_RELAXED)
METRALE_CHECK_VALUE(CU_STREAM_CAPTURE_STATUS_NONE)
METRALE_CHECK_VALUE(CU_STREAM_CAPTURE_STATUS_ACTIVE)
METRALE_CHECK_VALUE(CU_STREAM_CAPTURE_STATUS_INVALIDATED)
#undef METRALE_CHECK_VALUE

static_assert(sizeof(ours::CUdeviceptr) == sizeof(::CUdeviceptr), "CUdeviceptr");
static_assert(static_cast<long long>(ours::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) ==
                  static_cast<long long>(::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION),
              "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION");
static_assert(sizeof(ours::CUlaunchAttribute) == sizeof(::CUlaunchAttribute), "CUlaunchAttribute");
static_assert(offsetof(ours::CUlaunchAttribute, value) == offsetof(::CUlaunchAttribute, value), "CUlaunchAttribute::value");
static_assert(offsetof(ours::CUlaunchAttribute, value.programmaticStreamSerializationAllowed) ==
                  offsetof(::CUlaunchAttribute, value.programmaticStreamSerializationAllowed),
              "CUlaunchAttributeValue::programmaticStreamSerializationAllowed");
static_assert(sizeof(ours::CUlaunchConfig) == sizeof(::CUlaunchConfig), "CUlaunchConfig");
static_assert(offsetof(ours::CUlaunchConfig, sharedMemBytes) == offsetof(::CUlaunchConfig, sharedMemBytes), "CUlaunchConfig::sharedMemBytes");
static_assert(offsetof(ours::CUlaunchConfig, hStream) == offsetof(::CUlaunchConfig, hStream), "CUlaunchConfig::hStream");
static_assert(offsetof(ours::CUlaunchConfig, attrs) == offsetof(::CUlaunchConfig, attrs), "CUlaunchConfig::attrs");
static_assert(offsetof(ours::CUlaunchConfig, numAttrs) == offsetof(::CUlaunchConfig, numAttrs), "CUlaunchConfig::numAttrs");
static_assert(sizeof(ours::CUresult) == sizeof(::CUresult), "CUresult");
static_assert(sizeof(ours::CUdevice) == sizeof(::CUdevice), "CUdevice");

}  // namespace

// The unversioned cuEventElapsedTime (our fallback for pre-12.8 drivers) must have the _v2
// signature; cuda.h declares it only for internal builds, so it is spelled out here.
CUresult CUDAAPI cuEventElapsedTime_legacy_shape(float* pMilliseconds, CUevent hStart, CUevent hEnd);
static_assert(SameSignature<ours::PFN_cuEventElapsedTime_v2, decltype(&cuEventElapsedTime_legacy_shape)>::value,
              "cuEventElapsedTime fallback");
