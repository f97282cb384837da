// The module's entry: driver probing (never throws for a missing driver: it reports), device
// properties, cuBLASLt loading, the self-check, and the Device class.
#include <napi.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cublaslt.h"
#include "device.h"
#include "driver.h"
#include "nccl.h"

namespace metrale {
namespace {

static_assert(sizeof(void*) == 8, "64-bit builds only");
static_assert(sizeof(CUdeviceptr) == 8, "CUdeviceptr is 64-bit");
static_assert(sizeof(CUresult) == 4, "CUresult is an int-sized enum");

/** { ok, path, error }: whether libcuda could be opened, and why not. */
Napi::Value LoadDriver(const Napi::CallbackInfo& info) {
  const DriverLoad& load = loadDriver();
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("ok", load.ok);
  out.Set("path", load.path);
  out.Set("error", load.error);
  return out;
}

/** Every function below needs the driver's entry points; a missing driver is an exception here. */
void requireDriver(Napi::Env env) {
  if (!loadDriver().ok) throwCallError(env, "dlopen", loadDriver().error);
}

/** cuInit(0) as { result, code, text }: a failure here is a finding of the probe, not an exception. */
Napi::Value InitDriver(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireDriver(env);
  const CUresult result = driver().cuInit(0);
  Napi::Object out = Napi::Object::New(env);
  out.Set("result", result);
  out.Set("code", resultName(result));
  out.Set("text", resultText(result));
  return out;
}

Napi::Value DriverVersion(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireDriver(env);
  int version = 0;
  check(env, driver().cuDriverGetVersion(&version), "cuDriverGetVersion");
  return Napi::Number::New(env, version);
}

Napi::Value DeviceCount(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireDriver(env);
  int count = 0;
  check(env, driver().cuDeviceGetCount(&count), "cuDeviceGetCount");
  return Napi::Number::New(env, count);
}

/** Properties of one device; needs no context. */
Napi::Value DeviceInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireDriver(env);
  const int ordinal = static_cast<int>(info[0].As<Napi::Number>().Int32Value());
  CUdevice device = 0;
  check(env, driver().cuDeviceGet(&device, ordinal), "cuDeviceGet");
  char name[256] = {};
  check(env, driver().cuDeviceGetName(name, sizeof name - 1, device), "cuDeviceGetName");
  size_t totalMemory = 0;
  check(env, driver().cuDeviceTotalMem_v2(&totalMemory, device), "cuDeviceTotalMem_v2");
  auto attribute = [&](CUdevice_attribute which) {
    int value = 0;
    check(env, driver().cuDeviceGetAttribute(&value, which, device), "cuDeviceGetAttribute");
    return value;
  };
  Napi::Object out = Napi::Object::New(env);
  out.Set("index", ordinal);
  out.Set("name", std::string(name));
  out.Set("major", attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR));
  out.Set("minor", attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  out.Set("totalMemory", static_cast<double>(totalMemory));
  out.Set("multiprocessors", attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
  out.Set("l2CacheBytes", attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
  out.Set("maxThreadsPerBlock", attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
  out.Set("maxSharedPerBlock", attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  out.Set("maxSharedPerBlockOptin", attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  return out;
}

/**
 * Tries the candidate paths in order: { ok, path, version, tried: [{ path, error }] }. Call with a
 * device's context current (after creating a Device): each candidate must create a handle.
 */
Napi::Value LoadCublasLt(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array list = info[0].As<Napi::Array>();
  std::vector<std::string> candidates;
  for (uint32_t i = 0; i < list.Length(); i++) candidates.push_back(list.Get(i).As<Napi::String>().Utf8Value());
  const CublasLtLoad& load = loadCublasLt(candidates);
  Napi::Object out = Napi::Object::New(env);
  out.Set("ok", load.ok);
  out.Set("path", load.path);
  out.Set("version", static_cast<double>(load.version));
  Napi::Array tried = Napi::Array::New(env, load.tried.size());
  for (size_t i = 0; i < load.tried.size(); i++) {
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("path", load.tried[i].first);
    entry.Set("error", load.tried[i].second);
    tried.Set(static_cast<uint32_t>(i), entry);
  }
  out.Set("tried", tried);
  return out;
}

/**
 * Checks the numeric values this addon declares against the names the loaded libraries give
 * them (cuGetErrorName, cublasLtGetStatusName): { ok, checked, problems }. Needs no GPU, only the
 * libraries. Enum values that have no name lookup are checked at build time against cuda.h
 * (native/verify) and were read off NVIDIA's headers for cuBLASLt.
 */
Napi::Value SelfCheck(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<std::string> problems;
  int checked = 0;
  if (loadDriver().ok) {
    const std::pair<CUresult, const char*> results[] = {
        {CUDA_SUCCESS, "CUDA_SUCCESS"},
        {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
        {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
        {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
        {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"},
        {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
        {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
        {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"},
        {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
        {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
        {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"},
    };
    for (const auto& [value, expected] : results) {
      checked++;
      const std::string actual = resultName(value);
      if (actual != expected) problems.push_back(std::string(expected) + " = " + std::to_string(value) + ", but the driver names it " + actual);
    }
  }
  if (const CublasLtApi* lt = cublasLt(); lt && lt->cublasLtGetStatusName) {
    const std::pair<cublasStatus_t, const char*> statuses[] = {
        {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS"},
        {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED"},
        {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED"},
        {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE"},
        {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH"},
        {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED"},
        {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR"},
        {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED"},
    };
    for (const auto& [value, expected] : statuses) {
      checked++;
      const char* actual = lt->cublasLtGetStatusName(value);
      if (!actual || std::string(actual) != expected) {
        problems.push_back(std::string(expected) + " = " + std::to_string(value) + ", but cuBLASLt names it " + (actual ? actual : "(null)"));
      }
    }
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("ok", problems.empty());
  out.Set("checked", checked);
  Napi::Array list = Napi::Array::New(env, problems.size());
  for (size_t i = 0; i < problems.size(); i++) list.Set(static_cast<uint32_t>(i), problems[i]);
  out.Set("problems", list);
  return out;
}

/** { ok, path, version, error }: whether NCCL could be opened (it is opened on first use only). */
Napi::Value LoadNccl(const Napi::CallbackInfo& info) {
  const NcclLoad& load = loadNccl();
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("ok", load.ok);
  out.Set("path", load.path);
  out.Set("version", load.version);
  out.Set("error", load.error);
  return out;
}

/** A new group's ncclUniqueId: 128 bytes that every rank passes to Device.commInit. */
Napi::Value NcclUniqueId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  requireNccl(env);
  ncclUniqueId id;
  checkNccl(env, nccl().ncclGetUniqueId(&id), "ncclGetUniqueId");
  Napi::Uint8Array out = Napi::Uint8Array::New(env, NCCL_UNIQUE_ID_BYTES);
  std::memcpy(out.Data(), id.internal, NCCL_UNIQUE_ID_BYTES);
  return out;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("loadDriver", Napi::Function::New<LoadDriver>(env, "loadDriver"));
  exports.Set("init", Napi::Function::New<InitDriver>(env, "init"));
  exports.Set("driverVersion", Napi::Function::New<DriverVersion>(env, "driverVersion"));
  exports.Set("deviceCount", Napi::Function::New<DeviceCount>(env, "deviceCount"));
  exports.Set("deviceInfo", Napi::Function::New<DeviceInfo>(env, "deviceInfo"));
  exports.Set("loadCublasLt", Napi::Function::New<LoadCublasLt>(env, "loadCublasLt"));
  exports.Set("selfCheck", Napi::Function::New<SelfCheck>(env, "selfCheck"));
  exports.Set("loadNccl", Napi::Function::New<LoadNccl>(env, "loadNccl"));
  exports.Set("ncclUniqueId", Napi::Function::New<NcclUniqueId>(env, "ncclUniqueId"));
  exports.Set("Device", Device::Define(env));
  return exports;
}

}  // namespace
}  // namespace metrale

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return metrale::Init(env, exports); }

NODE_API_MODULE(metrale_cuda, InitModule)
