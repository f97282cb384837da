// Gated DeltaNet (Qwen3-Next linear attention): decode and verify (gdn_recurrent). Layouts and
// semantics: ../KERNELS.md. The code lives in headers: gdn-common.cuh (arguments, tasks, conv
// inputs, ring / conv stash writes), gdn-fast.cuh (the fast kernels), gdn-legacy.cuh (the first
// version, which gdn-chunk-rowwise.cu's row loop still uses). gdn-chunk-rowwise.cu includes this file with
// GDN_NO_RECURRENT_ENTRY, which leaves every entry point (and the fast code) out of its build.
//
// Entry points, one signature (gdn-kernels.ts), grid [batch, H_v], a block of d_v threads:
//   gdn_recurrent          the default: the variant GDN_RECURRENT_DEFAULT names (gdn-launch.ts
//                          gives it the dynamic shared memory that variant needs)
//   gdn_recurrent_smem     S copied into shared memory by the copy engine while the prologue runs
//                          (dynamic shared memory: fast_smem_floats(d_k, d_v, maxK, true) floats)
//   gdn_recurrent_pipe     decode steps only (mode 0, k = 1): S streamed through shared memory in
//                          blocks of 32 columns (gdn-pipe.cuh; 128 threads, pipe_smem_floats())
//   gdn_recurrent_split    decode steps only: a head over a cluster of 4 CTAs of 32 columns each
//                          (gdn-split.cuh; grid [4·batch, H_v], 128 threads, sm_90)
//   gdn_recurrent_persist  decode steps only: persistent CTAs whose heads' blocks stream through
//                          one ring of shared buffers (gdn-persist.cuh; grid [n], 128 threads)
//   gdn_recurrent_stream   S streamed from global memory, never held (fast_smem_floats(.., false))
//   gdn_recurrent_legacy   the first version (S in 128 registers per thread; no dynamic shared
//                          memory; any maxK and conv K)
// Variant knobs (-D): GDN_SMEM_CPASYNC (smem: cp.async instead of cp.async.bulk on sm_90),
// GDN_FAST_NCHUNK, GDN_STREAM_U, GDN_SMEM_MAXNREG, GDN_STREAM_MAXNREG, GDN_MAXNREG (legacy register cap,
// 0 = none), GDN_ONLY_VARIANT=0/1/2/3/4/5 (only the legacy / smem / stream / pipe / split / persist
// entry point, no default), GDN_PIPE_NB, GDN_PIPE_MAXNREG, GDN_SPLIT_MAXNREG, GDN_PERSIST_NB,
// GDN_PERSIST_MAXNREG.
#include "gdn-legacy.cuh"

#ifndef GDN_NO_RECURRENT_ENTRY
#include "gdn-fast.cuh"
#include "gdn-pipe.cuh"
#include "gdn-split.cuh"
#include "gdn-persist.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GDN_SPLIT_CLUSTER __cluster_dims__(4, 1, 1)  // gdn::split::kCluster
#else
#define GDN_SPLIT_CLUSTER
#endif

#define GDN_VARIANT_LEGACY 0
#define GDN_VARIANT_SMEM 1
#define GDN_VARIANT_STREAM 2
#ifndef GDN_RECURRENT_DEFAULT
#define GDN_RECURRENT_DEFAULT GDN_VARIANT_SMEM
#endif

#define GDN_RECURRENT_PARAMS                                                                                                         \
  const float *qkvz, const float *ba, float *y, const int32_t *slots, const int32_t *rowStarts, const int32_t *seqLens, float *state, \
      float *convRing, const float *convWeight, const float *aLog, const float *dtBias, const float *normWeight, float *stash,       \
      float *convStash, const uint32_t *pending, int mode, int batch, int k, int hk, int hv, int dk, int dv, int convK, int maxK,    \
      float eps, int yDtype
