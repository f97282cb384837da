// Gated DeltaNet (Qwen3-Next linear attention): decode and verify (gdn_recurrent_*). Layouts and
// semantics: ../KERNELS.md. The code lives in headers: gdn-common.cuh (arguments, tasks, conv
// inputs, ring / conv stash writes), gdn-fast.cuh (smem), gdn-pipe.cuh, gdn-split.cuh,
// gdn-general.cuh (any shape; its row loop is also the row-by-row prefill oracle's, which the
// tests build from test/gpu/kernels/).
//
// Entry points, one signature (gdn-kernels.ts), each launched as gdn-launch.ts recurrentLaunch
// says for its variant (gdn-launch.ts recurrentVariant picks one per step):
//   gdn_recurrent_smem     S copied into shared memory by the copy engine while the prologue runs
//                          (grid [batch, H_v], d_v threads, fast_smem_floats(d_k, d_v, maxK) floats)
//   gdn_recurrent_pipe     decode steps only (mode 0, k = 1): S streamed through shared memory in
//                          blocks of 32 columns (gdn-pipe.cuh; 128 threads, pipe_smem_floats())
//   gdn_recurrent_split    decode steps only: a head over a cluster of 4 CTAs of 32 columns each
//                          (gdn-split.cuh; grid [4·batch, H_v], 128 threads, sm_90)
//   gdn_recurrent_general  any shape the layer takes: a column of S in registers per thread (no
//                          dynamic shared memory; any maxK and conv K)
// Knobs (-D, for bench/gdn-tune.sh): GDN_SMEM_CPASYNC (smem: cp.async instead of cp.async.bulk on
// sm_90), GDN_FAST_NCHUNK, GDN_SMEM_MAXNREG, GDN_MAXNREG (general register cap, 0 = none),
// GDN_PIPE_NB, GDN_PIPE_MAXNREG, GDN_SPLIT_MAXNREG.
#include "gdn-general.cuh"
#include "gdn-fast.cuh"
#include "gdn-pipe.cuh"
#include "gdn-split.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GDN_SPLIT_CLUSTER __cluster_dims__(4, 1, 1)  // gdn::split::kCluster
#else
#define GDN_SPLIT_CLUSTER
#endif

#define GDN_RECURRENT_PARAMS                                                                                                         \
  const float *qkvz, float *y, const int32_t *slots, const int32_t *rowStarts, const int32_t *seqLens, float *state,                 \
      float *convRing, const float *convWeight, const float *aLog, const float *dtBias, const float *normWeight, float *stash,       \
      float *convStash, const uint32_t *pending, int mode, int batch, int k, int hk, int hv, int dk, int dv, int convK, int maxK,    \
      float eps, int yDtype
#define GDN_RECURRENT_ARGS                                                                                                          \
  const gdn::Args A{qkvz, y, slots, rowStarts, seqLens, state, convRing, convWeight, aLog, dtBias, normWeight, stash, convStash,    \
                    pending, hk, hv, dk, dv, convK, maxK, eps, yDtype};                                                             \
  gdn::check_shape(A);                                                                                                              \
  if (mode != 0 && mode != 1) return;

// 168 registers: 3 CTAs of 128 threads per SM (a few spills in the cold paths); -DGDN_MAXNREG=0:
// no cap (about 250 registers, no spills, 2 CTAs per SM).
#ifndef GDN_MAXNREG
#define GDN_MAXNREG 168
#endif
#if GDN_MAXNREG > 0
#define GDN_GENERAL_REGCAP __maxnreg__(GDN_MAXNREG)
#else
#define GDN_GENERAL_REGCAP
#endif

// One entry point: its name, attributes (register cap, cluster shape) and the call.
#define GDN_RECURRENT_ENTRY(NAME, ATTRS, ...) \
  extern "C" __global__ void ATTRS NAME(GDN_RECURRENT_PARAMS) {  \
    GDN_RECURRENT_ARGS                                           \
    __VA_ARGS__;                                                 \
  }

GDN_RECURRENT_ENTRY(gdn_recurrent_smem, __maxnreg__(GDN_SMEM_MAXNREG), gdn::fast::recurrent_entry(A, mode, batch, k))
GDN_RECURRENT_ENTRY(gdn_recurrent_pipe, __maxnreg__(GDN_PIPE_MAXNREG), gdn::pipe::recurrent_entry(A, mode, batch, k))
GDN_RECURRENT_ENTRY(gdn_recurrent_split, GDN_SPLIT_CLUSTER __maxnreg__(GDN_SPLIT_MAXNREG), gdn::split::recurrent_entry(A, mode, batch, k))
GDN_RECURRENT_ENTRY(gdn_recurrent_general, GDN_GENERAL_REGCAP, gdn::recurrent_entry<128>(A, mode, batch, k))  // d_k <= 128, zero-padded
