// Gated DeltaNet write-on-accept fold (gdn_fold). Layouts and semantics: ../KERNELS.md.
//
// Per (batch position p, value head h), n = naTab[p] accepted rows of the last verify:
//   S ← e^{γ_{n−1}} S + Σ_{t<n} e^{γ_{n−1}−γ_t} k_t u_tᵀ      (one read and one write of S)
// and the conv ring takes the pre-conv inputs of verify rows 0..n−1 (qkvz rows p·k + t) at
// positions L..L+n−1, L = seqLens[p] (the committed length before the verify); only the last K
// of them are written, since earlier ones would be overwritten.
//
// Launch: as gdn_recurrent: grid [batch, H_v] (or any grid of ≥ batch·H_v CTAs), block of d_v
// threads (at least d_v), no dynamic shared memory. Thread j keeps column j of S in registers,
// all loads issued up front (the same code as the recurrent kernel's carried fold).
// Ring channels are partitioned so no two CTAs write the same entry: v channels by their own
// value head's CTA, the 2·d_k q/k channels of key head g every r-th by each of g's r CTAs.
#define GDN_NO_RECURRENT_ENTRY
#include "gdn-recurrent.cu"

namespace gdn {

template <int DK>
__device__ __forceinline__ void fold_entry(const Args& A, const uint32_t* naTab, int batch, int k) {
  int b, h;
  cta_coords(batch, A.hv, b, h);
  if (b >= batch || h >= A.hv) return;
  const Geo G = geo_of(A);
  const int slot = A.slots[b];
  if (slot < 0) return;
  const int na = (int)naTab[b];
  if (na <= 0 || na > k || na > A.maxK) return;
  Task T;
  T.slot = slot;
  T.g = h / G.r;
  T.h0 = h;
  T.nh = 1;
  T.m = h - T.g * G.r;
  T.group = G.r == 1;
  T.nPend = 0;
  T.P0 = A.seqLens[b];
  T.L = T.P0;
  T.row0 = b * k;
  T.nrows = 0;
  T.commit = true;
  T.record = false;
  T.recordConv = false;
  T.pendK = A.stash + (size_t)slot * G.stashSeq;
  T.nPendFold = na;
  T.ringEnd = T.P0 + na;
  run_task<DK, false>(A, G, T);
}

}  // namespace gdn

extern "C" __global__ void gdn_fold(const float* qkvz, const int32_t* slots, const int32_t* seqLens, const uint32_t* naTab, float* state,
                                    float* convRing, float* stash, int batch, int k, int hk, int hv, int dk, int dv, int convK, int maxK) {
  const gdn::Args A{qkvz, nullptr, nullptr, slots, nullptr, seqLens, state, convRing, nullptr, nullptr, nullptr, nullptr, stash, nullptr,
                    nullptr, hk, hv, dk, dv, convK, maxK, 0.0f};
  gdn::check_shape(A);
  gdn::fold_entry<128>(A, naTab, batch, k);  // d_k <= 128, zero-padded
}
