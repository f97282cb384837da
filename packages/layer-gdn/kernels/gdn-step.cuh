// What every GDN kernel's arguments share: the buffers and tables of a step, the head of each
// kernel's parameter list (src/gdn-kernels.ts: the first 14), which the decode / verify / fold
// kernels' gdn::Args and the prefill's gdnp::Args begin with (Stash: float, or const float for the
// prefill, which only reads the stash and the conv stash); the geometry derived from the shape; and
// the store of the gated-norm output y in the layer's row type.
#pragma once
#include <stddef.h>
#include <stdint.h>
#if defined(__CUDACC__)
#include <metrale/elements.cuh>
#endif

namespace gdn_step {

template <class Stash>
struct Buffers {
  const float* qkvz;  // the input projections' rows: in_proj_qkvz's columns, then in_proj_ba's (Geo)
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
// heads per key head, a key head's group of qkvz columns (q, k, r × v, r × z), the row's width,
// the conv channels, a stash row (k, u, γ) and a slot's stash. A row of `qkvz` is one GEMM's
// output over the stacked input projections: in_proj_qkvz's columns, then in_proj_ba's 2·H_v
// from baCol (per key head g: [b r, a r]), the width rounded up to 4 floats so that rows stay
// 16-byte aligned for the vector loads (src/gdn-config.ts projectionRow).
struct Geo {
  int r, grp, width, keyDim, convDim, stashRow, baCol;
  long long stashSeq;
};
template <class Args>
__host__ __device__ __forceinline__ Geo geo_of(const Args& A) {
  Geo G;
  G.r = A.hv / A.hk;
  G.grp = 2 * A.dk + 2 * G.r * A.dv;
  G.baCol = A.hk * G.grp;
  G.width = G.baCol + (2 * A.hv + 3) / 4 * 4;
  G.keyDim = A.hk * A.dk;
  G.convDim = 2 * G.keyDim + A.hv * A.dv;
  G.stashRow = A.dk + A.dv + 1;
  G.stashSeq = (long long)A.hv * A.maxK * G.stashRow;
  return G;
}

#if defined(__CUDACC__)
// A 16-bit element of y, out of line: inlined into the kernels' unrolled row loops, the conversion
// and store paths pushed the register-capped kernels (gdn_verify_state, gdn_recurrent_smem and
// _stream) into spills; as a call, only on the 16-bit path, they stay about where they were.
__device__ __noinline__ void store_y16(void* y, size_t i, float v, int code) { metrale::store_element(y, i, v, code); }
#endif

// Element i of y, the gated-norm output that out_proj reads, stored in the row type A.yDtype
// (FLOAT_DTYPE_CODE: 0 f32, 1 bf16, 2 f16; rounded to nearest even). f32 is the plain store.
template <class Args>
__device__ __forceinline__ void store_y(const Args& A, size_t i, float v) {
  if (A.yDtype == 0) {
    A.y[i] = v;
    return;
  }
#if defined(__CUDACC__)
  store_y16(A.y, i, v, A.yDtype);
#else
  metrale::store_element(A.y, i, v, A.yDtype);  // the CPU emulator's (tools/cuda-emu)
#endif
}

}  // namespace gdn_step
