#include "nccl.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "driver.h"

namespace metrale {

namespace {

NcclApi g_api;
NcclLoad g_load;
std::once_flag g_once;

void open() {
  // NVLink multicast (NVLS, cuMulticastCreate) stays off, whatever the environment says.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  // METRALE_NCCL_PATH points at another libnccl (a pip wheel's, or the test suite's mock).
  const char* override = std::getenv("METRALE_NCCL_PATH");
  g_load.path = override && *override ? override : "libnccl.so.2";
  void* lib = dlopen(g_load.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    g_load.error = std::string("cannot open ") + g_load.path + ": " + (why ? why : "dlopen failed") +
                   "; tensor parallelism needs NCCL 2.10 or later: install it (the libnccl2 package, or pip install "
                   "nvidia-nccl-cu12 and point METRALE_NCCL_PATH at its libnccl.so.2)";
    return;
  }
#define METRALE_NCCL_RESOLVE(name, ret, params) g_api.name = reinterpret_cast<PFN_##name>(dlsym(lib, #name));
  METRALE_NCCL_FUNCTIONS(METRALE_NCCL_RESOLVE)
#undef METRALE_NCCL_RESOLVE
  std::string missing;
#define METRALE_NCCL_MISSING(name, ret, params) \
  if (!g_api.name) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  METRALE_NCCL_FUNCTIONS(METRALE_NCCL_MISSING)
#undef METRALE_NCCL_MISSING
  if (!missing.empty()) {
    g_load.error = g_load.path + " lacks " + missing + " (NCCL too old; metrale needs NCCL 2.10 or later)";
    return;
  }
  g_api.ncclGetVersion(&g_load.version);
  g_load.ok = true;
}

}  // namespace

const NcclLoad& loadNccl() {
  std::call_once(g_once, open);
  return g_load;
}

const NcclApi& nccl() { return g_api; }

std::string ncclResultName(ncclResult_t result) {
  static const char* const names[] = {
      "ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
      "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress",
  };
  if (result >= 0 && result < static_cast<int>(sizeof names / sizeof names[0])) return names[result];
  return "ncclResult " + std::to_string(result);
}

[[noreturn]] void throwNcclError(Napi::Env env, const std::string& call, ncclResult_t result) {
  const char* text = g_api.ncclGetErrorString ? g_api.ncclGetErrorString(result) : nullptr;
  throwCallError(env, call, text ? text : "unknown NCCL error", ncclResultName(result));
}

void requireNccl(Napi::Env env) {
  const NcclLoad& load = loadNccl();
  if (!load.ok) throwCallError(env, "dlopen", load.error);
}

}  // namespace metrale
