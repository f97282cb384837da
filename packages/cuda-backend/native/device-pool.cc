#include "device-pool.h"

#include "driver.h"

namespace metrale {

namespace {
constexpr size_t kMinBlock = 512;
constexpr size_t kMaxStep = size_t{2} << 20;  // 2 MiB
}  // namespace

size_t DevicePool::sizeClass(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  size_t octave = kMinBlock;  // largest power of two <= bytes
  while (octave <= bytes / 2) octave *= 2;
  size_t step = octave / 8;
  if (step < kMinBlock) step = kMinBlock;
  if (step > kMaxStep) step = kMaxStep;
  return (bytes + step - 1) / step * step;
}

CUresult DevicePool::allocate(size_t bytes, CUdeviceptr* out, bool* hit) {
  const size_t size = sizeClass(bytes);
  auto cached = free_.find(size);
  if (cached != free_.end() && !cached->second.empty()) {
    *out = cached->second.back();
    cached->second.pop_back();
    stats_.cachedBytes -= size;
    stats_.cachedBlocks--;
    live_.emplace(*out, size);
    stats_.liveBytes += size;
    stats_.liveBlocks++;
    stats_.hits++;
    *hit = true;
    return cuda::CUDA_SUCCESS;
  }
  *hit = false;
  CUresult result = driver().cuMemAlloc_v2(out, size);
  if (result == cuda::CUDA_ERROR_OUT_OF_MEMORY && stats_.cachedBlocks > 0) {
    CUresult ignored;
    trim(&ignored);
    result = driver().cuMemAlloc_v2(out, size);
  }
  if (result != cuda::CUDA_SUCCESS) return result;
  live_.emplace(*out, size);
  stats_.liveBytes += size;
  stats_.liveBlocks++;
  stats_.misses++;
  return cuda::CUDA_SUCCESS;
}

bool DevicePool::release(CUdeviceptr ptr) {
  auto it = live_.find(ptr);
  if (it == live_.end()) return false;
  const size_t size = it->second;
  live_.erase(it);
  stats_.liveBytes -= size;
  stats_.liveBlocks--;
  free_[size].push_back(ptr);
  stats_.cachedBytes += size;
  stats_.cachedBlocks++;
  return true;
}

size_t DevicePool::trim(CUresult* result) {
  *result = cuda::CUDA_SUCCESS;
  size_t released = 0;
  for (auto& [size, blocks] : free_) {
    for (CUdeviceptr block : blocks) {
      const CUresult r = driver().cuMemFree_v2(block);
      if (r != cuda::CUDA_SUCCESS && *result == cuda::CUDA_SUCCESS) *result = r;
      released += size;
    }
  }
  free_.clear();
  stats_.cachedBytes = 0;
  stats_.cachedBlocks = 0;
  return released;
}

void DevicePool::releaseAll() {
  CUresult ignored;
  trim(&ignored);
  for (auto& [block, size] : live_) driver().cuMemFree_v2(block);
  live_.clear();
  stats_.liveBytes = 0;
  stats_.liveBlocks = 0;
}

DevicePool::Stats DevicePool::stats() const { return stats_; }

}  // namespace metrale
