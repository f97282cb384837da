// Stream capture and CUDA graphs. Methods of Device (device.h).
#include "device.h"

#include <cstring>
#include <string>

#include "js-args.h"

namespace metrale {

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

}  // namespace metrale
