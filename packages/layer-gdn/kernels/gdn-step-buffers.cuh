// The buffers and tables of a GDN step, the head of every kernel's arguments (src/gdn-kernels.ts:
// the first 15 of each parameter list): the decode / verify / fold kernels' gdn::Args and the
// prefill's gdnp::Args. Stash: float, or const float for the prefill, which only reads the stash
// and the conv stash.
#pragma once
#include <stdint.h>

namespace gdn_step {

template <class Stash>
struct Buffers {
  const float* qkvz;
  const float* ba;
  float* y;
  const int32_t* slots;
  const int32_t* rowStarts;
  const int32_t* seqLens;
  float* state;
  float* convRing;
  const float* convWeight;
  const float* aLog;
  const float* dtBias;
  const float* normWeight;
  Stash* stash;
  Stash* convStash;
  const uint32_t* pending;
};

}  // namespace gdn_step
