// The part of the CUDA driver API (cuda.h) that metrale uses, declared here so that the addon
// compiles without the CUDA toolkit; libcuda.so.1 is opened at run time (driver.cc).
//
// Values and signatures are cuda.h's (CUDA 12.x and 13.0 agree on all of them). Where a function
// has versioned entry points, the name here is the exported symbol that cuda.h's macros select
// (cuMemAlloc -> cuMemAlloc_v2, cuGraphInstantiate -> cuGraphInstantiateWithFlags, ...): the
// unversioned symbols are the old ABIs, with other argument types. native/verify/
// driver-api-matches-cuda-h.cc checks every value and signature against a real cuda.h; the test
// suite compiles it wherever a CUDA toolkit is installed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace metrale::cuda {

// Handles: pointers to opaque driver structs, as in cuda.h.
using CUresult = int;  // cuda.h: enum cudaError_enum, int-sized
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // 64-bit builds (cuda.h: CUdeviceptr_v2)
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphNode = struct CUgraphNode_st*;
using CUgraphExec = struct CUgraphExec_st*;
using CUdevice_attribute = int;
using CUfunction_attribute = int;
using CUstreamCaptureMode = int;
using CUstreamCaptureStatus = int;

// CUresult values the addon branches on (the rest are named by cuGetErrorName).
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900;
constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901;
constexpr CUresult CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908;

// CUdevice_attribute
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

// CUfunction_attribute
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

// CUstream_flags, CUevent_flags, cuMemHostAlloc flags
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DEFAULT = 0x0;
constexpr unsigned MEMHOSTALLOC_PORTABLE = 0x01;  // cuda.h: #define CU_MEMHOSTALLOC_PORTABLE 0x01

// CUstreamCaptureMode, CUstreamCaptureStatus
constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_GLOBAL = 0;
constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_RELAXED = 2;
constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_NONE = 0;
constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_ACTIVE = 1;
constexpr CUstreamCaptureStatus CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2;

// cuLaunchKernelEx's configuration (cuda.h CUlaunchConfig, CUlaunchAttribute): the attribute's
// value is a 64-byte union, of which the addon sets one field.
using CUlaunchAttributeID = int;
constexpr CUlaunchAttributeID CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  union {
    char bytes[64];
    int programmaticStreamSerializationAllowed;
  } value;
};
struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
};

