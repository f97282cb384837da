// Gated DeltaNet two-kernel decode: gdn_decode_prep (the row's conv, gates and norms, and the conv
// ring; gdn-decode-prep.cuh; gdn_decode_prep_gates where it makes the gates' raw inputs from the
// layer's input row too), then gdn_decode_state (the state pass; gdn-decode-state.cuh), or
// gdn_decode_state_plain for a step without a pending table.
// Layouts and semantics: ../KERNELS.md ("Two-kernel decode"). Both take one signature
// (gdn-kernels.ts DECODE_PARAMS): a decode step's buffers as gdn_recurrent_*'s (one row per batch
// position, carried mode when `pending` is set) and `prep`, [batch][H_v][prep_stride] f32; then, for
// the prep, in_proj_ba where it makes the gates' raw inputs (baWeight non-null: the layer's input
// rows `baInput` [rows][hidden] and the weight, both in the row type yDtype; gdn-decode-prep.cuh).
// gdn_fold_state, the write-on-accept fold in the state kernel's layout (gdn-fold-state.cuh), takes
// gdn_fold_*'s signature (gdn-kernels.ts FOLD_PARAMS).
// Knobs (-D): GDN_STATE_MAXNREG, GDN_STATE_CS, GDN_STATE_AHEAD_EIGHTHS, GDN_PREP_MINB, GDN_PREP_FAST_SILU.
#include "gdn-decode-prep.cuh"
#include "gdn-decode-state.cuh"
#include "gdn-fold-state.cuh"

#define GDN_DECODE_PARAMS                                                                                                            \
  const float *qkvz, float *y, const int32_t *slots, const int32_t *rowStarts, const int32_t *seqLens, float *state,                 \
      float *convRing, const float *convWeight, const float *aLog, const float *dtBias, const float *normWeight, float *stash,       \
      float *convStash, const uint32_t *pending, float *prep, int batch, int hk, int hv, int dk, int dv, int convK, int maxK,        \
      float eps, int yDtype, const void *baInput, const void *baWeight, int hidden
#define GDN_DECODE_ARGS                                                                                                             \
  const gdn::Args A{qkvz, y, slots, rowStarts, seqLens, state, convRing, convWeight, aLog, dtBias, normWeight, stash, convStash,    \
                    pending, hk, hv, dk, dv, convK, maxK, eps, yDtype};                                                             \
  gdn::check_dims(A);

extern "C" __global__ void __launch_bounds__(gdn::decode::kPrepThreads, gdn::decode::kPrepCtasPerSm) gdn_decode_prep(GDN_DECODE_PARAMS) {
  GDN_DECODE_ARGS
  gdn::decode::prep_entry<false>(A, prep, batch, gdn::decode::GateRows{baInput, baWeight, hidden, yDtype});
}

extern "C" __global__ void __launch_bounds__(gdn::decode::kPrepThreadsGates, gdn::decode::kPrepGatesCtasPerSm) gdn_decode_prep_gates(GDN_DECODE_PARAMS) {
  GDN_DECODE_ARGS
  gdn::decode::prep_entry<true>(A, prep, batch, gdn::decode::GateRows{baInput, baWeight, hidden, yDtype});
}

extern "C" __global__ void __maxnreg__(GDN_STATE_MAXNREG) gdn_decode_state(GDN_DECODE_PARAMS) {
  GDN_DECODE_ARGS
  gdn::decode::state_entry<true>(A, prep, batch);
}

extern "C" __global__ void __maxnreg__(GDN_STATE_MAXNREG) gdn_decode_state_plain(GDN_DECODE_PARAMS) {
  GDN_DECODE_ARGS
  gdn::decode::state_entry<false>(A, prep, batch);
}

extern "C" __global__ void __maxnreg__(GDN_STATE_MAXNREG) gdn_fold_state(const float* qkvz, const int32_t* slots, const int32_t* seqLens,
                                                                         const uint32_t* naTab, float* state, float* convRing, float* stash,
                                                                         int batch, int k, int hk, int hv, int dk, int dv, int convK, int maxK) {
  const gdn::Args A{qkvz, nullptr, slots, nullptr, seqLens, state, convRing, nullptr, nullptr, nullptr, nullptr, stash, nullptr,
                    nullptr, hk, hv, dk, dv, convK, maxK, 0.0f};
  gdn::check_dims(A);
  gdn::decode::fold_state_entry(A, naTab, batch, k);
}
