// What every GDN kernel's arguments share: the buffers and tables of a step, the head of each
// kernel's parameter list (src/gdn-kernels.ts: the first 15), which the decode / verify / fold
// kernels' gdn::Args and the prefill's gdnp::Args begin with (Stash: float, or const float for the
// prefill, which only reads the stash and the conv stash); and the geometry derived from the shape.
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

// The row geometry every GDN kernel derives from the shape (Args: hk, hv, dk, dv, maxK): value
// heads per key head, a key head's group of qkvz columns (q, k, r × v, r × z) and the row's width,
// the conv channels, a stash row (k, u, γ) and a slot's stash.
struct Geo {
  int r, grp, width, keyDim, convDim, stashRow;
  long long stashSeq;
};
template <class Args>
__host__ __device__ __forceinline__ Geo geo_of(const Args& A) {
  Geo G;
  G.r = A.hv / A.hk;
  G.grp = 2 * A.dk + 2 * G.r * A.dv;
  G.width = A.hk * G.grp;
  G.keyDim = A.hk * A.dk;
  G.convDim = 2 * G.keyDim + A.hv * A.dv;
  G.stashRow = A.dk + A.dv + 1;
  G.stashSeq = (long long)A.hv * A.maxK * G.stashRow;
  return G;
}

}  // namespace gdn_step
