// Gated DeltaNet write-on-accept fold (gdn_fold). Layouts and semantics: ../KERNELS.md.
//
// Per (batch position p, value head h), n = naTab[p] accepted rows of the last verify:
//   S ← e^{γ_{n−1}} S + Σ_{t<n} e^{γ_{n−1}−γ_t} k_t u_tᵀ      (one read and one write of S)
// and the conv ring takes the pre-conv inputs of verify rows 0..n−1 (qkvz rows p·k + t) at
// positions L..L+n−1, L = seqLens[p] (the committed length before the verify); only the last K
// of them are written, since earlier ones would be overwritten. Ring channels are partitioned so
// no two CTAs write the same entry: v channels by their own value head's CTA, the 2·d_k q/k
// channels of key head g every r-th by each of g's r CTAs.
//
// Entry points, one signature (gdn-kernels.ts), grid [batch, H_v], a block of d_v threads:
//   gdn_fold          the default: the variant GDN_FOLD_DEFAULT names (gdn-launch.ts gives it the
//                     dynamic shared memory it needs)
//   gdn_fold_smem     S copied into shared memory by the copy engine while the stash rows load
//   gdn_fold_pipe     S streamed through shared memory in blocks of 32 columns (gdn-pipe.cuh)
//   gdn_fold_split    a head over 4 CTAs of 32 columns each (gdn-split.cuh; grid [4·batch, H_v])
//   gdn_fold_persist  persistent CTAs, one ring of shared buffers over their heads (gdn-persist.cuh)
//   gdn_fold_stream   S streamed through registers, GDN_STREAM_U rows in flight per thread
//   gdn_fold_legacy   the first version (the column in registers; no dynamic shared memory)
#include "gdn-legacy.cuh"
#include "gdn-fast.cuh"
#include "gdn-pipe.cuh"
#include "gdn-split.cuh"
#include "gdn-persist.cuh"

#ifndef GDN_FOLD_STREAM_MAXNREG
#define GDN_FOLD_STREAM_MAXNREG 96  // 5 CTAs of 128 threads per SM, no spills on sm_90a
#endif

#define GDN_VARIANT_LEGACY 0
#define GDN_VARIANT_SMEM 1
#define GDN_VARIANT_STREAM 2
#ifndef GDN_FOLD_DEFAULT
#define GDN_FOLD_DEFAULT GDN_VARIANT_SMEM
#endif

#define GDN_FOLD_PARAMS                                                                                                               \
  const float *qkvz, const int32_t *slots, const int32_t *seqLens, const uint32_t *naTab, float *state, float *convRing, float *stash, \
      int batch, int k, int hk, int hv, int dk, int dv, int convK, int maxK
#define GDN_FOLD_ARGS                                                                                                                 \
  const gdn::Args A{qkvz, nullptr, nullptr, slots, nullptr, seqLens, state, convRing, nullptr, nullptr, nullptr, nullptr, stash, nullptr, \
                    nullptr, hk, hv, dk, dv, convK, maxK, 0.0f};                                                                      \
  gdn::check_shape(A);

// One entry point: its name, register cap and the call.
#define GDN_FOLD_ENTRY(NAME, ATTRS, ...)                     \
  extern "C" __global__ void ATTRS NAME(GDN_FOLD_PARAMS) { \
    GDN_FOLD_ARGS                                          \
    __VA_ARGS__;                                           \
  }

#if GDN_HAS_VARIANT(0)
GDN_FOLD_ENTRY(gdn_fold_legacy, , gdn::fold_entry<128>(A, naTab, batch, k))  // d_k <= 128, zero-padded
#endif
#if GDN_HAS_VARIANT(1)
GDN_FOLD_ENTRY(gdn_fold_smem, __maxnreg__(GDN_SMEM_MAXNREG), gdn::fast::fold_entry<gdn::fast::SmemSrc>(A, naTab, batch, k))
#endif
#if GDN_HAS_VARIANT(2)
GDN_FOLD_ENTRY(gdn_fold_stream, __maxnreg__(GDN_FOLD_STREAM_MAXNREG), gdn::fast::fold_entry<gdn::fast::StreamSrc>(A, naTab, batch, k))
#endif
#if GDN_HAS_VARIANT(3)
GDN_FOLD_ENTRY(gdn_fold_pipe, __maxnreg__(GDN_PIPE_MAXNREG), gdn::pipe::fold_entry(A, naTab, batch, k))
#endif
#if GDN_HAS_VARIANT(4)
GDN_FOLD_ENTRY(gdn_fold_split, __maxnreg__(GDN_SPLIT_MAXNREG), gdn::split::fold_entry(A, naTab, batch, k))
#endif
#if GDN_HAS_VARIANT(5)
GDN_FOLD_ENTRY(gdn_fold_persist, __maxnreg__(GDN_PERSIST_MAXNREG), gdn::persist::fold_entry(A, naTab, batch, k))
#endif

#if GDN_ONLY_VARIANT < 0  // a build of one variant (bench/gdn-tune.sh) leaves the default entry out
#if GDN_FOLD_DEFAULT == GDN_VARIANT_LEGACY
GDN_FOLD_ENTRY(gdn_fold, , gdn::fold_entry<128>(A, naTab, batch, k))
#elif GDN_FOLD_DEFAULT == GDN_VARIANT_SMEM
GDN_FOLD_ENTRY(gdn_fold, __maxnreg__(GDN_SMEM_MAXNREG), gdn::fast::fold_entry<gdn::fast::SmemSrc>(A, naTab, batch, k))
#else
GDN_FOLD_ENTRY(gdn_fold, __maxnreg__(GDN_FOLD_STREAM_MAXNREG), gdn::fast::fold_entry<gdn::fast::StreamSrc>(A, naTab, batch, k))
#endif
#endif
