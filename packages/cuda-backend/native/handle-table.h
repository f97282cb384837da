// Numbered slots for driver handles, so that JavaScript holds small integers instead of pointers
// and a stale or foreign number is caught instead of being passed to the driver.
#pragma once

#include <cstdint>
#include <vector>

namespace metrale {

template <class T>
class HandleTable {
 public:
  uint32_t add(T value) {
    slots_.push_back(value);
    live_.push_back(true);
    return static_cast<uint32_t>(slots_.size() - 1);
  }
  /** The slot's value, or nullptr when the number was never given out or was erased. */
  T* find(uint32_t id) { return id < slots_.size() && live_[id] ? &slots_[id] : nullptr; }
  void erase(uint32_t id) {
    if (id < slots_.size()) {
      slots_[id] = T{};
      live_[id] = false;
    }
  }
  template <class F>
  void forEachLive(F&& f) {
    for (uint32_t id = 0; id < slots_.size(); id++) {
      if (live_[id]) f(id, slots_[id]);
    }
  }
  void clear() {
    slots_.clear();
    live_.clear();
  }

 private:
  std::vector<T> slots_;
  std::vector<bool> live_;
};

}  // namespace metrale
