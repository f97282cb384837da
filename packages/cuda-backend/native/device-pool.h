// A caching allocator over cuMemAlloc: freed blocks go back to a free list of their size class and
// are handed out again without a driver call (cuMemAlloc and cuMemFree synchronize the device and
// cost tens of microseconds; a pool hit costs a hash lookup). `trim` returns the cache to the driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "cuda-driver-api.h"

namespace metrale {

using cuda::CUdeviceptr;
using cuda::CUresult;

class DevicePool {
 public:
  struct Stats {
    size_t liveBytes = 0;    // size-class bytes of blocks handed out
    size_t liveBlocks = 0;
    size_t cachedBytes = 0;  // bytes held in free lists
    size_t cachedBlocks = 0;
    uint64_t hits = 0;       // allocations served from a free list
    uint64_t misses = 0;     // allocations that called cuMemAlloc
  };

  /**
   * The size class of a request: multiples of 512 bytes, at most 1/8 (and at most 2 MiB) above
   * the request, so a freed block fits later requests of nearly the same size.
   */
  static size_t sizeClass(size_t bytes);

  /** A block of at least `bytes` bytes; on a driver out-of-memory it trims the cache and retries once. */
  CUresult allocate(size_t bytes, CUdeviceptr* out, bool* hit);

  /** Puts a live block back on its free list; false when `ptr` is not a live block of this pool. */
  bool release(CUdeviceptr ptr);

  /** Frees every cached block; returns the bytes given back and the first failing result in *result. */
  size_t trim(CUresult* result);

  /** Frees every block, live or cached (dispose); errors are ignored, the context is going away. */
  void releaseAll();

  Stats stats() const;

 private:
  std::unordered_map<size_t, std::vector<CUdeviceptr>> free_;  // size class -> cached blocks
  std::unordered_map<CUdeviceptr, size_t> live_;                // block -> size class
  Stats stats_;
};

}  // namespace metrale
