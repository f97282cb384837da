// The part of NCCL (nccl.h) that metrale uses, declared here so that the addon compiles without
// NCCL's headers; libnccl.so.2 is opened at run time (nccl.cc), only when a tensor-parallel group
// is made. Types and values follow NCCL's documented ABI, unchanged since NCCL 2.10 (bf16):
// ncclUniqueId is 128 opaque bytes passed by value, the enums are int-sized.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda-driver-api.h"

namespace metrale::ncclapi {

using ncclResult_t = int;
using ncclDataType_t = int;
using ncclRedOp_t = int;
using ncclComm_t = struct ncclComm*;
using cudaStream_t = metrale::cuda::CUstream;  // the runtime's stream is the driver's CUstream

constexpr size_t NCCL_UNIQUE_ID_BYTES = 128;
struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};
static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes");

// ncclResult_t
constexpr ncclResult_t ncclSuccess = 0;
constexpr ncclResult_t ncclUnhandledCudaError = 1;
constexpr ncclResult_t ncclSystemError = 2;
constexpr ncclResult_t ncclInternalError = 3;
constexpr ncclResult_t ncclInvalidArgument = 4;
constexpr ncclResult_t ncclInvalidUsage = 5;
constexpr ncclResult_t ncclRemoteError = 6;
constexpr ncclResult_t ncclInProgress = 7;

// ncclDataType_t
constexpr ncclDataType_t ncclFloat16 = 6;
constexpr ncclDataType_t ncclFloat32 = 7;
constexpr ncclDataType_t ncclBfloat16 = 9;

// ncclRedOp_t
constexpr ncclRedOp_t ncclSum = 0;

// name, return type, parameters
#define METRALE_NCCL_FUNCTIONS(X)                                                                                       \
  X(ncclGetVersion, ncclResult_t, (int* version))                                                                       \
  X(ncclGetUniqueId, ncclResult_t, (ncclUniqueId * uniqueId))                                                           \
  X(ncclCommInitRank, ncclResult_t, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))                     \
  X(ncclCommDestroy, ncclResult_t, (ncclComm_t comm))                                                                   \
  X(ncclCommAbort, ncclResult_t, (ncclComm_t comm))                                                                     \
  X(ncclGetErrorString, const char*, (ncclResult_t result))                                                             \
  X(ncclAllReduce, ncclResult_t,                                                                                        \
    (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,      \
     cudaStream_t stream))                                                                                              \
  X(ncclAllGather, ncclResult_t,                                                                                        \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)) \
  X(ncclReduceScatter, ncclResult_t,                                                                                    \
    (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,  \
     cudaStream_t stream))                                                                                              \
  X(ncclSend, ncclResult_t,                                                                                             \
    (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream))      \
  X(ncclRecv, ncclResult_t, (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)) \
  X(ncclGroupStart, ncclResult_t, ())                                                                                   \
  X(ncclGroupEnd, ncclResult_t, ())

#define METRALE_NCCL_TYPEDEF(name, ret, params) using PFN_##name = ret(*) params;
METRALE_NCCL_FUNCTIONS(METRALE_NCCL_TYPEDEF)
#undef METRALE_NCCL_TYPEDEF

}  // namespace metrale::ncclapi
