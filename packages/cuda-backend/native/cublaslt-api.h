// The part of cuBLASLt (cublasLt.h, cublas_api.h, library_types.h) that metrale uses, declared
// here so that the addon compiles without cuBLAS headers; libcublasLt is opened at run time
// (cublaslt.cc). Values are those of the CUDA 12.x / 13.0 headers, where they have not changed
// since cuBLASLt's CUDA 11 API (checked against NVIDIA's published cublasLt.h and cublas_api.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda-driver-api.h"

namespace metrale::cublaslt {

using cublasStatus_t = int;        // enum, int-sized
using cublasComputeType_t = int;   // enum
using cudaDataType_t = int;        // enum (library_types.h)
using cublasOperation_t = int32_t; // enum; the TRANSA/TRANSB attributes are int32_t
using cublasLtHandle_t = struct cublasLtContext*;
using cublasLtMatmulDesc_t = struct cublasLtMatmulDescOpaque*;
using cublasLtMatrixLayout_t = struct cublasLtMatrixLayoutOpaque*;
using cublasLtMatmulPreference_t = struct cublasLtMatmulPreferenceOpaque*;
using cublasLtMatmulDescAttributes_t = int;
using cublasLtMatmulPreferenceAttributes_t = int;
using cudaStream_t = metrale::cuda::CUstream;  // the runtime's stream is the driver's CUstream

/** Semi-opaque algorithm descriptor: cublasLt.h's `struct { uint64_t data[8]; }`. */
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};

/** cublasLt.h's cublasLtMatmulHeuristicResult_t; the array stride must match the library's. */
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};
static_assert(sizeof(cublasLtMatmulAlgo_t) == 64, "cublasLtMatmulAlgo_t is 8 x uint64_t");
static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == 96, "heuristic result: 64 + 8 + 4 + 4 + 16 bytes");

// cublasStatus_t (cublas_api.h)
constexpr cublasStatus_t CUBLAS_STATUS_SUCCESS = 0;
constexpr cublasStatus_t CUBLAS_STATUS_NOT_INITIALIZED = 1;
constexpr cublasStatus_t CUBLAS_STATUS_ALLOC_FAILED = 3;
constexpr cublasStatus_t CUBLAS_STATUS_INVALID_VALUE = 7;
constexpr cublasStatus_t CUBLAS_STATUS_ARCH_MISMATCH = 8;
constexpr cublasStatus_t CUBLAS_STATUS_MAPPING_ERROR = 11;
constexpr cublasStatus_t CUBLAS_STATUS_EXECUTION_FAILED = 13;
constexpr cublasStatus_t CUBLAS_STATUS_INTERNAL_ERROR = 14;
constexpr cublasStatus_t CUBLAS_STATUS_NOT_SUPPORTED = 15;
constexpr cublasStatus_t CUBLAS_STATUS_LICENSE_ERROR = 16;

// cublasComputeType_t (cublas_api.h): FP32 accumulation, no TF32 or bf16 down-conversion of inputs.
constexpr cublasComputeType_t CUBLAS_COMPUTE_32F = 68;

// cudaDataType_t (library_types.h)
constexpr cudaDataType_t CUDA_R_32F = 0;
constexpr cudaDataType_t CUDA_R_16F = 2;
constexpr cudaDataType_t CUDA_R_16BF = 14;

// cublasOperation_t
constexpr cublasOperation_t CUBLAS_OP_N = 0;
constexpr cublasOperation_t CUBLAS_OP_T = 1;

// cublasLtMatmulDescAttributes_t; each comment is the attribute's value type.
constexpr cublasLtMatmulDescAttributes_t CUBLASLT_MATMUL_DESC_TRANSA = 3;  // int32_t
constexpr cublasLtMatmulDescAttributes_t CUBLASLT_MATMUL_DESC_TRANSB = 4;  // int32_t

// cublasLtMatmulPreferenceAttributes_t
constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1;    // uint64_t
constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5;  // uint32_t
constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6;  // uint32_t
constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7;  // uint32_t
constexpr cublasLtMatmulPreferenceAttributes_t CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8;  // uint32_t

#define METRALE_CUBLASLT_FUNCTIONS(X)                                                                   \
  X(cublasLtCreate, cublasStatus_t, (cublasLtHandle_t * lightHandle))                                   \
  X(cublasLtDestroy, cublasStatus_t, (cublasLtHandle_t lightHandle))                                    \
  X(cublasLtGetVersion, size_t, ())                                                                     \
  X(cublasLtMatmulDescCreate, cublasStatus_t,                                                           \
    (cublasLtMatmulDesc_t * matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType))     \
  X(cublasLtMatmulDescDestroy, cublasStatus_t, (cublasLtMatmulDesc_t matmulDesc))                       \
  X(cublasLtMatmulDescSetAttribute, cublasStatus_t,                                                     \
    (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void* buf,             \
     size_t sizeInBytes))                                                                               \
  X(cublasLtMatrixLayoutCreate, cublasStatus_t,                                                         \
    (cublasLtMatrixLayout_t * matLayout, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld)) \
  X(cublasLtMatrixLayoutDestroy, cublasStatus_t, (cublasLtMatrixLayout_t matLayout))                    \
  X(cublasLtMatmulPreferenceCreate, cublasStatus_t, (cublasLtMatmulPreference_t * pref))                \
  X(cublasLtMatmulPreferenceDestroy, cublasStatus_t, (cublasLtMatmulPreference_t pref))                 \
  X(cublasLtMatmulPreferenceSetAttribute, cublasStatus_t,                                               \
    (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,       \
     size_t sizeInBytes))                                                                               \
  X(cublasLtMatmulAlgoGetHeuristic, cublasStatus_t,                                                     \
    (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,    \
     cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,          \
     cublasLtMatmulPreference_t preference, int requestedAlgoCount,                                     \
     cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount))                    \
  X(cublasLtMatmul, cublasStatus_t,                                                                     \
    (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha, const void* A,  \
     cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,       \
     const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,                \
     const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,                    \
     cudaStream_t stream))

// Present since CUDA 11.4; resolved when there, otherwise errors name the status from a table.
#define METRALE_CUBLASLT_OPTIONAL_FUNCTIONS(X)                                \
  X(cublasLtGetStatusName, const char*, (cublasStatus_t status))             \
  X(cublasLtGetStatusString, const char*, (cublasStatus_t status))

#define METRALE_DECLARE_PFN(name, ret, params) using PFN_##name = ret(*) params;
METRALE_CUBLASLT_FUNCTIONS(METRALE_DECLARE_PFN)
METRALE_CUBLASLT_OPTIONAL_FUNCTIONS(METRALE_DECLARE_PFN)
#undef METRALE_DECLARE_PFN

}  // namespace metrale::cublaslt
