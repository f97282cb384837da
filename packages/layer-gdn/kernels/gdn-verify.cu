// Gated DeltaNet two-kernel verify: gdn_verify_prep (the k rows' conv, norms, Gram entries and
// gates; gdn-verify-prep.cuh), then gdn_verify_state (the pending fold and the rows' scores from
// the state; gdn-verify-state.cuh). Layouts and semantics: ../KERNELS.md ("Two-kernel verify").
// Both take one signature (gdn-kernels.ts VERIFY_PARAMS): a verify step's buffers as
// gdn_recurrent_*'s (mode 1, k rows per batch position; carried when `pending` is set), `prep`,
// `batch` and `k`. Knobs (-D): GDN_VSTATE_MINB, GDN_STATE_CS, GDN_VPREP_MINB, GDN_PREP_FAST_SILU, GDN_VSTATE_STAGES.
#include "gdn-verify-state.cuh"

#define GDN_VERIFY_PARAMS                                                                                                            \
  const float *qkvz, float *y, const int32_t *slots, const int32_t *rowStarts, const int32_t *seqLens, float *state,                 \
      float *convRing, const float *convWeight, const float *aLog, const float *dtBias, const float *normWeight, float *stash,       \
      float *convStash, const uint32_t *pending, float *prep, int batch, int k, int hk, int hv, int dk, int dv, int convK, int maxK,  \
      float eps, int yDtype
#define GDN_VERIFY_ARGS                                                                                                             \
  const gdn::Args A{qkvz, y, slots, rowStarts, seqLens, state, convRing, convWeight, aLog, dtBias, normWeight, stash, convStash,    \
                    pending, hk, hv, dk, dv, convK, maxK, eps, yDtype};                                                             \
  gdn::check_dims(A);

extern "C" __global__ void __launch_bounds__(gdn::verify::kVPrepThreads, gdn::verify::kVPrepMinBlocks) gdn_verify_prep(GDN_VERIFY_PARAMS) {
  GDN_VERIFY_ARGS
  gdn::verify::vprep_entry(A, prep, batch, k);
}

extern "C" __global__ void __launch_bounds__(gdn::verify::kVThreads, GDN_VSTATE_MINB) gdn_verify_state(GDN_VERIFY_PARAMS) {
  GDN_VERIFY_ARGS
  gdn::verify::vstate_entry(A, prep, batch, k);
}
