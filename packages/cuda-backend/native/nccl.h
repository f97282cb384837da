// libnccl.so.2, opened at run time as libcuda is: the collectives of tensor and expert
// parallelism. Nothing loads it until a communicator is made, so a machine without NCCL runs
// everything else.
#pragma once

#include <napi.h>

#include <string>

#include "nccl-api.h"

namespace metrale {

using namespace metrale::ncclapi;

struct NcclApi {
#define METRALE_NCCL_FIELD(name, ret, params) PFN_##name name = nullptr;
  METRALE_NCCL_FUNCTIONS(METRALE_NCCL_FIELD)
#undef METRALE_NCCL_FIELD
};

struct NcclLoad {
  bool ok = false;
  std::string path;   // what was opened (libnccl.so.2, or $METRALE_NCCL_PATH)
  int version = 0;    // ncclGetVersion(): major * 10000 + minor * 100 + patch (2.19+)
  std::string error;  // why not, when !ok
};

/**
 * Opens NCCL once per process (thread-safe); every later call returns the first outcome. Sets
 * NCCL_NVLS_ENABLE=0 first: NVLink multicast (NVLS) stays off in every process metrale starts.
 */
const NcclLoad& loadNccl();

/** The resolved entry points; only valid after loadNccl().ok. */
const NcclApi& nccl();

/** ncclResult_t's name (`ncclInvalidArgument`). */
std::string ncclResultName(ncclResult_t result);

/** Throws a JavaScript Error naming the call, the result and NCCL's text for it. */
[[noreturn]] void throwNcclError(Napi::Env env, const std::string& call, ncclResult_t result);

inline void checkNccl(Napi::Env env, ncclResult_t result, const char* call) {
  if (result != ncclSuccess) throwNcclError(env, call, result);
}

/** Throws unless NCCL is loaded, with the reason it is not. */
void requireNccl(Napi::Env env);

}  // namespace metrale
