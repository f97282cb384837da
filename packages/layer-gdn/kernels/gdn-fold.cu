// Gated DeltaNet write-on-accept fold (gdn_fold_*), where the register fold (gdn-fold-state.cuh,
// in gdn-decode.cu) does not take the shape. Layouts and semantics: ../KERNELS.md.
//
// Per (batch position p, value head h), n = naTab[p] accepted rows of the last verify:
//   S ← e^{γ_{n−1}} S + Σ_{t<n} e^{γ_{n−1}−γ_t} k_t u_tᵀ      (one read and one write of S)
// and the conv ring takes the pre-conv inputs of verify rows 0..n−1 (qkvz rows p·k + t) at
// positions L..L+n−1, L = seqLens[p] (the committed length before the verify); only the last K
// of them are written, since earlier ones would be overwritten. Ring channels are partitioned so
// no two CTAs write the same entry: v channels by their own value head's CTA, the 2·d_k q/k
// channels of key head g every r-th by each of g's r CTAs.
//
// Entry points, one signature (gdn-kernels.ts), grid [batch, H_v] (gdn-launch.ts recurrentLaunch):
//   gdn_fold_smem     S copied into shared memory by the copy engine while the stash rows load
//                     (d_v threads, fast_smem_floats(d_k, d_v, maxK) floats)
//   gdn_fold_general  any shape the layer takes: the column in registers (d_v threads, no dynamic
//                     shared memory)
#include "gdn-general.cuh"
#include "gdn-fast.cuh"

#define GDN_FOLD_PARAMS                                                                                                               \
  const float *qkvz, const int32_t *slots, const int32_t *seqLens, const uint32_t *naTab, float *state, float *convRing, float *stash, \
      int batch, int k, int hk, int hv, int dk, int dv, int convK, int maxK
#define GDN_FOLD_ARGS                                                                                                                 \
  const gdn::Args A{qkvz, nullptr, slots, nullptr, seqLens, state, convRing, nullptr, nullptr, nullptr, nullptr, stash, nullptr,      \
                    nullptr, hk, hv, dk, dv, convK, maxK, 0.0f};                                                                      \
  gdn::check_shape(A);

extern "C" __global__ void __maxnreg__(GDN_SMEM_MAXNREG) gdn_fold_smem(GDN_FOLD_PARAMS) {
  GDN_FOLD_ARGS
  gdn::fast::fold_entry(A, naTab, batch, k);
}

extern "C" __global__ void gdn_fold_general(GDN_FOLD_PARAMS) {
  GDN_FOLD_ARGS
  gdn::fold_entry<128>(A, naTab, batch, k);  // d_k <= 128, zero-padded
}
