// Gated DeltaNet prefill, row by row (gdn_chunk_rowwise): the GPU lane's correctness oracle of the
// chunked prefill (kernels/gdn-chunk.cu), declared as `chunkKernel` (test/rowwise-kernel.ts). Not
// shipped: the lane builds it (metrale-build-kernels --package-dir test/gpu; gdn-lane.ts). Layouts
// and semantics: ../../../KERNELS.md. The recurrence row by row from the slot's state (pending
// carried rows folded first), committing state and ring: the general kernel's row loop with ragged
// rows, in blocks of 8 rows (this build has no register cap: S stays in registers across the
// blocks, 255 registers).
// (It was gdn_chunk's first version; the layer prefills with the chunked WY form of gdn-chunk.cu.)
//
// Launch: grid [sequences, H_v] (or any grid of ≥ batch·H_v CTAs), block of d_v threads, no
// dynamic shared memory. A sequence that continues (its ring holds history) and has two or more
// rows runs in group mode when H_v > H_k: the CTA of each key head's first value head runs its r
// value heads, since its ring writes would race with the other CTAs' history reads (see
// gdn-common.cuh). A fresh sequence (committed length 0) reads no ring and runs one value head
// per CTA.
//
#define GDN_RB 8               // prefill: more rows per prologue / norm barrier
#define GDN_PROLOGUE_UNROLL 8  // and their conv loads in flight together (no register cap here)
#include "../../../kernels/gdn-general.cuh"  // the row loop (make_task, run_task) of gdn_recurrent_general

namespace gdn {

template <int DK>
__device__ __forceinline__ void chunk_entry(const Args& A, int batch) {
  int b, h;
  cta_coords(batch, A.hv, b, h);
  if (b >= batch || h >= A.hv) return;
  const Geo G = geo_of(A);
  const int row0 = A.rowStarts[b];
  const int nrows = A.rowStarts[b + 1] - row0;
  if (nrows < 0) return;
  Task T;
  if (!make_task(A, G, b, h, row0, nrows, true, false, T)) return;
  run_task<DK, true, false>(A, G, T);
}

}  // namespace gdn

extern "C" __global__ void gdn_chunk_rowwise(const float* qkvz, float* y, const int32_t* slots, const int32_t* rowStarts,
                                     const int32_t* seqLens, float* state, float* convRing, const float* convWeight, const float* aLog,
                                     const float* dtBias, const float* normWeight, float* stash, float* convStash, const uint32_t* pending,
                                     int batch, int hk, int hv, int dk, int dv, int convK, int maxK, float eps) {
  const gdn::Args A{qkvz, y, slots, rowStarts, seqLens, state, convRing, convWeight, aLog, dtBias, normWeight, stash, convStash, pending,
                    hk, hv, dk, dv, convK, maxK, eps};
  gdn::check_shape(A);
  gdn::chunk_entry<128>(A, batch);  // d_k <= 128, zero-padded
}