#define GDN_RECURRENT_ARGS                                                                                                          \
  const gdn::Args A{qkvz, ba, y, slots, rowStarts, seqLens, state, convRing, convWeight, aLog, dtBias, normWeight, stash, convStash, \
                    pending, hk, hv, dk, dv, convK, maxK, eps, yDtype};                                                             \
  gdn::check_shape(A);                                                                                                              \
  if (mode != 0 && mode != 1) return;

// 168 registers: 3 CTAs of 128 threads per SM (a few spills in the cold paths); -DGDN_MAXNREG=0:
// no cap (about 250 registers, no spills, 2 CTAs per SM).
#ifndef GDN_MAXNREG
#define GDN_MAXNREG 168
#endif
#if GDN_MAXNREG > 0
#define GDN_LEGACY_REGCAP __maxnreg__(GDN_MAXNREG)
#else
#define GDN_LEGACY_REGCAP
#endif

// One entry point: its name, attributes (register cap, cluster shape) and the call.
#define GDN_RECURRENT_ENTRY(NAME, ATTRS, ...) \
  extern "C" __global__ void ATTRS NAME(GDN_RECURRENT_PARAMS) {  \
    GDN_RECURRENT_ARGS                                           \
    __VA_ARGS__;                                                 \
  }

#if GDN_HAS_VARIANT(0)
GDN_RECURRENT_ENTRY(gdn_recurrent_legacy, GDN_LEGACY_REGCAP, gdn::recurrent_entry<128>(A, mode, batch, k))  // d_k <= 128, zero-padded
#endif
#if GDN_HAS_VARIANT(1)
GDN_RECURRENT_ENTRY(gdn_recurrent_smem, __maxnreg__(GDN_SMEM_MAXNREG), gdn::fast::recurrent_entry<gdn::fast::SmemSrc>(A, mode, batch, k))
#endif
#if GDN_HAS_VARIANT(2)
GDN_RECURRENT_ENTRY(gdn_recurrent_stream, __maxnreg__(GDN_STREAM_MAXNREG), gdn::fast::recurrent_entry<gdn::fast::StreamSrc>(A, mode, batch, k))
#endif
#if GDN_HAS_VARIANT(3)
GDN_RECURRENT_ENTRY(gdn_recurrent_pipe, __maxnreg__(GDN_PIPE_MAXNREG), gdn::pipe::recurrent_entry(A, mode, batch, k))
#endif
#if GDN_HAS_VARIANT(4)
GDN_RECURRENT_ENTRY(gdn_recurrent_split, GDN_SPLIT_CLUSTER __maxnreg__(GDN_SPLIT_MAXNREG), gdn::split::recurrent_entry(A, mode, batch, k))
#endif
#if GDN_HAS_VARIANT(5)
GDN_RECURRENT_ENTRY(gdn_recurrent_persist, __maxnreg__(GDN_PERSIST_MAXNREG), gdn::persist::recurrent_entry(A, mode, batch, k))
#endif

#if GDN_ONLY_VARIANT < 0  // a build of one variant (bench/gdn-tune.sh) leaves the default entry out
#if GDN_RECURRENT_DEFAULT == GDN_VARIANT_LEGACY
GDN_RECURRENT_ENTRY(gdn_recurrent, GDN_LEGACY_REGCAP, gdn::recurrent_entry<128>(A, mode, batch, k))
#elif GDN_RECURRENT_DEFAULT == GDN_VARIANT_SMEM
GDN_RECURRENT_ENTRY(gdn_recurrent, __maxnreg__(GDN_SMEM_MAXNREG), gdn::fast::recurrent_entry<gdn::fast::SmemSrc>(A, mode, batch, k))
#else
GDN_RECURRENT_ENTRY(gdn_recurrent, __maxnreg__(GDN_STREAM_MAXNREG), gdn::fast::recurrent_entry<gdn::fast::StreamSrc>(A, mode, batch, k))
#endif
#endif
#endif  // GDN_NO_RECURRENT_ENTRY