// One X(symbol, return type, parameter list) per driver entry point. driver.cc resolves each
// symbol with dlsym; the verify file compares each signature with cuda.h's.
#define METRALE_CUDA_DRIVER_FUNCTIONS(X)                                                              \
  X(cuGetErrorName, CUresult, (CUresult error, const char** pStr))                                    \
  X(cuGetErrorString, CUresult, (CUresult error, const char** pStr))                                  \
  X(cuInit, CUresult, (unsigned int Flags))                                                           \
  X(cuDriverGetVersion, CUresult, (int* driverVersion))                                               \
  X(cuDeviceGetCount, CUresult, (int* count))                                                         \
  X(cuDeviceGet, CUresult, (CUdevice * device, int ordinal))                                          \
  X(cuDeviceGetName, CUresult, (char* name, int len, CUdevice dev))                                   \
  X(cuDeviceGetAttribute, CUresult, (int* pi, CUdevice_attribute attrib, CUdevice dev))               \
  X(cuDeviceTotalMem_v2, CUresult, (size_t * bytes, CUdevice dev))                                    \
  X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext * pctx, CUdevice dev))                             \
  X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice dev))                                           \
  X(cuCtxSetCurrent, CUresult, (CUcontext ctx))                                                       \
  X(cuCtxSynchronize, CUresult, ())                                                                   \
  X(cuMemGetInfo_v2, CUresult, (size_t * free, size_t * total))                                      \
  X(cuMemAlloc_v2, CUresult, (CUdeviceptr * dptr, size_t bytesize))                                   \
  X(cuMemFree_v2, CUresult, (CUdeviceptr dptr))                                                       \
  X(cuMemHostAlloc, CUresult, (void** pp, size_t bytesize, unsigned int Flags))                       \
  X(cuMemFreeHost, CUresult, (void* p))                                                               \
  X(cuMemsetD8Async, CUresult, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)) \
  X(cuMemcpyHtoDAsync_v2, CUresult,                                                                   \
    (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream))                 \
  X(cuMemcpyDtoHAsync_v2, CUresult,                                                                   \
    (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))                       \
  X(cuMemcpyDtoDAsync_v2, CUresult,                                                                   \
    (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))               \
  X(cuMemcpyHtoD_v2, CUresult, (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount))        \
  X(cuMemcpyDtoH_v2, CUresult, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount))              \
  X(cuStreamCreate, CUresult, (CUstream * phStream, unsigned int Flags))                              \
  X(cuStreamDestroy_v2, CUresult, (CUstream hStream))                                                 \
  X(cuStreamSynchronize, CUresult, (CUstream hStream))                                                \
  X(cuEventCreate, CUresult, (CUevent * phEvent, unsigned int Flags))                                 \
  X(cuEventRecord, CUresult, (CUevent hEvent, CUstream hStream))                                      \
  X(cuEventSynchronize, CUresult, (CUevent hEvent))                                                   \
  X(cuEventElapsedTime_v2, CUresult, (float* pMilliseconds, CUevent hStart, CUevent hEnd))            \
  X(cuEventDestroy_v2, CUresult, (CUevent hEvent))                                                    \
  X(cuStreamBeginCapture_v2, CUresult, (CUstream hStream, CUstreamCaptureMode mode))                  \
  X(cuStreamEndCapture, CUresult, (CUstream hStream, CUgraph * phGraph))                              \
  X(cuStreamIsCapturing, CUresult, (CUstream hStream, CUstreamCaptureStatus * captureStatus))         \
  X(cuThreadExchangeStreamCaptureMode, CUresult, (CUstreamCaptureMode * mode))                        \
  X(cuGraphGetNodes, CUresult, (CUgraph hGraph, CUgraphNode * nodes, size_t * numNodes))              \
  X(cuGraphInstantiateWithFlags, CUresult,                                                            \
    (CUgraphExec * phGraphExec, CUgraph hGraph, unsigned long long flags))                            \
  X(cuGraphLaunch, CUresult, (CUgraphExec hGraphExec, CUstream hStream))                              \
  X(cuGraphDestroy, CUresult, (CUgraph hGraph))                                                       \
  X(cuGraphExecDestroy, CUresult, (CUgraphExec hGraphExec))                                           \
  X(cuModuleLoadData, CUresult, (CUmodule * module, const void* image))                               \
  X(cuModuleUnload, CUresult, (CUmodule hmod))                                                        \
  X(cuModuleGetFunction, CUresult, (CUfunction * hfunc, CUmodule hmod, const char* name))             \
  X(cuFuncGetAttribute, CUresult, (int* pi, CUfunction_attribute attrib, CUfunction hfunc))           \
  X(cuFuncSetAttribute, CUresult, (CUfunction hfunc, CUfunction_attribute attrib, int value))         \
  X(cuLaunchKernel, CUresult,                                                                         \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,               \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                          \
     unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra))

// Entry points of newer drivers, used when present: cuFuncLoad (CUDA 12.4) loads a function that
// lazy loading (CUDA_MODULE_LOADING=LAZY, the default since 12.2) would otherwise load on its
// first launch, which may be inside a capture; cuLaunchKernelEx (CUDA 12.0) launches with
// attributes (an early start: programmatic stream serialization); without it such a launch is a
// plain one, in stream order.
#define METRALE_CUDA_DRIVER_OPTIONAL_FUNCTIONS(X)      \
  X(cuFuncLoad, CUresult, (CUfunction function))       \
  X(cuLaunchKernelEx, CUresult,                        \
    (const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra))

#define METRALE_DECLARE_PFN(name, ret, params) using PFN_##name = ret(*) params;
METRALE_CUDA_DRIVER_FUNCTIONS(METRALE_DECLARE_PFN)
METRALE_CUDA_DRIVER_OPTIONAL_FUNCTIONS(METRALE_DECLARE_PFN)
#undef METRALE_DECLARE_PFN

// cuEventElapsedTime_v2 appeared in CUDA 12.8 drivers; older drivers export only the unversioned
// cuEventElapsedTime, which has the same signature. driver.cc falls back to it.
inline constexpr const char* kEventElapsedTimeFallback = "cuEventElapsedTime";

}  // namespace metrale::cuda
