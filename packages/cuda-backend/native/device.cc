#include "device.h"

#include <cmath>
#include <cstring>
#include <string>

namespace metrale {

namespace {

// The context current on this OS thread, as far as this addon set it; saves a driver call per
// method. Libraries loaded here (cuBLASLt) use the same primary context, so they never change it.
thread_local CUcontext t_current = nullptr;

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper

uint32_t u32(const Napi::CallbackInfo& info, size_t i) { return info[i].As<Napi::Number>().Uint32Value(); }

/** A byte count or offset: JavaScript checked it is a safe non-negative integer. */
size_t count(const Napi::CallbackInfo& info, size_t i) {
  const double value = info[i].As<Napi::Number>().DoubleValue();
  if (!(value >= 0) || value != std::floor(value) || value > 9007199254740991.0) {
    throwCallError(info.Env(), "argument", "expected a non-negative integer, got " + std::to_string(value));
  }
  return static_cast<size_t>(value);
}

CUdeviceptr pointer(const Napi::CallbackInfo& info, size_t i) {
  bool lossless = true;
  const uint64_t value = info[i].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) throwCallError(info.Env(), "argument", "device pointer out of the 64-bit range");
  return value;
}

/** The bytes of a Uint8Array (which may view a SharedArrayBuffer). */
std::pair<uint8_t*, size_t> bytesOf(const Napi::CallbackInfo& info, size_t i) {
  napi_typedarray_type type;
  size_t length = 0;
  void* data = nullptr;
  if (napi_get_typedarray_info(info.Env(), info[i], &type, &length, &data, nullptr, nullptr) != napi_ok ||
      type != napi_uint8_array) {
    throwCallError(info.Env(), "argument", "expected a Uint8Array");
  }
  return {static_cast<uint8_t*>(data), length};
}

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

/** Largest power of two, up to 256, that divides the address (what cuBLASLt may assume). */
uint32_t alignmentOf(CUdeviceptr ptr) {
  uint32_t alignment = 256;
  while (alignment > 1 && ptr % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace

Napi::Function Device::Define(Napi::Env env) {
  return DefineClass(env, "Device",
                     {
                         InstanceMethod<&Device::Alloc>("alloc"),
                         InstanceMethod<&Device::Free>("free"),
                         InstanceMethod<&Device::Trim>("trim"),
                         InstanceMethod<&Device::PoolStats>("poolStats"),
                         InstanceMethod<&Device::MemInfo>("memInfo"),
                         InstanceMethod<&Device::AllocHost>("allocHost"),
                         InstanceMethod<&Device::FreeHost>("freeHost"),
                         InstanceMethod<&Device::Memset>("memset"),
                         InstanceMethod<&Device::CopyHtoD>("copyHtoD"),
                         InstanceMethod<&Device::CopyDtoH>("copyDtoH"),
                         InstanceMethod<&Device::CopyDtoD>("copyDtoD"),
                         InstanceMethod<&Device::UploadSync>("uploadSync"),
                         InstanceMethod<&Device::DownloadSync>("downloadSync"),
                         InstanceMethod<&Device::Synchronize>("synchronize"),
                         InstanceMethod<&Device::CreateStream>("createStream"),
                         InstanceMethod<&Device::DestroyStream>("destroyStream"),
                         InstanceMethod<&Device::StreamSynchronize>("streamSynchronize"),
                         InstanceMethod<&Device::CreateEvent>("createEvent"),
                         InstanceMethod<&Device::RecordEvent>("recordEvent"),
                         InstanceMethod<&Device::EventSynchronize>("eventSynchronize"),
                         InstanceMethod<&Device::EventElapsed>("eventElapsed"),
                         InstanceMethod<&Device::DestroyEvent>("destroyEvent"),
                         InstanceMethod<&Device::BeginCapture>("beginCapture"),
                         InstanceMethod<&Device::EndCapture>("endCapture"),
                         InstanceMethod<&Device::CaptureStatus>("captureStatus"),
                         InstanceMethod<&Device::Instantiate>("instantiate"),
                         InstanceMethod<&Device::LaunchGraph>("launchGraph"),
                         InstanceMethod<&Device::DestroyGraph>("destroyGraph"),
                         InstanceMethod<&Device::DestroyGraphExec>("destroyGraphExec"),
                         InstanceMethod<&Device::LoadModule>("loadModule"),
                         InstanceMethod<&Device::RegisterKernel>("registerKernel"),
                         InstanceMethod<&Device::LaunchRecord>("launchRecord"),
                         InstanceMethod<&Device::Launch>("launch"),
                         InstanceMethod<&Device::GemmInit>("gemmInit"),
                         InstanceMethod<&Device::Gemm>("gemm"),
                         InstanceMethod<&Device::Dispose>("dispose"),
                     });
}

Device::Device(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Device>(info) {
  Napi::Env env = info.Env();
  const DriverLoad& load = loadDriver();
  if (!load.ok) throwCallError(env, "dlopen", load.error);
  ordinal_ = static_cast<int>(u32(info, 0));
  check(env, driver().cuInit(0), "cuInit");
  check(env, driver().cuDeviceGet(&device_, ordinal_), "cuDeviceGet");
  check(env, driver().cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  open_ = true;
  try {
    check(env, driver().cuCtxSetCurrent(context_), "cuCtxSetCurrent");
    t_current = context_;
    // The default stream is a created, non-blocking one: the legacy NULL stream cannot be
    // captured and synchronizes with every blocking stream.
    CUstream defaultStream = nullptr;
    check(env, driver().cuStreamCreate(&defaultStream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    streams_.add(defaultStream);
    record_ = std::make_unique<uint8_t[]>(kLaunchRecordBytes);
    std::memset(record_.get(), 0, kLaunchRecordBytes);
    // External: JavaScript writes straight into record_. Detached in dispose; never freed by V8.
    recordBuffer_ = Napi::Persistent(Napi::ArrayBuffer::New(env, record_.get(), kLaunchRecordBytes));
  } catch (...) {
    release(false, env);
    throw;
  }
}

Device::~Device() {
  if (open_) release(false, Env());
}

void Device::enter(Napi::Env env) {
  if (!open_) throwCallError(env, "CudaBackend", "this backend was disposed");
  if (t_current != context_) {
    check(env, driver().cuCtxSetCurrent(context_), "cuCtxSetCurrent");
    t_current = context_;
  }
}

CUstream Device::stream(Napi::Env env, uint32_t id) {
  CUstream* s = streams_.find(id);
  if (!s) throwCallError(env, "stream", "unknown or destroyed stream id " + std::to_string(id));
  return *s;
}

Device::HostAllocation& Device::host(Napi::Env env, uint32_t id) {
  HostAllocation* h = hosts_.find(id);
  if (!h) throwCallError(env, "host buffer", "unknown or freed host buffer id " + std::to_string(id));
  return *h;
}

// ---- memory -------------------------------------------------------------------------------

Napi::Value Device::Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const size_t bytes = count(info, 0);
  CUdeviceptr ptr = 0;
  bool hit = false;
  const CUresult result = pool_.allocate(bytes, &ptr, &hit);
  if (result != CUDA_SUCCESS) throwDriverError(env, "cuMemAlloc_v2", result, std::to_string(bytes) + " bytes");
  return Napi::BigInt::New(env, static_cast<uint64_t>(ptr));
}

Napi::Value Device::Free(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const CUdeviceptr ptr = pointer(info, 0);
  if (!pool_.release(ptr)) throwCallError(env, "free", hex(ptr) + " is not a live allocation of this device");
  return env.Undefined();
}

Napi::Value Device::Trim(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUresult result = CUDA_SUCCESS;
  const size_t released = pool_.trim(&result);
  if (result != CUDA_SUCCESS) throwDriverError(env, "cuMemFree_v2", result, "trim");
  return Napi::Number::New(env, static_cast<double>(released));
}

Napi::Value Device::PoolStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const DevicePool::Stats s = pool_.stats();
  Napi::Object out = Napi::Object::New(env);
  out.Set("liveBytes", static_cast<double>(s.liveBytes));
  out.Set("liveBlocks", static_cast<double>(s.liveBlocks));
  out.Set("cachedBytes", static_cast<double>(s.cachedBytes));
  out.Set("cachedBlocks", static_cast<double>(s.cachedBlocks));
  out.Set("hits", static_cast<double>(s.hits));
  out.Set("misses", static_cast<double>(s.misses));
  return out;
}

Napi::Value Device::MemInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  size_t free = 0, total = 0;
  check(env, driver().cuMemGetInfo_v2(&free, &total), "cuMemGetInfo_v2");
  Napi::Object out = Napi::Object::New(env);
  out.Set("free", static_cast<double>(free));
  out.Set("total", static_cast<double>(total));
  return out;
}

Napi::Value Device::AllocHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const size_t bytes = count(info, 0);
  void* ptr = nullptr;
  // Portable: usable by every context, so a buffer outlives nothing it should not.
  check(env, driver().cuMemHostAlloc(&ptr, bytes > 0 ? bytes : 1, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
  HostAllocation allocation;
  allocation.ptr = ptr;
  allocation.bytes = bytes;
  try {
    // An external ArrayBuffer over the pinned memory, with no finalizer: the memory belongs to
    // this device until freeHost (or dispose), which detaches the buffer first, so JavaScript
    // can never touch freed memory through it.
    Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(env, ptr, bytes);
    allocation.buffer = std::make_shared<Napi::Reference<Napi::ArrayBuffer>>(Napi::Persistent(buffer));
  } catch (...) {
    driver().cuMemFreeHost(ptr);
    throw;
  }
  const uint32_t id = hosts_.add(allocation);
  Napi::Object out = Napi::Object::New(env);
  out.Set("id", id);
  out.Set("buffer", allocation.buffer->Value());
  return out;
}

Napi::Value Device::FreeHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const uint32_t id = u32(info, 0);
  HostAllocation& h = host(env, id);
  check(env, driver().cuMemFreeHost(h.ptr), "cuMemFreeHost");
  Napi::ArrayBuffer buffer = h.buffer->Value();
  if (!buffer.IsDetached()) buffer.Detach();
  hosts_.erase(id);
  return env.Undefined();
}

// ---- copies -------------------------------------------------------------------------------

Napi::Value Device::Memset(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const CUdeviceptr dst = pointer(info, 0);
  const unsigned char value = static_cast<unsigned char>(u32(info, 1));
  const size_t bytes = count(info, 2);
  check(env, driver().cuMemsetD8Async(dst, value, bytes, stream(env, u32(info, 3))), "cuMemsetD8Async");
  return env.Undefined();
}

Napi::Value Device::CopyHtoD(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const CUdeviceptr dst = pointer(info, 0);
  HostAllocation& h = host(env, u32(info, 1));
  const size_t offset = count(info, 2), bytes = count(info, 3);
  if (offset > h.bytes || bytes > h.bytes - offset) throwCallError(env, "copyToDeviceAsync", "range outside the host buffer");
  check(env, driver().cuMemcpyHtoDAsync_v2(dst, static_cast<uint8_t*>(h.ptr) + offset, bytes, stream(env, u32(info, 4))),
        "cuMemcpyHtoDAsync_v2");
  return env.Undefined();
}

Napi::Value Device::CopyDtoH(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  HostAllocation& h = host(env, u32(info, 0));
  const size_t offset = count(info, 1);
  const CUdeviceptr src = pointer(info, 2);
  const size_t bytes = count(info, 3);
  if (offset > h.bytes || bytes > h.bytes - offset) throwCallError(env, "copyToHostAsync", "range outside the host buffer");
  check(env, driver().cuMemcpyDtoHAsync_v2(static_cast<uint8_t*>(h.ptr) + offset, src, bytes, stream(env, u32(info, 4))),
        "cuMemcpyDtoHAsync_v2");
  return env.Undefined();
}

Napi::Value Device::CopyDtoD(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const CUdeviceptr dst = pointer(info, 0), src = pointer(info, 1);
  const size_t bytes = count(info, 2);
  check(env, driver().cuMemcpyDtoDAsync_v2(dst, src, bytes, stream(env, u32(info, 3))), "cuMemcpyDtoDAsync_v2");
  return env.Undefined();
}

// A synchronous copy from pageable memory runs on the legacy NULL stream, which our non-blocking
// streams do not wait for, and cuMemcpyHtoD may return before its DMA has landed. So: wait for
// the device, copy, and wait again; then every stream sees the data. (During a capture the first
// wait fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, as the contract requires.)
Napi::Value Device::UploadSync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const CUdeviceptr dst = pointer(info, 0);
  const auto [data, bytes] = bytesOf(info, 1);
  check(env, driver().cuCtxSynchronize(), "cuCtxSynchronize");
  if (bytes > 0) check(env, driver().cuMemcpyHtoD_v2(dst, data, bytes), "cuMemcpyHtoD_v2");
  check(env, driver().cuCtxSynchronize(), "cuCtxSynchronize");
  return env.Undefined();
}

// cuMemcpyDtoH to pageable memory returns only once the copy is complete.
Napi::Value Device::DownloadSync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const auto [data, bytes] = bytesOf(info, 0);
  const CUdeviceptr src = pointer(info, 1);
  check(env, driver().cuCtxSynchronize(), "cuCtxSynchronize");
  if (bytes > 0) check(env, driver().cuMemcpyDtoH_v2(data, src, bytes), "cuMemcpyDtoH_v2");
  return env.Undefined();
}

// ---- streams and events -------------------------------------------------------------------

Napi::Value Device::Synchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  check(env, driver().cuCtxSynchronize(), "cuCtxSynchronize");
  return env.Undefined();
}

Napi::Value Device::CreateStream(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUstream s = nullptr;
  check(env, driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return Napi::Number::New(env, streams_.add(s));
}

Napi::Value Device::DestroyStream(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const uint32_t id = u32(info, 0);
  if (id == 0) throwCallError(env, "destroyStream", "the default stream belongs to the backend");
  check(env, driver().cuStreamDestroy_v2(stream(env, id)), "cuStreamDestroy_v2");
  streams_.erase(id);
  return env.Undefined();
}

Napi::Value Device::StreamSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  check(env, driver().cuStreamSynchronize(stream(env, u32(info, 0))), "cuStreamSynchronize");
  return env.Undefined();
}

Napi::Value Device::CreateEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUevent e = nullptr;
  check(env, driver().cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");  // with timing
  return Napi::Number::New(env, events_.add(e));
}

Napi::Value Device::RecordEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUevent* e = events_.find(u32(info, 0));
  if (!e) throwCallError(env, "recordEvent", "unknown or destroyed event");
  check(env, driver().cuEventRecord(*e, stream(env, u32(info, 1))), "cuEventRecord");
  return env.Undefined();
}

