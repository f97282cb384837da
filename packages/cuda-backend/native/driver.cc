#include "driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace metrale {

namespace {

DriverApi g_api;
DriverLoad g_load;
std::once_flag g_once;

void open() {
  // METRALE_LIBCUDA_PATH points at another libcuda (an unusual install, or the test suite's mock).
  const char* override = std::getenv("METRALE_LIBCUDA_PATH");
  g_load.path = override && *override ? override : "libcuda.so.1";
  void* lib = dlopen(g_load.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    g_load.error = why ? why : "dlopen failed";
    return;
  }
#define METRALE_RESOLVE(name, ret, params) g_api.name = reinterpret_cast<PFN_##name>(dlsym(lib, #name));
  METRALE_CUDA_DRIVER_FUNCTIONS(METRALE_RESOLVE)
  METRALE_CUDA_DRIVER_OPTIONAL_FUNCTIONS(METRALE_RESOLVE)
#undef METRALE_RESOLVE
  if (!g_api.cuEventElapsedTime_v2) {
    g_api.cuEventElapsedTime_v2 = reinterpret_cast<PFN_cuEventElapsedTime_v2>(dlsym(lib, kEventElapsedTimeFallback));
  }
  std::string missing;
#define METRALE_MISSING(name, ret, params) \
  if (!g_api.name) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  METRALE_CUDA_DRIVER_FUNCTIONS(METRALE_MISSING)
#undef METRALE_MISSING
  if (!missing.empty()) {
    // A driver too old for this addon (cuGraphInstantiateWithFlags needs CUDA 11.4+).
    g_load.error = g_load.path + " lacks " + missing + " (driver too old; metrale needs a CUDA 12 driver)";
    return;
  }
  g_load.ok = true;
}

}  // namespace

const DriverLoad& loadDriver() {
  std::call_once(g_once, open);
  return g_load;
}

const DriverApi& driver() { return g_api; }

std::string resultName(CUresult result) {
  const char* name = nullptr;
  if (g_api.cuGetErrorName && g_api.cuGetErrorName(result, &name) == CUDA_SUCCESS && name) return name;
  return "CUresult " + std::to_string(result);
}

std::string resultText(CUresult result) {
  const char* text = nullptr;
  if (g_api.cuGetErrorString && g_api.cuGetErrorString(result, &text) == CUDA_SUCCESS && text) return text;
  return "unknown CUDA error " + std::to_string(result);
}

[[noreturn]] void throwDriverError(Napi::Env env, const std::string& call, CUresult result,
                                   const std::string& context) {
  const std::string name = resultName(result);
  const std::string text = context.empty() ? resultText(result) : resultText(result) + " (" + context + ")";
  Napi::Error error = Napi::Error::New(env, call + " failed: " + name + ": " + text);
  error.Set("call", Napi::String::New(env, call));
  error.Set("code", Napi::String::New(env, name));
  error.Set("detail", Napi::String::New(env, text));
  error.Set("result", Napi::Number::New(env, result));
  throw error;
}

[[noreturn]] void throwCallError(Napi::Env env, const std::string& call, const std::string& message,
                                 const std::string& code) {
  Napi::Error error = Napi::Error::New(env, code.empty() ? call + ": " + message : call + " failed: " + code + ": " + message);
  error.Set("call", Napi::String::New(env, call));
  if (!code.empty()) error.Set("code", Napi::String::New(env, code));
  error.Set("detail", Napi::String::New(env, message));
  throw error;
}

RelaxedCaptureMode::RelaxedCaptureMode() {
  exchanged_ = g_api.cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS;
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (exchanged_) g_api.cuThreadExchangeStreamCaptureMode(&mode_);
}

}  // namespace metrale
