// The Device class: its method table, construction, context handling, streams, events and
// release. Memory, graphs and kernels are in device-memory.cc, device-graphs.cc, device-kernels.cc.
#include "device.h"

#include <cstring>
#include <string>

#include "js-args.h"
#include "nccl.h"

namespace metrale {

namespace {
// The context current on this OS thread, as far as this addon set it; saves a driver call per
// method. Libraries loaded here (cuBLASLt) use the same primary context, so they never change it.
thread_local CUcontext t_current = nullptr;
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
                         InstanceMethod<&Device::CommInit>("commInit"),
                         InstanceMethod<&Device::CommCollective>("commCollective"),
                         InstanceMethod<&Device::CommRelease>("commRelease"),
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
  // A communicator left open is destroyed (a rank disposed without dispose() on its communicator).
  if (loadNccl().ok) comms_.forEachLive([&](uint32_t, CommEntry& c) { nccl().ncclCommDestroy(c.comm); });
  comms_.clear();
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