Napi::Value Device::EventSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUevent* e = events_.find(u32(info, 0));
  if (!e) throwCallError(env, "synchronizeEvent", "unknown or destroyed event");
  check(env, driver().cuEventSynchronize(*e), "cuEventSynchronize");
  return env.Undefined();
}

Napi::Value Device::EventElapsed(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUevent* start = events_.find(u32(info, 0));
  CUevent* end = events_.find(u32(info, 1));
  if (!start || !end) throwCallError(env, "elapsedMs", "unknown or destroyed event");
  float ms = 0;
  check(env, driver().cuEventElapsedTime_v2(&ms, *start, *end), "cuEventElapsedTime");
  return Napi::Number::New(env, ms);
}

Napi::Value Device::DestroyEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const uint32_t id = u32(info, 0);
  CUevent* e = events_.find(id);
  if (!e) throwCallError(env, "destroyEvent", "unknown or destroyed event");
  check(env, driver().cuEventDestroy_v2(*e), "cuEventDestroy_v2");
  events_.erase(id);
  return env.Undefined();
}

// ---- graphs -------------------------------------------------------------------------------

// THREAD_LOCAL: only this thread's unsafe calls (allocation, synchronous copies, synchronize)
// are refused while it captures; another thread (a worker with its own backend) is unaffected.
Napi::Value Device::BeginCapture(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  check(env, driver().cuStreamBeginCapture_v2(stream(env, u32(info, 0)), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        "cuStreamBeginCapture_v2");
  return env.Undefined();
}

Napi::Value Device::EndCapture(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUgraph graph = nullptr;
  const CUresult result = driver().cuStreamEndCapture(stream(env, u32(info, 0)), &graph);
  if (result != CUDA_SUCCESS) {
    if (graph) driver().cuGraphDestroy(graph);  // the driver returns NULL here; be safe anyway
    throwDriverError(env, "cuStreamEndCapture", result);
  }
  size_t nodes = 0;
  const CUresult counted = driver().cuGraphGetNodes(graph, nullptr, &nodes);
  if (counted != CUDA_SUCCESS) {
    driver().cuGraphDestroy(graph);
    throwDriverError(env, "cuGraphGetNodes", counted);
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("graph", graphs_.add(graph));
  out.Set("nodes", static_cast<double>(nodes));
  return out;
}

Napi::Value Device::CaptureStatus(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  check(env, driver().cuStreamIsCapturing(stream(env, u32(info, 0)), &status), "cuStreamIsCapturing");
  return Napi::Number::New(env, status);
}

Napi::Value Device::Instantiate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUgraph* graph = graphs_.find(u32(info, 0));
  if (!graph) throwCallError(env, "instantiate", "unknown or destroyed graph");
  CUgraphExec exec = nullptr;
  check(env, driver().cuGraphInstantiateWithFlags(&exec, *graph, 0), "cuGraphInstantiateWithFlags");
  return Napi::Number::New(env, execs_.add(exec));
}

Napi::Value Device::LaunchGraph(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  CUgraphExec* exec = execs_.find(u32(info, 0));
  if (!exec) throwCallError(env, "launchGraph", "unknown or destroyed graph exec");
  check(env, driver().cuGraphLaunch(*exec, stream(env, u32(info, 1))), "cuGraphLaunch");
  return env.Undefined();
}

Napi::Value Device::DestroyGraph(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const uint32_t id = u32(info, 0);
  CUgraph* graph = graphs_.find(id);
  if (!graph) throwCallError(env, "destroyGraph", "unknown or destroyed graph");
  check(env, driver().cuGraphDestroy(*graph), "cuGraphDestroy");
  graphs_.erase(id);
  return env.Undefined();
}

Napi::Value Device::DestroyGraphExec(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const uint32_t id = u32(info, 0);
  CUgraphExec* exec = execs_.find(id);
  if (!exec) throwCallError(env, "destroyGraphExec", "unknown or destroyed graph exec");
  check(env, driver().cuGraphExecDestroy(*exec), "cuGraphExecDestroy");
  execs_.erase(id);
  return env.Undefined();
}

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
  // Querying an attribute also loads a lazily loaded function (CUDA_MODULE_LOADING=LAZY), so its
  // first launch does no loading.
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
  uint32_t h[9];
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
  check(env,
        driver().cuLaunchKernel(kernel->function, h[1], h[2], h[3], h[4], h[5], h[6], h[7], s,
                                kernel->params.empty() ? nullptr : kernel->params.data(), nullptr),
        "cuLaunchKernel");
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

// ---- lifetime -----------------------------------------------------------------------------

Napi::Value Device::Dispose(const Napi::CallbackInfo& info) {
  if (open_) release(true, info.Env());
  return info.Env().Undefined();
}

// Frees everything, best effort: errors are ignored, since a context that hit a sticky error
// (an illegal address) fails every call and must still be released. `fromJs` is false in the
// destructor, where JavaScript objects may no longer be touched and pinned buffers that
// JavaScript might still view are left allocated rather than freed under it.
void Device::release(bool fromJs, Napi::Env env) {
  (void)env;
  const DriverApi& d = driver();
  d.cuCtxSetCurrent(context_);
  t_current = context_;
  d.cuCtxSynchronize();
  streams_.forEachLive([&](uint32_t, CUstream s) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d.cuStreamIsCapturing(s, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE) {
      CUgraph graph = nullptr;
      d.cuStreamEndCapture(s, &graph);
      if (graph) d.cuGraphDestroy(graph);
    }
  });
  gemm_.reset();
  if (gemmWorkspace_) d.cuMemFree_v2(gemmWorkspace_);
  gemmWorkspace_ = 0;
  execs_.forEachLive([&](uint32_t, CUgraphExec exec) { d.cuGraphExecDestroy(exec); });
  graphs_.forEachLive([&](uint32_t, CUgraph graph) { d.cuGraphDestroy(graph); });
  events_.forEachLive([&](uint32_t, CUevent event) { d.cuEventDestroy_v2(event); });
  kernels_.clear();
  modules_.forEachLive([&](uint32_t, CUmodule module) { d.cuModuleUnload(module); });
  pool_.releaseAll();
  if (fromJs) {
    hosts_.forEachLive([&](uint32_t, HostAllocation& h) {
      d.cuMemFreeHost(h.ptr);
      Napi::ArrayBuffer buffer = h.buffer->Value();
      if (!buffer.IsDetached()) buffer.Detach();
    });
    if (!recordBuffer_.IsEmpty()) {
      Napi::ArrayBuffer record = recordBuffer_.Value();
      if (!record.IsDetached()) record.Detach();
    }
  }
  hosts_.clear();
  streams_.forEachLive([&](uint32_t, CUstream s) { d.cuStreamDestroy_v2(s); });
  execs_.clear();
  graphs_.clear();
  events_.clear();
  modules_.clear();
  streams_.clear();
  d.cuDevicePrimaryCtxRelease_v2(device_);
  if (t_current == context_) t_current = nullptr;
  open_ = false;
}

}  // namespace metrale
