// libcuda.so.1, opened at run time, and the errors its calls raise in JavaScript.
#pragma once

#include <napi.h>

#include <string>

#include "cuda-driver-api.h"

namespace metrale {

using namespace metrale::cuda;

/** Every driver entry point the addon calls, resolved from libcuda with dlsym. */
struct DriverApi {
#define METRALE_DRIVER_FIELD(name, ret, params) PFN_##name name = nullptr;
  METRALE_CUDA_DRIVER_FUNCTIONS(METRALE_DRIVER_FIELD)
  METRALE_CUDA_DRIVER_OPTIONAL_FUNCTIONS(METRALE_DRIVER_FIELD)  // nullptr on older drivers
#undef METRALE_DRIVER_FIELD
};

struct DriverLoad {
  bool ok = false;
  std::string path;   // what was opened (libcuda.so.1, or $METRALE_LIBCUDA_PATH)
  std::string error;  // why not, when !ok
};

/** Opens libcuda once per process; every later call returns the first outcome. Thread-safe. */
const DriverLoad& loadDriver();

/** The resolved entry points; only valid after loadDriver().ok. */
const DriverApi& driver();

/** cuGetErrorName / cuGetErrorString, with a fallback when the driver does not know the code. */
std::string resultName(CUresult result);
std::string resultText(CUresult result);

/**
 * Throws a JavaScript Error with `call`, `code` (the CUresult name), `detail` (its text) and
 * `result` (the number); the TypeScript layer turns it into a DeviceError.
 */
[[noreturn]] void throwDriverError(Napi::Env env, const std::string& call, CUresult result,
                                   const std::string& context = "");

/** Throws a JavaScript Error with `call` and, when given, `code`; for failures that are not a CUresult. */
[[noreturn]] void throwCallError(Napi::Env env, const std::string& call, const std::string& message,
                                 const std::string& code = "");

inline void check(Napi::Env env, CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) throwDriverError(env, call, result);
}

/**
 * While alive, this thread may make calls that CUDA calls "potentially unsafe" during a stream
 * capture (module loading, function attributes): it switches the thread's capture mode to
 * RELAXED and restores it. Needed because a kernel's module is loaded on its first launch, which
 * may happen inside a capture.
 */
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged_ = false;
};

}  // namespace metrale
