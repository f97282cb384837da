// The Device's NCCL communicators: joining a group (one rank per device) and the collectives,
// enqueued on the device's streams like kernels, so that a stream capture records them.
#include <cstring>
#include <string>

#include "device.h"
#include "js-args.h"
#include "nccl.h"

namespace metrale {

namespace {

/** FLOAT_DTYPE_CODE (0 f32, 1 bf16, 2 f16) → NCCL's type and element bytes. */
std::pair<ncclDataType_t, size_t> ncclType(Napi::Env env, uint32_t code) {
  switch (code) {
    case 0: return {ncclFloat32, 4};
    case 1: return {ncclBfloat16, 2};
    case 2: return {ncclFloat16, 2};
    default: throwCallError(env, "collective", "unknown element type code " + std::to_string(code));
  }
}

enum class Collective : uint32_t { AllReduce = 0, AllGather = 1, ReduceScatter = 2, AllToAll = 3 };

}  // namespace

Device::CommEntry& Device::comm(Napi::Env env, uint32_t id) {
  CommEntry* c = comms_.find(id);
  if (!c) throwCallError(env, "communicator", "unknown or destroyed communicator id " + std::to_string(id));
  return *c;
}

// commInit(uniqueId: Uint8Array(128), nranks, rank) → id. Blocks until every rank has joined.
Napi::Value Device::CommInit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  requireNccl(env);
  auto [bytes, length] = bytesOf(info, 0);
  if (length != NCCL_UNIQUE_ID_BYTES) throwCallError(env, "ncclCommInitRank", "the unique id must be 128 bytes, got " + std::to_string(length));
  ncclUniqueId id;
  std::memcpy(id.internal, bytes, NCCL_UNIQUE_ID_BYTES);
  const int nranks = static_cast<int>(u32(info, 1));
  const int rank = static_cast<int>(u32(info, 2));
  ncclComm_t handle = nullptr;
  checkNccl(env, nccl().ncclCommInitRank(&handle, nranks, id, rank), "ncclCommInitRank");
  return Napi::Number::New(env, comms_.add(CommEntry{handle, nranks, rank}));
}

// collective(kind, comm, send, recv, count, dtypeCode, stream)
Napi::Value Device::CommCollective(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const auto kind = static_cast<Collective>(u32(info, 0));
  CommEntry& c = comm(env, u32(info, 1));
  const CUdeviceptr send = pointer(info, 2), recv = pointer(info, 3);
  const size_t n = count(info, 4);
  const auto [type, elementBytes] = ncclType(env, u32(info, 5));
  CUstream s = stream(env, u32(info, 6));
  const void* sendPtr = reinterpret_cast<const void*>(send);
  void* recvPtr = reinterpret_cast<void*>(recv);
  const NcclApi& api = nccl();
  switch (kind) {
    case Collective::AllReduce:
      checkNccl(env, api.ncclAllReduce(sendPtr, recvPtr, n, type, ncclSum, c.comm, s), "ncclAllReduce");
      break;
    case Collective::AllGather:
      checkNccl(env, api.ncclAllGather(sendPtr, recvPtr, n, type, c.comm, s), "ncclAllGather");
      break;
    case Collective::ReduceScatter:
      checkNccl(env, api.ncclReduceScatter(sendPtr, recvPtr, n, type, ncclSum, c.comm, s), "ncclReduceScatter");
      break;
    case Collective::AllToAll: {
      // Every pair of ranks swaps one part: a send and a receive per peer, fused by the group.
      const size_t part = n * elementBytes;
      checkNccl(env, api.ncclGroupStart(), "ncclGroupStart");
      ncclResult_t failed = ncclSuccess;
      const char* where = "";
      for (int peer = 0; peer < c.nranks && failed == ncclSuccess; peer++) {
        failed = api.ncclSend(reinterpret_cast<const void*>(send + peer * part), n, type, peer, c.comm, s);
        where = "ncclSend";
        if (failed == ncclSuccess) {
          failed = api.ncclRecv(reinterpret_cast<void*>(recv + peer * part), n, type, peer, c.comm, s);
          where = "ncclRecv";
        }
      }
      const ncclResult_t ended = api.ncclGroupEnd();
      if (failed != ncclSuccess) throwNcclError(env, where, failed);
      checkNccl(env, ended, "ncclGroupEnd");
      break;
    }
    default:
      throwCallError(env, "collective", "unknown collective " + std::to_string(static_cast<uint32_t>(kind)));
  }
  return env.Undefined();
}

// commRelease(comm, abort): ncclCommAbort (the other ranks' pending collectives fail instead of
// waiting for this one) or ncclCommDestroy.
Napi::Value Device::CommRelease(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  enter(env);
  const uint32_t id = u32(info, 0);
  const bool abort = info[1].As<Napi::Boolean>().Value();
  const ncclComm_t handle = comm(env, id).comm;
  comms_.erase(id);
  if (abort) checkNccl(env, nccl().ncclCommAbort(handle), "ncclCommAbort");
  else checkNccl(env, nccl().ncclCommDestroy(handle), "ncclCommDestroy");
  return env.Undefined();
}

}  // namespace metrale
