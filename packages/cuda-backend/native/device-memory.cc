// Device memory, pinned host buffers, copies and memset. Methods of Device (device.h).
#include "device.h"

#include <cstring>
#include <string>

#include "js-args.h"

namespace metrale {

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
  check(env, driver().cuMemHostAlloc(&ptr, bytes > 0 ? bytes : 1, MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
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

}  // namespace metrale
