// Kernel modules, launches and GEMMs. Methods of Device (device.h).
#include "device.h"

#include <cstring>
#include <string>

#include "js-args.h"

namespace metrale {

namespace {
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper
}  // namespace

// ---- kernels ------------------------------------------------------------------------------

Napi::Value Device::LoadModule(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const auto [data, bytes] = bytesOf(info, 0);
  // The image is copied to 8-byte-aligned memory: a Buffer from a file read may start anywhere.
  std::vector<uint64_t> image((bytes + sizeof(uint64_t) - 1) / sizeof(uint64_t) + 1, 0);
  std::memcpy(image.data(), data, bytes);
  CUmodule module = nullptr;
  RelaxedCaptureMode relaxed;  // a first launch, and so the module load, may happen inside a capture
  check(env, driver().cuModuleLoadData(&module, image.data()), "cuModuleLoadData");
  return Napi::Number::New(env, modules_.add(module));
}

Napi::Value Device::RegisterKernel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUmodule* module = modules_.find(u32(info, 0));
  if (!module) throwCallError(env, "registerKernel", "unknown module");
  const std::string symbol = info[1].As<Napi::String>().Utf8Value();
  Napi::Uint32Array offsets = info[2].As<Napi::Uint32Array>();

  KernelEntry entry;
  {
    RelaxedCaptureMode relaxed;
    const CUresult found = driver().cuModuleGetFunction(&entry.function, *module, symbol.c_str());
    if (found != CUDA_SUCCESS) throwDriverError(env, "cuModuleGetFunction", found, "symbol '" + symbol + "'");
  }
  int maxThreads = 0, numRegs = 0, staticShared = 0;
  // Load the function now (lazy loading would load it at its first launch, perhaps inside a
  // capture). Drivers before 12.4 lack cuFuncLoad; there the attribute queries below load it.
  if (driver().cuFuncLoad) {
    RelaxedCaptureMode relaxed;
    check(env, driver().cuFuncLoad(entry.function), "cuFuncLoad");
  }
  check(env, driver().cuFuncGetAttribute(&maxThreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, entry.function),
        "cuFuncGetAttribute");
  check(env, driver().cuFuncGetAttribute(&entry.dynamicSharedLimit, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         entry.function),
        "cuFuncGetAttribute");
  check(env, driver().cuFuncGetAttribute(&numRegs, CU_FUNC_ATTRIBUTE_NUM_REGS, entry.function), "cuFuncGetAttribute");
  check(env, driver().cuFuncGetAttribute(&staticShared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, entry.function),
        "cuFuncGetAttribute");

  uint8_t* params = record_.get() + kLaunchHeaderBytes;
  for (size_t i = 0; i < offsets.ElementLength(); i++) {
    const uint32_t offset = offsets[i];
    if (offset % 4 != 0 || offset + 4 > kLaunchParamBytes) {
      throwCallError(env, "registerKernel", "parameter offset " + std::to_string(offset) + " outside the launch record");
    }
    entry.params.push_back(params + offset);
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("id", kernels_.add(entry));
  out.Set("maxThreadsPerBlock", maxThreads);
  out.Set("maxDynamicSharedBytes", entry.dynamicSharedLimit);
  out.Set("numRegs", numRegs);
  out.Set("staticSharedBytes", staticShared);
  return out;
}

Napi::Value Device::LaunchRecord(const Napi::CallbackInfo& info) {
  enter(info.Env());
  return recordBuffer_.Value();
}

Napi::Value Device::Launch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  uint32_t h[10];
  std::memcpy(h, record_.get(), sizeof h);
  KernelEntry* kernel = kernels_.find(h[0]);
  if (!kernel) throwCallError(env, "cuLaunchKernel", "unknown kernel id " + std::to_string(h[0]));
  const CUstream s = stream(env, h[8]);
  const int shared = static_cast<int>(h[7]);
  if (shared > kernel->dynamicSharedLimit) {
    // More than the default 48 KiB of dynamic shared memory must be opted into per function.
    RelaxedCaptureMode relaxed;
    check(env, driver().cuFuncSetAttribute(kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
          "cuFuncSetAttribute");
    kernel->dynamicSharedLimit = shared;
  }
  void** params = kernel->params.empty() ? nullptr : kernel->params.data();
  if ((h[9] & kLaunchEarlyStart) && driver().cuLaunchKernelEx) {
    // An early start: the kernel's blocks may run once the previous kernel's have all started
    // (they wait for it with griddepcontrol.wait). A driver without cuLaunchKernelEx launches in
    // stream order below, which keeps the same results.
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{h[1], h[2], h[3], h[4], h[5], h[6], h[7], s, &attr, 1};
    check(env, driver().cuLaunchKernelEx(&config, kernel->function, params, nullptr), "cuLaunchKernelEx");
    return env.Undefined();
  }
  check(env, driver().cuLaunchKernel(kernel->function, h[1], h[2], h[3], h[4], h[5], h[6], h[7], s, params, nullptr), "cuLaunchKernel");
  return env.Undefined();
}

// ---- GEMM ---------------------------------------------------------------------------------

// The workspace is allocated once, here, outside any capture: a GEMM recorded into a graph must
// not allocate, and the graph keeps using this very buffer.
Napi::Value Device::GemmInit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  if (gemm_) return env.Undefined();
  if (!cublasLt()) throwCallError(env, "gemm", "cuBLASLt is not loaded");
  check(env, driver().cuMemAlloc_v2(&gemmWorkspace_, kGemmWorkspaceBytes), "cuMemAlloc_v2");
  try {
    gemm_ = std::make_unique<GemmEngine>(env, reinterpret_cast<void*>(gemmWorkspace_), kGemmWorkspaceBytes);
  } catch (...) {
    driver().cuMemFree_v2(gemmWorkspace_);
    gemmWorkspace_ = 0;
    throw;
  }
  return env.Undefined();
}

Napi::Value Device::Gemm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  if (!gemm_) throwCallError(env, "gemm", "cuBLASLt is not initialised on this device");
  GemmProblem p;
  p.abType = static_cast<GemmType>(u32(info, 0));
  p.cType = static_cast<GemmType>(u32(info, 1));
  p.transA = info[2].As<Napi::Boolean>().Value();
  p.transB = info[3].As<Napi::Boolean>().Value();
  p.m = count(info, 4);
  p.n = count(info, 5);
  p.k = count(info, 6);
  p.lda = static_cast<int64_t>(count(info, 7));
  p.ldb = static_cast<int64_t>(count(info, 8));
  p.ldc = static_cast<int64_t>(count(info, 9));
  const CUdeviceptr a = pointer(info, 10), b = pointer(info, 11), c = pointer(info, 12);
  p.alignA = alignmentOf(a);
  p.alignB = alignmentOf(b);
  p.alignC = alignmentOf(c);
  const float alpha = static_cast<float>(info[13].As<Napi::Number>().DoubleValue());
  const float beta = static_cast<float>(info[14].As<Napi::Number>().DoubleValue());
  gemm_->run(env, p, reinterpret_cast<const void*>(a), reinterpret_cast<const void*>(b), reinterpret_cast<void*>(c),
             alpha, beta, stream(env, u32(info, 15)));
  return env.Undefined();
}

}  // namespace metrale
