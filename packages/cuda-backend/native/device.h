// One CUDA device as a JavaScript object: its primary context, memory pool, pinned host buffers,
// streams, events, graphs, kernel modules, launches and GEMMs. Every method makes the device's
// context current on the calling thread first (worker threads each have their own current
// context). Handles travel to JavaScript as small integers (HandleTable).
#pragma once

#include <napi.h>

#include <memory>
#include <vector>

#include "cublaslt.h"
#include "device-pool.h"
#include "driver.h"
#include "handle-table.h"
#include "nccl-api.h"

namespace metrale {

/**
 * The launch record shared with JavaScript (one per device): a header of u32 words, then the
 * kernel's packed parameters. JavaScript writes it and calls launch() with no arguments, the
 * cheapest N-API call there is; launch() reads it. Word layout of the header:
 *   [0] kernel id  [1..3] grid x,y,z  [4..6] block x,y,z  [7] dynamic shared bytes  [8] stream id
 *   [9] flags: bit 0 (kLaunchEarlyStart) the kernel may start before the previous kernel on its
 *       stream ends (programmatic stream serialization; LaunchConfig.earlyStart)
 */
constexpr uint32_t kLaunchEarlyStart = 1;
constexpr size_t kLaunchHeaderBytes = 64;
constexpr size_t kLaunchParamBytes = 4096;  // CUDA's classic kernel-parameter limit
constexpr size_t kLaunchRecordBytes = kLaunchHeaderBytes + kLaunchParamBytes;

class Device : public Napi::ObjectWrap<Device> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit Device(const Napi::CallbackInfo& info);
  ~Device() override;

 private:
  struct HostAllocation {
    void* ptr = nullptr;
    size_t bytes = 0;
    std::shared_ptr<Napi::Reference<Napi::ArrayBuffer>> buffer;  // detached when freed
  };
  struct CommEntry {
    ncclapi::ncclComm_t comm = nullptr;
    int nranks = 0;
    int rank = 0;
  };
  struct KernelEntry {
    CUfunction function = nullptr;
    std::vector<void*> params;  // pointers into the launch record, one per kernel parameter
    int dynamicSharedLimit = 0; // current CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  };

  // Memory
  Napi::Value Alloc(const Napi::CallbackInfo& info);
  Napi::Value Free(const Napi::CallbackInfo& info);
  Napi::Value Trim(const Napi::CallbackInfo& info);
  Napi::Value PoolStats(const Napi::CallbackInfo& info);
  Napi::Value MemInfo(const Napi::CallbackInfo& info);
  Napi::Value AllocHost(const Napi::CallbackInfo& info);
  Napi::Value FreeHost(const Napi::CallbackInfo& info);
  // Copies and memset
  Napi::Value Memset(const Napi::CallbackInfo& info);
  Napi::Value CopyHtoD(const Napi::CallbackInfo& info);
  Napi::Value CopyDtoH(const Napi::CallbackInfo& info);
  Napi::Value CopyDtoD(const Napi::CallbackInfo& info);
  Napi::Value UploadSync(const Napi::CallbackInfo& info);
  Napi::Value DownloadSync(const Napi::CallbackInfo& info);
  // Streams and events
  Napi::Value Synchronize(const Napi::CallbackInfo& info);
  Napi::Value CreateStream(const Napi::CallbackInfo& info);
  Napi::Value DestroyStream(const Napi::CallbackInfo& info);
  Napi::Value StreamSynchronize(const Napi::CallbackInfo& info);
  Napi::Value CreateEvent(const Napi::CallbackInfo& info);
  Napi::Value RecordEvent(const Napi::CallbackInfo& info);
  Napi::Value EventSynchronize(const Napi::CallbackInfo& info);
  Napi::Value EventElapsed(const Napi::CallbackInfo& info);
  Napi::Value DestroyEvent(const Napi::CallbackInfo& info);
  // Graphs
  Napi::Value BeginCapture(const Napi::CallbackInfo& info);
  Napi::Value EndCapture(const Napi::CallbackInfo& info);
  Napi::Value CaptureStatus(const Napi::CallbackInfo& info);
  Napi::Value Instantiate(const Napi::CallbackInfo& info);
  Napi::Value LaunchGraph(const Napi::CallbackInfo& info);
  Napi::Value DestroyGraph(const Napi::CallbackInfo& info);
  Napi::Value DestroyGraphExec(const Napi::CallbackInfo& info);
  // Kernels
  Napi::Value LoadModule(const Napi::CallbackInfo& info);
  Napi::Value RegisterKernel(const Napi::CallbackInfo& info);
  Napi::Value LaunchRecord(const Napi::CallbackInfo& info);
  Napi::Value Launch(const Napi::CallbackInfo& info);
  // GEMM
  Napi::Value GemmInit(const Napi::CallbackInfo& info);
  Napi::Value Gemm(const Napi::CallbackInfo& info);
  // Collectives (device-collectives.cc)
  Napi::Value CommInit(const Napi::CallbackInfo& info);
  Napi::Value CommCollective(const Napi::CallbackInfo& info);
  Napi::Value CommRelease(const Napi::CallbackInfo& info);
  // Lifetime
  Napi::Value Dispose(const Napi::CallbackInfo& info);

  /** Makes the context current on this thread (cheap when it already is); throws once disposed. */
  void enter(Napi::Env env);
  CUstream stream(Napi::Env env, uint32_t id);
  HostAllocation& host(Napi::Env env, uint32_t id);
  CommEntry& comm(Napi::Env env, uint32_t id);
  void release(bool fromJs, Napi::Env env);

  int ordinal_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  bool open_ = false;

  DevicePool pool_;
  HandleTable<HostAllocation> hosts_;
  HandleTable<CUstream> streams_;  // id 0: the backend's default stream (non-blocking)
  HandleTable<CUevent> events_;
  HandleTable<CUgraph> graphs_;
  HandleTable<CUgraphExec> execs_;
  HandleTable<CUmodule> modules_;
  HandleTable<KernelEntry> kernels_;
  HandleTable<CommEntry> comms_;

  std::unique_ptr<uint8_t[]> record_;
  Napi::Reference<Napi::ArrayBuffer> recordBuffer_;

  CUdeviceptr gemmWorkspace_ = 0;
  std::unique_ptr<GemmEngine> gemm_;
};

}  // namespace metrale
